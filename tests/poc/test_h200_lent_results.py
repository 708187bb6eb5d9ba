"""The POC workloads' real output on a lent H200 (2026-12-04; tests/poc/fixtures/h200_lent/SOURCES.md).

These are the shipped validate/node_scripts/poc_workloads.py run by scripts/device/poc_capture.sh
on one NVIDIA H200 (torch 2.11.0+cu130, driver 580.159.04): AMP training, fp16 inference and the
fp64 Monte Carlo ran on CUDA, with torch.cuda.mem_get_info. The machine is not an EC2 instance
type, so `catalog suggest` must set the results aside by name rather than rank them as p5en.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from gpuforge.cli import cli
from gpuforge.validate.poc import load_results

ROOT = Path(__file__).resolve().parents[2]
LENT = Path(__file__).resolve().parent / "fixtures" / "h200_lent"


def test_the_gpu_runs_load_as_cuda_results_with_their_figures() -> None:
    docs = {Path(d["_file"]).stem: d for d in load_results(LENT)}
    assert set(docs) == {"resnet50-train", "resnet50-train-bs256", "bert-infer", "mc-fp64"}
    for doc in docs.values():
        dev = doc["provenance"]["device"]
        assert doc["status"] == "ok" and dev["kind"] == "cuda" and dev["name"] == "NVIDIA H200"
    train = docs["resnet50-train-bs256"]
    assert train["config"]["amp"] is True and train["result"]["images_per_s"] > 0
    mem = train["result"]["memory"]
    assert 0 < mem["peak_allocated_bytes"] <= mem["peak_reserved_bytes"] < mem["mem_get_info_total_bytes"]
    mc = docs["mc-fp64"]["result"]
    assert mc["within_4_stderr"] is True and abs(mc["price"] - mc["black_scholes"]) <= 4 * mc["stderr"]


def test_suggest_sets_a_machine_outside_the_catalog_aside_by_name() -> None:
    res = CliRunner().invoke(
        cli, ["catalog", "suggest", "--project-dir", str(ROOT), "--profile", "cv-training", "--results", str(LENT),
              "--format", "plain"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "resnet50-train.json: instance type 'lent-h200' is not in the catalog" in res.output
    assert "measured" not in [line.split("\t")[4] for line in res.output.splitlines() if line[:1].isdigit()]
