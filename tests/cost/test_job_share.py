"""The share rule of `gpuforge cost --jobs` (core/jobcost.py), on jobs whose arithmetic can
be checked by hand: a p4de-like node of 96 CPUs, 1,000,000 MB and 8 GPUs at $40 per node-hour."""

from __future__ import annotations

import dataclasses

import pytest

from gpuforge.core.jobcost import Job, NodePricing, cost_jobs, grand_total, node_share, totals

NODE = NodePricing(
    stack="t", instance_type="p4de.24xlarge", region="us-east-1", purchase_option="on_demand",
    usd_per_node_hour=40.0, cpus=96, memory_mb=1_000_000, gpus=8, gpu_type="a100", source="test",
)  # fmt: skip


def job(job_id: str, *, user: str = "ana", account: str = "vision", nodes: int = 1, cpus: int = 12,
        mem: float = 1000, gpus: int = 1, elapsed_s: int = 3600) -> Job:  # fmt: skip
    return Job(job_id, "train", user, account, "shared", "COMPLETED", "2026-12-04T07:00:00", "2026-12-04T08:00:00",
               elapsed_s, nodes, cpus, mem, gpus, "a100" if gpus else "")  # fmt: skip


def test_one_gpu_of_eight_with_its_cpu_share_pays_an_eighth() -> None:
    [c] = cost_jobs([job("1", cpus=12, gpus=1, elapsed_s=5400)], NODE)
    assert c.node_share == pytest.approx(1 / 8)  # 12/96 = 1/8 CPUs, 1/8 GPUs, 0.1 % memory
    assert c.gpu_hours == pytest.approx(1.5)
    assert c.usd == pytest.approx(40 / 8 * 1.5)  # $7.50


def test_the_largest_fraction_decides_memory_heavy_job() -> None:
    # 2 GPUs (1/4), 8 CPUs (1/12), half the memory: pays half a node
    assert node_share(job("2", cpus=8, mem=500_000, gpus=2), NODE) == pytest.approx(0.5)


def test_cpu_only_job_pays_its_cpus() -> None:
    [c] = cost_jobs([job("3", cpus=48, gpus=0, elapsed_s=1800)], NODE)
    assert (c.node_share, c.gpu_hours) == (pytest.approx(0.5), 0.0)
    assert c.usd == pytest.approx(40 * 0.5 * 0.5)  # $10


def test_exclusive_job_is_allocated_every_cpu_and_pays_whole_nodes() -> None:
    # Slurm allocates an exclusive job every CPU of its nodes, whatever GPUs it asked for
    [c] = cost_jobs([job("4", nodes=2, cpus=192, gpus=2, elapsed_s=7200)], NODE)
    assert c.node_share == pytest.approx(2.0)
    assert c.usd == pytest.approx(2 * 2 * 40)  # two nodes, two hours: $160
    assert c.gpu_hours == pytest.approx(4.0)  # GPU-hours stay what it asked for


def test_multi_node_partial_job() -> None:
    # 2 nodes, 4 GPUs each (8 of 16), 24 CPUs in all (1/8): half of each node
    assert node_share(job("5", nodes=2, cpus=24, gpus=8), NODE) == pytest.approx(1.0)


def test_share_never_exceeds_the_nodes() -> None:
    assert node_share(job("6", cpus=200, gpus=8), NODE) == 1.0


def test_totals_per_user_and_team_add_up() -> None:
    costs = cost_jobs([
        job("1", user="ana", account="vision", cpus=12, gpus=1, elapsed_s=3600),  # 1/8 x 1 h = $5
        job("2", user="ana", account="vision", cpus=24, gpus=2, elapsed_s=1800),  # 1/4 x 0.5 h = $5
        job("3", user="bo", account="search", cpus=96, gpus=8, elapsed_s=900),  # 1 x 0.25 h = $10
    ], NODE)  # fmt: skip
    users = {t.key: (t.jobs, round(t.gpu_hours, 6), round(t.usd or -1, 6)) for t in totals(costs, "user")}
    assert users == {"ana": (2, 2.0, 10.0), "bo": (1, 2.0, 10.0)}
    teams = {t.key: t.usd for t in totals(costs, "team")}
    assert teams == {"vision": pytest.approx(10.0), "search": pytest.approx(10.0)}
    assert grand_total(costs).usd == pytest.approx(20.0)


def test_an_unknown_price_makes_costs_unknown_not_zero() -> None:
    unknown = dataclasses.replace(NODE, usd_per_node_hour=None)
    costs = cost_jobs([job("1")], unknown)
    assert costs[0].usd is None and costs[0].gpu_hours == 1.0
    assert grand_total(costs).usd is None and totals(costs, "team")[0].usd is None
