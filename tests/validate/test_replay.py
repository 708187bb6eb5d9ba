"""The replay shims print real captured output byte for byte, label only on stderr, and the
checks read it exactly as they read the fixture."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gpuforge.common.results import Level
from gpuforge.validate.gpu.topology import TopologyCheck
from gpuforge.validate.nccl import evaluate_nccl, parse_nccl
from gpuforge.validate.thresholds import build_expectations
from tests.validate.gpu_fixtures import fixture

REPLAY = Path(__file__).resolve().parent / "replay"


def run(tool: str, *args: str, scenario: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFORGE_REPLAY")}
    if scenario:
        env["GPUFORGE_REPLAY_SCENARIO"] = scenario
    return subprocess.run([str(REPLAY / tool), *args], capture_output=True, text=True, env=env, timeout=30, check=False)


def test_topo_replay_is_the_capture_and_labelled_on_stderr():
    out = run("nvidia-smi", "topo", "-m")
    assert out.returncode == 0 and out.stdout == fixture("topo_f6a_a100_nvswitch.txt")
    assert out.stderr.startswith("# gpuforge replay of topo_f6a_a100_nvswitch.txt (captured output, not a live GPU)")
    [r] = TopologyCheck().run_on_output("n1", out.stdout, build_expectations(None, "p4de.24xlarge", {}))
    assert r.level is Level.PASS


def test_scenarios_select_other_captures_and_missing_ones_exit_3():
    out = run("mpirun", "-np", "16", "all_reduce_perf", scenario="v100-mesh")
    assert out.stdout == fixture("nccl_f3_legacy_p3dn.txt") and parse_nccl(out.stdout).legacy
    missing = run("nvidia-smi", "--query-gpu=index", "--format=csv")
    assert missing.returncode == 3 and missing.stdout == "" and "no captured output" in missing.stderr
    unknown = run("fi_info", "-p", "efa", scenario="no-such-scenario")
    assert unknown.returncode == 3 and unknown.stdout == ""


def test_replayed_nccl_run_gets_the_same_verdict_as_the_fixture():
    out = run("all_reduce_perf", "-b", "8", "-e", "2G")
    e = build_expectations("cv-training", None, {})
    from_replay = evaluate_nccl(("a<->b",), parse_nccl(out.stdout), e, scope="inter")
    from_file = evaluate_nccl(("a<->b",), parse_nccl(fixture("nccl_f1_p4de_2node_srun.txt")), e, scope="inter")
    assert from_replay == from_file
