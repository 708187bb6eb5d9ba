"""slurmd runs its HealthCheckProgram as it starts, which on a new node is inside the bootstrap's
slurm-start phase, before the self-check: the status file says `running`. In the first-boot
rehearsal of a cv-training cluster (tests/rehearsal/test_slurm_cluster.py) that drained node01 with
`gpuforge-health: bootstrap.status: bootstrap still running phase 'self-check'`, its self-check then
failed on the drain ("slurmd registered but the node is IDLE+DRAIN"), and a failed bootstrap is an
error at every later interval: the node never came back. A running bootstrap is held, not drained."""

from __future__ import annotations

import json

from gpuforge.common.results import Level
from gpuforge.validate.checks import Expectations
from gpuforge.validate.gpu.bootstrap_status import BootstrapStatusCheck
from gpuforge.validate.health import decide
from gpuforge.validate.slurm import NodeStatus
from gpuforge.validate.thresholds import build_expectations

RUNNING = {"schema": 1, "state": "running", "run": 1, "started_at": "2026-12-04T11:32:14Z", "finished_at": None,
           "current_phase": "self-check", "error": None, "phases": [], "versions": {"expected": {}, "observed": {}}}  # fmt: skip


def _expect() -> Expectations:
    return build_expectations("cv-training", "p3.16xlarge")


def test_a_node_whose_bootstrap_is_still_running_is_not_drained() -> None:
    [r] = BootstrapStatusCheck().run_on_output("cv-training-node01", json.dumps(RUNNING), _expect())
    assert r.level is Level.UNKNOWN and "still running phase 'self-check'" in r.message
    status = {n: NodeStatus(n, "idle", "none") for n in ("cv-training-node01", "cv-training-node02")}
    d = decide("cv-training-node01", [r], status, max_drained_percent=25)
    assert d.action == "held", d


def test_a_failed_bootstrap_still_drains() -> None:
    failed = RUNNING | {"state": "failed", "error": {"phase": "driver", "message": "dkms", "exit_code": 1}}
    [r] = BootstrapStatusCheck().run_on_output("cv-training-node01", json.dumps(failed), _expect())
    status = {n: NodeStatus(n, "idle", "none") for n in ("cv-training-node01", "cv-training-node02")}
    assert r.level is Level.ERROR
    assert decide("cv-training-node01", [r], status, max_drained_percent=25).action == "drain"
