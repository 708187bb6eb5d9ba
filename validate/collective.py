"""Multi-node NCCL on pairs of nodes: the command a pair runs, and its judgement.

Pairs, not the whole allocation at once, because a pair result names its two nodes: the
same ring schedule and localisation as iperf3 then tell a slow node from a slow link
(validation-anchors.md C19: pairwise NCCL_ALGO=Ring all_reduce_perf, one large size). The
two-node busbw figure from thresholds is exactly what a pair should reach.
"""

from __future__ import annotations

import shlex
import uuid
from typing import Any

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate import localise
from gpuforge.validate.checks import Expectations, ParseError
from gpuforge.validate.network import iperf, schedule
from gpuforge.validate.stagehost import PairPlan, StageHost
from gpuforge.validate.transport import CommandResult, Job, Outcome

NAME = "nccl.pair"


def command(hosts: tuple[str, str], expect: Expectations, plan: PairPlan) -> tuple[str, float]:
    """The pair's mpirun, launched on the first host with a hostfile it writes itself; and its bound."""
    from gpuforge.validate import nccl

    gpus = int(expect.gpus_per_node or 1)
    nplan = nccl.NcclPlan(min_bytes=plan.min_bytes, max_bytes=plan.max_bytes, iters=plan.iters, timeout_s=plan.timeout_s)
    hostfile = f"/tmp/gpuforge-hostfile-{uuid.uuid4().hex[:12]}"
    run = nccl.multinode_command(
        list(hosts),
        gpus,
        hostfile,
        nplan,
        efa=bool(expect.efa_interfaces),
        gpudirect_rdma=bool(expect.extra.get("gpudirect_rdma")),
        ring=True,
        mpirun=nccl.EFA_MPIRUN if expect.efa_interfaces else "mpirun",
    )
    text = shlex.quote(nccl.hostfile_text(hosts, gpus))
    cmd = f"printf %s {text} > {hostfile} && {{ {run}; rc=$?; rm -f {hostfile}; exit $rc; }}"
    return cmd, float(plan.timeout_s + 2 * nccl.TIMEOUT_GRACE_S)


def slurm_pair(transport: Any, hosts: tuple[str, str], expect: Expectations, plan: PairPlan) -> CommandResult:
    """The pair as one Slurm allocation: `srun --mpi=pmix -N2 --ntasks-per-node=<GPUs>` of
    all_reduce_perf, one rank per GPU, the ranks' environment as mpirun's -x gives it. `hosts` are
    Slurm NodeNames; `transport` is validate.slurm.SlurmTransport."""
    from gpuforge.validate import nccl

    gpus = int(expect.gpus_per_node or 1)
    nplan = nccl.NcclPlan(min_bytes=plan.min_bytes, max_bytes=plan.max_bytes, iters=plan.iters, timeout_s=plan.timeout_s)
    env = nccl.multinode_env(efa=bool(expect.efa_interfaces), gpudirect_rdma=bool(expect.extra.get("gpudirect_rdma")),
                             ring=True)  # fmt: skip
    result: CommandResult = transport.run_allocation(
        list(hosts), gpus, nplan.args("1"), float(plan.timeout_s + nccl.TIMEOUT_GRACE_S), mpi="pmix", env=env
    )
    return result


def judge(a: str, b: str, stdout: str, expect: Expectations) -> tuple[list[CheckResult], float | None]:
    """Results for the pair, and its large-message busbw (GB/s) for localisation when it ran clean."""
    from gpuforge.validate import nccl

    targets = (f"{a}<->{b}",)
    try:
        run = nccl.parse_nccl(stdout)
    except ParseError as exc:
        return [CheckResult(NAME, Level.UNKNOWN, targets, None, None, f"could not parse: {exc}")], None
    results = nccl.evaluate_nccl(targets, run, expect, scope="inter")
    if not run.rows or any(r.level is Level.ERROR and r.check == "nccl.run" for r in results):
        return results, None
    big = max(run.rows, key=lambda r: r.size)
    return results, max(big.oop_busbw, big.ip_busbw)


class PairStage:
    """Runs the pairs on the ring schedule through the runner (`self.r`) and localises them."""

    def __init__(self, runner: StageHost) -> None:
        self.r = runner

    def _round(self, no: int, jobs: list[Job]) -> list[CommandResult]:
        """Over SSH: each pair's mpirun on its first node. Through Slurm (a transport with
        run_allocation): one srun --mpi=pmix allocation per pair, by NodeName, the pairs of a
        round at once (they are disjoint)."""
        transport = self.r.transport
        if not hasattr(transport, "run_allocation"):
            return self.r.run_jobs(f"nccl round {no + 1}", jobs)
        from concurrent.futures import ThreadPoolExecutor

        self.r.progress.stage(f"nccl round {no + 1} (srun)", len(jobs))

        def one(job: Job) -> CommandResult:
            a, b = job.tag
            res = slurm_pair(transport, (a, b), self.r.expect[a], self.r.opt.nccl_plan)
            self.r.progress.advance(f"{a}<->{b}: {res.outcome.value}")
            return res

        with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), self.r.opt.max_workers))) as pool:
            return list(pool.map(one, jobs))

    def run(self) -> localise.Verdict | None:
        """all_reduce_perf on ring pairs of nodes that passed every tier; localised like iperf3."""
        nodes = [n for n in self.r.active() if n.name not in self.r.degraded]
        if len(nodes) < 2:
            return None
        by_name = {n.name: n for n in nodes}
        values: list[localise.PairValue] = []
        for no, rnd in enumerate(schedule.ring([n.name for n in nodes])):
            jobs = []
            for a, b in rnd:
                hosts = (by_name[a].data_address, by_name[b].data_address)
                cmd, bound = command(hosts, self.r.expect[a], self.r.opt.nccl_plan)
                jobs.append(Job(by_name[a], cmd, bound, (a, b)))
            for job, res in zip(jobs, self._round(no, jobs), strict=True):
                a, b = job.tag
                self.r.evidence(f"nccl/round-{no:02d}", f"{a}-{b}", res)
                if self.r.lost(res):
                    continue
                if res.outcome is Outcome.TIMEOUT:
                    label = (iperf.pair_label(a, b),)
                    self.r.report.add(CheckResult(NAME, Level.ERROR, label, None, None, res.detail))
                    continue
                out, busbw = judge(a, b, res.stdout, self.r.expect[a])
                self.r.report.add(out)
                if busbw is not None:
                    values.append(localise.PairValue(a, b, busbw))
        head = self.r.expect[nodes[0].name]
        expected = head.extra.get("nccl_inter_2node_busbw_gbps")
        frac = head.extra.get("nccl_pass_fraction")
        verdict = localise.classify(
            values,
            float(expected) if expected is not None else None,
            float(frac) if frac is not None else None,
            unit="GB/s",
        )
        mat = localise.matrix([n.name for n in nodes], values)
        self.r.report.add(localise.results(verdict, mat, name="nccl.localise", unit="GB/s"))
        return verdict
