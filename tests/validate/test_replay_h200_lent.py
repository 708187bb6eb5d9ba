"""validate's node checks on real output of a lent H200 (fixtures/SOURCES.md, "From the lent H200").

The captures are the exact commands the checks run, taken on 2026-12-04 on one NVIDIA H200
(driver 580.159.04, CUDA 13.0) by scripts/device/h200_run.sh; the compute probe's JSON is the
shipped validate/node_scripts/gpu_compute.py run there. A healthy GPU must pass every check.
"""

from __future__ import annotations

import json

from gpuforge.common.results import Level
from gpuforge.validate.compute import ComputeCheck
from gpuforge.validate.gpu.health import GpuHealthCheck
from gpuforge.validate.gpu.inventory import GpuInventoryCheck
from gpuforge.validate.gpu.topology import TopologyCheck
from gpuforge.validate.thresholds import build_expectations
from tests.validate.gpu_fixtures import FIXTURES, fixture

ONE_H200 = {"gpus_per_node": 1, "interconnect": "none"}


def _levels(results: list) -> dict[str, Level]:
    return {r.check: r.level for r in results}


def test_the_h200s_inventory_and_health_pass() -> None:
    expect = build_expectations(None, "p5en.48xlarge", ONE_H200)
    [gpu] = GpuInventoryCheck().parse(fixture("smi_csv_h200_580_lent_capture.txt")).gpus
    assert (gpu.name, gpu.memory_mib, gpu.driver, gpu.persistence) == ("NVIDIA H200", 143771.0, "580.159.04", "Enabled")
    inv = _levels(GpuInventoryCheck().run_on_output("lent-h200", fixture("smi_csv_h200_580_lent_capture.txt"), expect))
    assert set(inv.values()) == {Level.PASS} and {"gpu.count", "gpu.model", "gpu.memory"} <= set(inv)
    health = GpuHealthCheck().run_on_output("lent-h200", fixture("smi_q_h200_580_lent_capture.txt"), expect)
    assert _levels(health) == {"gpu.ecc": Level.PASS, "gpu.remap": Level.PASS, "gpu.throttle": Level.PASS}


def test_topo_m_with_terminal_underline_escapes_reads_as_one_gpu() -> None:
    """Driver 580 underlines the header row with ESC[4m ... ESC[0m even into a file."""
    text = fixture("topo_h200_580_lent_capture.txt")
    assert "\x1b[4m" in text
    expect = build_expectations(None, "p5en.48xlarge", ONE_H200)
    results = TopologyCheck().run_on_output("lent-h200", text, expect)
    assert [r.level for r in results] == [Level.PASS], [r.message for r in results]


def test_the_h200s_compute_figures_pass_at_each_profiles_precision() -> None:
    """fp16 (cv-training) against 989 with the H200's measured fraction; fp64 (risk-sim) against the
    FP64 tensor-core peak 67, which the measured 55.2 TFLOPS DGEMM exceeds the non-tensor 34 by far."""
    probe = fixture("compute_h200_lent_capture.json")
    for profile, peak in (("cv-training", 989), ("risk-sim", 67)):
        expect = build_expectations(profile, "p5en.48xlarge", ONE_H200)
        by = {r.check: r for r in ComputeCheck().run_on_output("lent-h200", probe, expect)}
        assert by["compute.matmul"].expected == peak
        assert {r.level for r in by.values()} == {Level.PASS}, [r.message for r in by.values()]


def test_the_shipped_probes_runs_pass_the_h200_fraction_and_warned_under_the_generic_one() -> None:
    """The shipped probe's runs in the A/B capture (old-cold, old-warm: the probe as shipped; the
    other two rows are a longer-timing variant that was not kept) and the first capture: each fp16
    figure is above the H200's 0.65 of 989 and below the generic 0.8 that warned on this healthy GPU."""
    runs = [json.loads(ln) for ln in (FIXTURES / "compute_h200_lent_ab.jsonl").read_text().splitlines()]
    shipped = [r for r in runs if r["run"].startswith("old-")] + [json.loads(fixture("compute_h200_lent_capture.json"))]
    fp16 = [g["matmul_tflops"]["fp16"] for r in shipped for g in r["gpus"]]
    assert len(fp16) == 3
    expect = build_expectations("cv-training", "p5en.48xlarge", ONE_H200)
    assert expect.extra["compute_min_fraction"] == 0.65
    assert all(0.65 * 989 < v < 0.8 * 989 for v in fp16), fp16


def test_a_lent_h200_with_a_lifetime_sram_error_is_named_with_the_count_it_was() -> None:
    """The third lent machine (same day) had one aggregate SRAM uncorrectable parity error (SM), none
    since the driver loaded, and NVIDIA's `SRAM Threshold Exceeded: No`. Azure NHC2019 fails either
    count, and so does gpu.ecc; the message says it is a lifetime count and what NVIDIA's flag says."""
    expect = build_expectations(None, "p5en.48xlarge", ONE_H200)
    [h] = GpuHealthCheck().parse(fixture("smi_q_h200_580_lent_sram_ue.txt"))
    assert (h.sram_uncorrectable, h.sram_uncorrectable_volatile, h.sram_threshold_exceeded) == (1, 0, False)
    by = {r.check: r for r in GpuHealthCheck().run_on_output("lent-h200", fixture("smi_q_h200_580_lent_sram_ue.txt"), expect)}
    ecc = by["gpu.ecc"]
    assert ecc.level is Level.ERROR
    assert ecc.message == "00000000:00:06.0: SRAM uncorrectable 1 (lifetime count; NVIDIA's SRAM Threshold Exceeded: No)"
    assert by["gpu.remap"].level is Level.PASS
