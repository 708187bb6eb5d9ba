"""build_expectations: every number from profile/catalog/thresholds.yaml with its source;
overrides; baselines."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpuforge.common.errors import InputError
from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations
from gpuforge.validate.thresholds import (
    ThresholdsError,
    apply_baseline,
    baseline_figures,
    build_expectations,
    load_baseline,
    policy,
    save_baseline,
)


def numbers(e: Expectations) -> dict[str, object]:
    fields = {f.name: getattr(e, f.name) for f in dataclasses.fields(e) if f.name not in {"extra", "sources"}}
    return {k: v for k, v in {**fields, **e.extra}.items() if v is not None}


@pytest.mark.parametrize("profile", ["cv-training", "nlp-inference", "risk-sim"])
def test_every_number_has_a_source(profile):
    e = build_expectations(profile, None, {})
    assert set(numbers(e)) <= set(e.sources)
    assert all(e.sources[k] for k in numbers(e))


def test_cv_training_is_p4de_with_published_nccl_figures():
    e = build_expectations("cv-training", None, {})
    assert (e.gpus_per_node, e.gpu_model, e.interconnect, e.efa_interfaces) == (8, "A100-80GB", "nvswitch", 4)
    assert e.nccl_busbw_gbps == 228 and "nd96amsr_a100_v4" in e.sources["nccl_busbw_gbps"]
    assert e.extra["nccl_inter_2node_busbw_gbps"] == 78.33
    assert e.extra["compute_precision"] == "fp16" and e.extra["compute_tflops"] == 312
    assert e.sources["gpus_per_node"] == "catalog: p4de.24xlarge"


def test_t4_has_no_invented_nccl_figure():
    e = build_expectations("nlp-inference", None, {})
    assert e.gpu_model == "T4" and e.nccl_busbw_gbps is None and "nccl_busbw_gbps" not in e.sources
    assert "nvlink_links_per_gpu" not in e.extra


def test_overrides_win_and_say_inventory():
    e = build_expectations("risk-sim", "p4d.24xlarge", {"gpus_per_node": 4, "nccl_busbw_gbps": 150.0})
    assert e.gpus_per_node == 4 and e.sources["gpus_per_node"] == "inventory"
    # DGEMM on an A100 runs on its FP64 tensor cores: judged against 19.5, not the non-tensor 9.7
    assert e.gpu_model == "A100" and e.extra["compute_precision"] == "fp64" and e.extra["compute_tflops"] == 19.5


def test_bad_names_are_clear_errors():
    with pytest.raises(ThresholdsError, match=r"did you mean 'cv-training'"):
        build_expectations("cv-trainng", None, {})
    with pytest.raises(ThresholdsError, match=r"p4de\.24xlarge"):
        build_expectations(None, "p4de.24xlrge", {})


def test_policy_falls_back_to_data_for_hand_made_expectations():
    assert policy(Expectations(), "nccl_pass_fraction") == 0.9
    assert policy(Expectations(extra={"nccl_pass_fraction": 0.5}), "nccl_pass_fraction") == 0.5
    assert policy(Expectations(), "no such key") is None


def test_baseline_round_trip_replaces_figures(tmp_path):
    results = [
        CheckResult("nccl.busbw", Level.PASS, ("n1",), 231.5, 228, ""),
        CheckResult("nccl.busbw", Level.PASS, ("n2",), 229.0, 228, ""),
        CheckResult("nccl.busbw", Level.ERROR, ("n3",), 20.0, 228, ""),  # never baseline a failure
        CheckResult("compute.matmul", Level.PASS, ("n1",), 270.0, 312, ""),
        CheckResult("gpu.topology", Level.PASS, ("n1",), [["X", "NV12"], ["NV12", "X"]], None, ""),
    ]
    figures = baseline_figures(results)
    assert figures == {"nccl_busbw_gbps": 229.0, "compute_tflops": 270.0, "topology_matrix": [["X", "NV12"], ["NV12", "X"]]}
    path = tmp_path / "base.json"
    save_baseline(path, figures, profile="cv-training", instance_type="p4de.24xlarge")
    base = load_baseline(path)
    e = apply_baseline(build_expectations("cv-training", None, {}), base)
    assert e.nccl_busbw_gbps == 229.0 and e.sources["nccl_busbw_gbps"].startswith(f"baseline: {path}")
    assert e.extra["compute_tflops"] == 270.0 and e.extra["compute_below_level"] == "error"
    assert e.extra["topology_matrix"] == [["X", "NV12"], ["NV12", "X"]]


def test_bad_baselines(tmp_path):
    with pytest.raises(ThresholdsError, match="unknown figure"):
        save_baseline(tmp_path / "x.json", {"speed": 1}, profile=None, instance_type=None)
    (tmp_path / "b.json").write_text(json.dumps({"schema": 7, "figures": {}}))
    with pytest.raises(ThresholdsError, match="not a gpuforge baseline"):
        load_baseline(tmp_path / "b.json")
    (tmp_path / "c.json").write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):  # the one reader (common/inputfile.py)
        load_baseline(tmp_path / "c.json")


def test_fp64_is_judged_against_the_tensor_core_peak_where_the_gpu_has_one():
    """The lent H200 ran DGEMM at 55.2 TFLOPS (2026-12-04), above its 34 non-tensor peak: against
    34 an H200 at half its DGEMM speed would pass. V100 has no FP64 tensor cores and keeps 7.8."""
    from gpuforge.validate.compute import ComputeCheck

    h200 = build_expectations("risk-sim", "p5en.48xlarge", {})
    assert h200.extra["compute_tflops"] == 67 and h200.extra["compute_peak_field"] == "fp64_tensor_tflops"
    assert build_expectations("risk-sim", None, {}).extra["compute_tflops"] == 7.8  # p3dn: V100
    gpu = {"name": "NVIDIA H200", "matmul_tflops": {"fp64": 30.0, "fp16": 700.0, "fp32": 50.0}, "copy_gbs": 4100.0}
    doc = {"tool": "gpuforge-compute", "schema": 1, "backend": "torch", "gpus": [{"index": i, **gpu} for i in range(8)]}
    half = json.dumps(doc)
    results = {r.check: r for r in ComputeCheck().run_on_output("n1", half, h200)}
    assert results["compute.matmul"].level is Level.WARNING and "45% of 67" in results["compute.matmul"].message
