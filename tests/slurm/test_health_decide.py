"""The health check's decisions (validate/health.py): pure, on results and sinfo states."""

from __future__ import annotations

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.health import REASON_PREFIX, decide
from gpuforge.validate.slurm import NodeStatus

OK = [CheckResult("gpu.count", Level.PASS, ("n1",), 8, 8, "8 GPUs")]
BAD = [CheckResult("gpu.count", Level.ERROR, ("n1",), 7, 8, "7 of 8 GPUs visible")]
UNKNOWN = [CheckResult("gpu.inventory", Level.UNKNOWN, ("n1",), None, None, "header but no GPU rows")]


def _cluster(n: int, drained: dict[str, str] | None = None) -> dict[str, NodeStatus]:
    drained = drained or {}
    return {
        f"n{i}": NodeStatus(f"n{i}", "drained" if f"n{i}" in drained else "idle", drained.get(f"n{i}", "none"))
        for i in range(1, n + 1)
    }


def test_a_failing_node_is_drained_with_the_checks_own_reason() -> None:
    d = decide("n1", BAD, _cluster(8), max_drained_percent=25)
    assert d.action == "drain" and d.reason == f"{REASON_PREFIX} gpu.count: 7 of 8 GPUs visible"
    assert d.exit_code == 1


def test_unknown_evidence_drains_only_saying_so_or_is_held() -> None:
    d = decide("n1", UNKNOWN, _cluster(8), max_drained_percent=25)
    assert d.action == "drain" and d.reason.startswith(f"{REASON_PREFIX} unknown evidence: gpu.inventory")
    held = decide("n1", UNKNOWN, _cluster(8), max_drained_percent=25, drain_on_unknown=False)
    assert held.action == "held" and "evidence unknown for gpu.inventory" in held.reason and held.exit_code == 1


def test_the_bound_keeps_a_broken_check_from_draining_the_partition() -> None:
    ours = {"n2": f"{REASON_PREFIX} gpu.count: x", "n3": f"{REASON_PREFIX} gpu.count: x"}
    d = decide("n1", BAD, _cluster(8, ours), max_drained_percent=25)  # 2 of 8 drained; a third would be 37 %
    assert d.action == "held" and "2 of 8 node(s) already drained" in d.reason and "25%" in d.reason
    # drains by others do not count against the bound
    d = decide("n1", BAD, _cluster(8, {"n2": "admin: bad DIMM", "n3": "admin: bad PSU"}), max_drained_percent=25)
    assert d.action == "drain"
    # a one-node cluster can never have 25 % of it drained: the bound holds there too
    assert decide("n1", BAD, _cluster(1), max_drained_percent=25).action == "held"


def test_resumed_only_when_it_was_our_drain() -> None:
    ours = _cluster(4, {"n1": f"{REASON_PREFIX} gpu.count: 7 of 8 GPUs visible"})
    d = decide("n1", OK, ours, max_drained_percent=25)
    assert d.action == "resume" and d.exit_code == 0
    theirs = _cluster(4, {"n1": "admin: replacing a fan"})
    assert decide("n1", OK, theirs, max_drained_percent=25).action == "none"
    assert decide("n1", BAD, theirs, max_drained_percent=25).action == "none"  # never overwrite their reason


def test_a_healthy_node_stays_as_it_is() -> None:
    d = decide("n1", OK, _cluster(4), max_drained_percent=25)
    assert (d.action, d.exit_code) == ("none", 0)
