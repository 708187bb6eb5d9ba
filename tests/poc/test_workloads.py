"""The shipped POC workload scripts, run for real: the real (CPU) torch, tiny sizes, the same file
the node runs (validate/node_scripts/poc_workloads.py), under torchrun where the node uses it.

What only a GPU shows (AMP on tensor cores, NCCL across GPUs, peak memory against
mem_get_info) is written as NVIDIA's PyTorch examples write it and is not exercised here; the
CPU runs prove the models, the bounded measurement, the result document and the watchdog.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest

from gpuforge.validate.poc import SCRIPT, parse_result
from tests.poc.standins import torch_available

pytestmark = pytest.mark.skipif(torch_available() is not None, reason=str(torch_available()))

TINY = {
    "resnet50-train": ["--batch-size", "2", "--image-size", "32", "--warmup-steps", "1", "--max-steps", "2"],
    "bert-infer": ["--batch-sizes", "1,2", "--seq-len", "8", "--warmup-steps", "1", "--max-steps", "3"],
    "mc-fp64": ["--paths-per-chunk", "8192", "--time-steps", "8", "--warmup-steps", "1", "--max-steps", "8"],
}


def _run(*args: str, launcher: tuple[str, ...] = (), timeout: float = 240) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([*launcher, str(SCRIPT), *args] if launcher else [sys.executable, str(SCRIPT), *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, parse_result(proc.stdout), proc.stderr


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[int, dict[str, Any]]]:
    out = {}
    for workload, args in TINY.items():
        rc, doc, _ = _run(workload, *args)
        out[workload] = (rc, doc)
    return out


def test_each_workload_ends_ok_with_provenance_on_cpu(runs: dict[str, tuple[int, dict[str, Any]]]) -> None:
    for workload, (rc, doc) in runs.items():
        assert rc == 0, doc
        assert (doc["workload"], doc["status"]) == (workload, "ok")
        prov = doc["provenance"]
        assert prov["device"]["kind"] == "cpu" and prov["device"]["driver"] is None  # labelled, not dressed up as a GPU
        assert prov["torch"].startswith("2.13.0") and prov["date"].endswith("Z")
        assert workload in prov["command"] and prov["node_count"] == 1


def test_resnet50_is_torchvisions_resnet50_and_reports_an_epoch(runs: dict[str, tuple[int, dict[str, Any]]]) -> None:
    _, doc = runs["resnet50-train"]
    # torchvision.models.resnet50(): 25,557,032 parameters (its model card, "num_params").
    assert doc["config"]["parameters"] == 25_557_032
    assert doc["config"]["amp"] is False  # no tensor cores on a CPU
    r = doc["result"]
    assert r["measured_steps"] == 2 and r["images_per_s"] > 0
    assert r["epoch_images"] == 1_281_167
    # batch 2 x 2 measured steps on one rank, in measured_seconds
    assert r["epoch_seconds"] == pytest.approx(1_281_167 * r["measured_seconds"] / 4, rel=1e-3)
    assert r["memory"] is None and any("mem_get_info" in n for n in doc["notes"])


def test_bert_base_has_bert_base_parameters_and_percentiles(runs: dict[str, tuple[int, dict[str, Any]]]) -> None:
    _, doc = runs["bert-infer"]
    # Hugging Face BertModel(BertConfig()) (bert-base-uncased shape): 109,482,240 parameters.
    assert doc["config"]["parameters"] == 109_482_240
    rows = doc["result"]["per_batch"]
    assert [r["batch_size"] for r in rows] == [1, 2]
    for r in rows:
        lat = r["latency_ms"]
        assert 0 < lat["p50"] <= lat["p99"] and r["steps"] == 3
        assert r["qps"] == pytest.approx(r["batch_size"] / lat["mean"] * 1000, rel=1e-2)
    assert doc["result"]["best_qps"] == max(r["qps"] for r in rows)


def test_mc_fp64_prices_the_option_within_its_error(runs: dict[str, tuple[int, dict[str, Any]]]) -> None:
    _, doc = runs["mc-fp64"]
    r = doc["result"]
    assert doc["config"]["dtype"] == "float64"
    assert r["measured_paths"] == 8 * 8192 and r["within_4_stderr"] is True
    # Black-Scholes call, S=100, K=105, r=3%, sigma=20%, T=1: checked here independently of the script.
    d1 = (math.log(100 / 105) + (0.03 + 0.02) * 1) / 0.2
    d2 = d1 - 0.2
    n = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    assert r["black_scholes"] == pytest.approx(100 * n(d1) - 105 * math.exp(-0.03) * n(d2), abs=1e-6)
    assert abs(r["price"] - r["black_scholes"]) <= 4 * r["stderr"]
    assert r["counted_fp64_gflops"] > 0 and r["paths_per_s"] > 0


def test_resnet50_under_torchrun_sums_the_ranks() -> None:
    """Two ranks on gloo through torchrun's own launcher: DDP, the throughput all-reduce, rank 0 prints."""
    rc, doc, _ = _run("resnet50-train", *TINY["resnet50-train"],
                      launcher=(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"))
    assert rc == 0 and doc["status"] == "ok", doc
    r = doc["result"]
    assert r["ranks"] == 2 and doc["provenance"]["world_size"] == 2
    assert r["images_per_s"] == pytest.approx(2 * r["images_per_s_per_rank"], rel=1e-3)


def test_a_step_past_its_bound_is_unknown_with_the_reason_not_a_figure() -> None:
    rc, doc, _ = _run("mc-fp64", "--paths-per-chunk", "65536", "--time-steps", "64", "--step-timeout", "0.01")
    assert rc == 3 and doc["status"] == "unknown"
    assert "warm-up step 1 did not finish within 0.01 s" in doc["reason"]
    assert "result" not in doc


def test_asking_for_a_gpu_that_is_not_there_is_unknown() -> None:
    rc, doc, _ = _run("bert-infer", "--device", "cuda", "--batch-sizes", "1", "--seq-len", "4")
    assert rc == 3 and doc["status"] == "unknown" and "cuda" in doc["reason"]


def test_the_printed_line_is_one_json_document() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "mc-fp64", *TINY["mc-fp64"]],
                          capture_output=True, text=True, timeout=120, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1 and json.loads(lines[0])["tool"] == "gpuforge-poc"
