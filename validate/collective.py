"""Multi-node NCCL on pairs of nodes: the command a pair runs, and its judgement.

Pairs, not the whole allocation at once, because a pair result names its two nodes: the
same ring schedule and localisation as iperf3 then tell a slow node from a slow link
(validation-anchors.md C19: pairwise NCCL_ALGO=Ring all_reduce_perf, one large size). The
two-node busbw figure from thresholds is exactly what a pair should reach.
"""

from __future__ import annotations

import shlex
import uuid
from dataclasses import dataclass

from gpuforge.results import CheckResult, Level
from validate.checks import Expectations, ParseError

NAME = "nccl.pair"


@dataclass(frozen=True)
class PairPlan:
    """One large message size: the busbw there is the figure; a sweep would cost minutes per pair."""

    min_bytes: str = "1G"
    max_bytes: str = "1G"
    iters: int = 20
    timeout_s: int = 120


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("validate.nccl") is not None


def command(hosts: tuple[str, str], expect: Expectations, plan: PairPlan) -> tuple[str, float]:
    """The pair's mpirun, launched on the first host with a hostfile it writes itself; and its bound."""
    from validate import nccl

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
    )
    text = shlex.quote(nccl.hostfile_text(hosts, gpus))
    cmd = f"printf %s {text} > {hostfile} && {{ {run}; rc=$?; rm -f {hostfile}; exit $rc; }}"
    return cmd, float(plan.timeout_s + 2 * nccl.TIMEOUT_GRACE_S)


def judge(a: str, b: str, stdout: str, expect: Expectations) -> tuple[list[CheckResult], float | None]:
    """Results for the pair, and its large-message busbw (GB/s) for localisation when it ran clean."""
    from validate import nccl

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
