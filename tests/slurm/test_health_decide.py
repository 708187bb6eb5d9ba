"""The health check's decisions (validate/health.py): pure, on results and sinfo states."""

from __future__ import annotations

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.health import REASON_PREFIX, allowed_drains, decide
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


def test_missing_evidence_never_drains() -> None:
    d = decide("n1", UNKNOWN, _cluster(8), max_drained_percent=25)
    assert d.action == "held" and "evidence unknown for gpu.inventory" in d.reason and d.exit_code == 1
    assert "never drains" in d.reason
    # not on a one-node cluster either, and unknown next to a pass does not drain
    assert decide("n1", UNKNOWN + OK, _cluster(1), max_drained_percent=25).action == "held"
    # a node we drained earlier stays drained while its evidence is unknown (not resumed)
    ours = _cluster(4, {"n1": f"{REASON_PREFIX} gpu.count: 7 of 8 GPUs visible"})
    d = decide("n1", UNKNOWN, ours, max_drained_percent=25)
    assert d.action == "held" and "stays drained" in d.reason


def test_a_drained_node_is_resumed_when_its_check_passes_though_other_evidence_is_unknown() -> None:
    """Drained for gpu.count; gpu.count passes again and the kernel log is unreadable (gpu.xid
    unknown, as in a container): the unknown evidence did not drain it and must not keep it drained
    (the Slurm cluster rehearsal's node stayed drained for good). Its own check unknown still holds."""
    ours = _cluster(4, {"n1": f"{REASON_PREFIX} gpu.count: 7 of 8 GPUs visible"})
    xid = [CheckResult("gpu.xid", Level.UNKNOWN, ("n1",), None, None, "no kernel log readable")]
    d = decide("n1", OK + xid, ours, max_drained_percent=25)
    assert d.action == "resume" and d.reason.startswith("gpu.count passes again and no check fails")
    assert "evidence unknown for gpu.xid" in d.reason and d.exit_code == 1  # the unknown is still reported
    count_unknown = [CheckResult("gpu.count", Level.UNKNOWN, ("n1",), None, 8, "nvidia-smi timed out")]
    assert decide("n1", count_unknown, ours, max_drained_percent=25).action == "held"
    # an error elsewhere keeps it drained (one reason, the first)
    other = [CheckResult("gpu.ecc", Level.ERROR, ("n1",), 1, 0, "SRAM uncorrectable 1")]
    assert decide("n1", OK + other, ours, max_drained_percent=25).action == "none"


def test_a_one_node_clusters_node_with_a_failed_gpu_is_drained() -> None:
    """cv-training ships one node: floor(1 x 25 / 100) was 0, so it could never be drained."""
    d = decide("n1", BAD, _cluster(1), max_drained_percent=25)
    assert d.action == "drain" and d.reason == f"{REASON_PREFIX} gpu.count: 7 of 8 GPUs visible"
    # risk-sim ships two: one of them may be drained
    assert decide("n1", BAD, _cluster(2), max_drained_percent=25).action == "drain"


def test_a_check_failing_on_every_node_is_a_finding_not_a_mass_drain() -> None:
    # two nodes, the other already drained for the same check: the check or the fabric is suspect
    other = {"n2": f"{REASON_PREFIX} gpu.count: 7 of 8 GPUs visible"}
    d = decide("n1", BAD, _cluster(2, other), max_drained_percent=100)
    assert d.action == "held" and "gpu.count fails on every node of the cluster (2)" in d.reason
    assert "finding about the check or the fabric" in d.reason
    # the same with every one of eight nodes, even where the bound would allow it
    seven = {f"n{i}": f"{REASON_PREFIX} gpu.count: x" for i in range(2, 9)}
    assert decide("n1", BAD, _cluster(8, seven), max_drained_percent=100).action == "held"
    # a different check on the other node is separate evidence: the bound decides
    xid = {"n2": f"{REASON_PREFIX} gpu.xid: Xid 79 (fallen off the bus)"}
    assert decide("n1", BAD, _cluster(2, xid), max_drained_percent=100).action == "drain"
    # drains by others (an admin's reason) are no evidence about our check
    assert decide("n1", BAD, _cluster(2, {"n2": "admin: bad DIMM"}), max_drained_percent=25).action == "drain"


def test_the_bound_keeps_a_broken_check_from_draining_the_partition() -> None:
    ours = {"n2": f"{REASON_PREFIX} gpu.count: x", "n3": f"{REASON_PREFIX} gpu.count: x"}
    d = decide("n1", BAD, _cluster(8, ours), max_drained_percent=25)  # 2 of 8 drained; a third would be 37 %
    assert d.action == "held" and "2 of 8 node(s) already drained" in d.reason and "25%" in d.reason
    # drains by others do not count against the bound
    d = decide("n1", BAD, _cluster(8, {"n2": "admin: bad DIMM", "n3": "admin: bad PSU"}), max_drained_percent=25)
    assert d.action == "drain"
    # at least one node may always be drained, never more than the bound: two of four at 25 %
    one = {"n2": f"{REASON_PREFIX} gpu.xid: x"}
    assert decide("n1", BAD, _cluster(4, one), max_drained_percent=25).action == "held"
    assert [allowed_drains(n, 25) for n in (0, 1, 2, 3, 4, 8, 256)] == [0, 1, 1, 1, 1, 2, 64]


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
