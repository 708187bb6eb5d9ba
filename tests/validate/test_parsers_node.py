"""Xid scan, EFA provider, bootstrap status and compute probe: parsers and checks."""

from __future__ import annotations

import json
import subprocess

from gpuforge.common.results import Level
from gpuforge.validate.compute import SCRIPT, ComputeCheck
from gpuforge.validate.gpu.bootstrap_status import MISSING, BootstrapStatusCheck
from gpuforge.validate.gpu.efa import MARK as FI_MARK
from gpuforge.validate.gpu.efa import EfaProviderCheck
from gpuforge.validate.gpu.xid import MARK as XID_MARK
from gpuforge.validate.gpu.xid import XidScanCheck
from gpuforge.validate.registry import node_checks
from gpuforge.validate.thresholds import build_expectations
from tests.validate.gpu_fixtures import fixture, truncate

P4DE = build_expectations("cv-training", None, {})
P3DN = build_expectations("risk-sim", None, {})
G4DN_SMALL = build_expectations(None, "g4dn.xlarge", {})


def xid_output(body: str, source: str = "dmesg") -> str:
    return f"{XID_MARK} source={source}\n{body}{XID_MARK} end\n"


def test_xid_f4_line_is_fatal_119_with_its_pci_address():
    [r] = XidScanCheck().run_on_output("n1", xid_output(fixture("xid_f4_kernel_line.txt")), P4DE)
    assert r.level is Level.ERROR and r.observed == [{"pci": "PCI:0002:00:00", "xid": 119}]
    assert "GSP" in r.message


def test_xid_nonfatal_clean_unreadable_and_truncated():
    line = fixture("xid_f4_kernel_line.txt").replace("): 119,", "): 13,")
    assert XidScanCheck().run_on_output("n1", xid_output(line), P4DE)[0].level is Level.WARNING
    assert XidScanCheck().run_on_output("n1", xid_output("", "journalctl"), P4DE)[0].level is Level.PASS
    assert XidScanCheck().run_on_output("n1", xid_output("", "none"), P4DE)[0].level is Level.UNKNOWN
    cut = truncate(xid_output(fixture("xid_f4_kernel_line.txt")), 2)
    assert XidScanCheck().run_on_output("n1", cut, P4DE)[0].level is Level.UNKNOWN
    assert XidScanCheck().run_on_output("n1", "", P4DE)[0].level is Level.UNKNOWN


def test_xid_command_runs_and_is_understood_here():
    # the real command on this machine: readable or not, its output must parse, never crash
    out = subprocess.run(["sh", "-c", XidScanCheck().command()], capture_output=True, text=True, timeout=60, check=False)
    results = XidScanCheck().run_on_output("here", out.stdout, P4DE)
    assert results[0].level in {Level.PASS, Level.WARNING, Level.ERROR, Level.UNKNOWN}
    assert "could not parse" not in results[0].message


def fi(body: str, rc: int = 0) -> str:
    return f"{body}{FI_MARK} rc={rc}\n"


def test_efa_f12_one_rdm_domain():
    check = EfaProviderCheck()
    info = check.parse(fi(fixture("fi_info_f12_efa.txt")))
    assert info.rdm_domains() == ["efa_0-rdm"] and len(info.providers) == 3
    assert check.evaluate("n1", info, P3DN)[0].level is Level.PASS  # p3dn: 1 EFA
    [four] = check.evaluate("n1", info, P4DE)  # p4de: 4 EFA, only one seen
    assert four.level is Level.ERROR and "expected 4" in four.message
    assert check.evaluate("n1", info, G4DN_SMALL)[0].level is Level.INFO


def test_efa_missing_tool_no_provider_truncated_garbled():
    check = EfaProviderCheck()
    assert check.run_on_output("n1", f"{FI_MARK} not-installed\n", P3DN)[0].level is Level.ERROR
    assert check.run_on_output("n1", fi("", rc=1), P3DN)[0].level is Level.ERROR
    assert check.run_on_output("n1", truncate(fixture("fi_info_f12_efa.txt"), 4), P3DN)[0].level is Level.UNKNOWN
    garbled = fi(fixture("fi_info_f12_efa.txt").replace("    domain:", "    domain ="))
    assert check.run_on_output("n1", garbled, P3DN)[0].level is Level.UNKNOWN


# --- bootstrap status -------------------------------------------------------------------------
# Not captured: documents in the shape bootstrap/templates/runner.sh.j2 `status_write` emits
# (schema 1; state; started_at/finished_at; current_phase; error {phase, message, exit_code};
# phases; versions {expected, observed}).


def status_doc(state: str, observed: dict[str, str], *, phase: str | None = None, error: str | None = None) -> str:
    doc = {
        "schema": 1, "run": 1, "state": state, "started_at": "2026-01-01T00:00:00Z",
        "finished_at": None if state == "running" else "2026-01-01T00:09:00Z",
        "current_phase": phase if state == "running" else None,
        "error": {"phase": phase, "message": error, "exit_code": 1} if state == "failed" else None,
        "phases": [{"name": "driver", "state": "succeeded", "started_at": None, "finished_at": None,
                    "changed": True, "error": None}],
        "node": "n1", "stack": "dev", "profile": "cv-training", "expect": {},
        "versions": {"expected": {"driver": "550"}, "observed": observed},
    }  # fmt: skip
    return json.dumps(doc, indent=2)


def test_bootstrap_succeeded_running_failed_drifted():
    check = BootstrapStatusCheck()
    assert check.run_on_output("n1", status_doc("succeeded", {"driver": "550"}), P4DE)[0].level is Level.PASS
    [d] = check.run_on_output("n1", status_doc("succeeded", {"driver": "535"}), P4DE)
    assert d.level is Level.ERROR and d.observed == {"driver": {"expected": "550", "observed": "535"}}
    running = status_doc("running", {}, phase="driver")
    assert "still running phase 'driver'" in check.run_on_output("n1", running, P4DE)[0].message
    [f] = check.run_on_output("n1", status_doc("failed", {}, phase="efa", error="no EFA device"), P4DE)
    assert f.level is Level.ERROR and "'efa'" in f.message and "no EFA device" in f.message


def test_bootstrap_missing_truncated_and_foreign():
    check = BootstrapStatusCheck()
    assert check.run_on_output("n1", MISSING + "\n", P4DE)[0].level is Level.ERROR  # gpuforge profile
    assert check.run_on_output("n1", MISSING + "\n", G4DN_SMALL)[0].level is Level.INFO  # no profile: on-prem
    ok = status_doc("succeeded", {"driver": "550"})
    assert check.run_on_output("n1", ok[: len(ok) // 2], P4DE)[0].level is Level.UNKNOWN
    assert check.run_on_output("n1", json.dumps({"schema": 2, "state": "succeeded"}), P4DE)[0].level is Level.UNKNOWN
    assert check.run_on_output("n1", json.dumps({"schema": 1, "state": "done"}), P4DE)[0].level is Level.UNKNOWN


# --- compute probe ---------------------------------------------------------------------------


def test_probe_without_cuda_prints_an_error_json_that_reads_unknown():
    # real output of the shipped script on this GPU-less machine (no torch, or torch without CUDA)
    out = subprocess.run(["sh", "-c", ComputeCheck().command()], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 1
    [r] = ComputeCheck().run_on_output("here", out.stdout, P4DE)
    assert r.level is Level.UNKNOWN and "compute probe could not run" in r.message
    assert SCRIPT.read_text() in ComputeCheck().command()


def probe_json(tflops: list[float], copy: list[float], key: str = "fp16") -> str:
    """Not captured (no GPU here): the probe's success shape, with chosen figures."""
    gpus = [
        {"index": i, "name": "NVIDIA A100-SXM4-80GB", "matmul_tflops": {"fp16": 1.0, "fp32": 1.0, "fp64": 1.0} | {key: t},
         "copy_gbs": c}
        for i, (t, c) in enumerate(zip(tflops, copy, strict=True))
    ]  # fmt: skip
    return json.dumps({"tool": "gpuforge-compute", "schema": 1, "backend": "torch", "gpus": gpus})


def by_check(results):
    return {r.check: r for r in results}


def test_compute_judged_at_the_profiles_precision():
    healthy = probe_json([260.0] * 8, [1700.0] * 8)  # 83% of 312 fp16, 83% of 2039 GB/s
    results = by_check(ComputeCheck().run_on_output("n1", healthy, P4DE))
    assert [results[k].level for k in ("compute.matmul", "compute.membw", "compute.peers")] == [Level.PASS] * 3
    assert results["compute.matmul"].expected == 312.0
    slow = by_check(ComputeCheck().run_on_output("n1", probe_json([200.0] * 8, [1700.0] * 8), P4DE))
    assert slow["compute.matmul"].level is Level.WARNING and "64%" in slow["compute.matmul"].message
    risk = by_check(ComputeCheck().run_on_output("n1", probe_json([7.0] * 8, [800.0] * 8, "fp64"), P3DN))
    assert risk["compute.matmul"].expected == 7.8 and risk["compute.matmul"].level is Level.PASS


def test_one_weak_gpu_is_an_error_and_missing_gpus_too():
    weak = probe_json([260.0] * 7 + [200.0], [1700.0] * 8)
    result = by_check(ComputeCheck().run_on_output("n1", weak, P4DE))["compute.peers"]
    assert result.level is Level.ERROR and "matmul GPU7" in result.observed
    [few] = ComputeCheck().run_on_output("n1", probe_json([260.0] * 7, [1700.0] * 7), P4DE)
    assert few.level is Level.ERROR and few.observed == 7


def test_compute_broken_outputs_are_unknown():
    good = probe_json([260.0] * 8, [1700.0] * 8)
    for bad in (good[: len(good) // 2], good.replace('"schema": 1', '"schema": 9'), good.replace("1700.0", "-1.0", 1), ""):
        assert ComputeCheck().run_on_output("n1", bad, P4DE)[0].level is Level.UNKNOWN


def test_registry_is_tier_ordered_with_inventory_first():
    checks = node_checks()
    assert checks[0].name == "gpu.inventory" and checks[0].tier == 0
    assert [c.tier for c in checks] == sorted(c.tier for c in checks)
    assert len({c.name for c in checks}) == len(checks)
    assert {"compute", "nccl.local"} == {c.name for c in checks if c.tier > 0}
