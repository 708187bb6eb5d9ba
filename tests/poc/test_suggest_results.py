"""`catalog suggest --profile P --results DIR`: shapes ranked by the workload's cost per unit, each
figure labelled measured or published with what it was measured on; CPU runs never ranked.

The one GPU measurement in this repository (tests/poc/fixtures/h200_lent) is of a machine outside
the catalog, so it cannot be ranked (tests/poc/test_h200_lent_results.py). The measured path is
checked with a real CPU run of the shipped script whose
`provenance.device.kind` the test itself sets to "cuda" (said where it happens): that checks
precedence, labels and arithmetic, never a figure anyone should read as an A100's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuforge.cli import cli
from gpuforge.validate.poc import SCRIPT
from tests.poc.standins import torch_available

ROOT = Path(__file__).resolve().parents[2]


def _suggest(*args: str) -> Any:
    return CliRunner().invoke(cli, ["catalog", "suggest", "--project-dir", str(ROOT), *args])


def _suggest_main(*args: str) -> subprocess.CompletedProcess[str]:
    """In a subprocess: main() owns the `error:` rendering and the exit code, as a user sees them."""
    return subprocess.run([sys.executable, "-m", "gpuforge.cli", "catalog", "suggest", "--project-dir", str(ROOT), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_published_figures_rank_cv_training_shapes_by_cost_per_epoch(tmp_path: Path) -> None:
    res = _suggest("--profile", "cv-training", "--results", str(tmp_path), "--format", "json", "--top", "3")
    assert res.exit_code == 0, res.output
    ranking = json.loads(res.output)["workload_ranking"]
    assert ranking["workload"] == "resnet50-train"
    top = ranking["ranked"]
    assert [r["shape"] for r in top] == ["1× p4de.24xlarge", "1× p4d.24xlarge", "1× p3.8xlarge"]
    assert all(r["label"] == "published" for r in top)
    p4de = top[0]
    assert p4de["figure"] == 16621.0 and p4de["basis"] == "published 8-GPU run"
    assert p4de["system"].startswith("NVIDIA DGX A100 (8x A100 80GB)")
    assert "github.com/NVIDIA/DeepLearningExamples" in p4de["source"]
    # shape cost: compute 27.44705 + gp3 root 200 GiB * 0.08 / 730, for 1,281,167 / 16621 s
    hourly = 27.44705 + 200 * 0.08 / 730
    assert p4de["cost"]["usd_per_unit"]["on_demand"] == pytest.approx(hourly * 1_281_167 / 16621 / 3600, abs=1e-4)
    costs = [r["cost"]["usd_per_unit"]["on_demand"] for r in top]
    assert costs == sorted(costs)
    assert any(u["instance_type"] == "p5.48xlarge" and u["label"] is None for u in ranking["unranked"])  # no H100 figure shipped


def test_the_table_says_published_and_names_the_system(tmp_path: Path) -> None:
    res = _suggest("--profile", "nlp-inference", "--results", str(tmp_path), "--format", "plain", "--top", "30")
    assert res.exit_code == 0, res.output
    t4_rows = [ln for ln in res.output.splitlines() if "× g4dn." in ln and "\tpublished\t" in ln]
    assert t4_rows and all("BERT-base seq 128 FP16, best at batch 12" in ln for ln in t4_rows)
    assert "# source: published: NVIDIA T4 (16GB); TensorRT 8.4.3, CUDA 11.6" in res.output


def test_html_needs_results_and_the_page_charts_both_figures(tmp_path: Path) -> None:
    bad = _suggest_main("--profile", "cv-training", "--html", str(tmp_path / "p.html"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: --html: needs --results DIR")
    page = tmp_path / "page.html"
    res = _suggest("--profile", "cv-training", "--results", str(tmp_path), "--html", str(page), "--format", "plain")
    assert res.exit_code == 0, res.output
    text = page.read_text()
    assert text.count("<rect class='bar cost published'") == 6 and text.count("<rect class='bar rate published'") == 6
    assert "data-shape='1× p4de.24xlarge' data-label='published'" in text and "<script" not in text
    assert "http" not in text.split("<body>")[0]  # nothing fetched: inline CSS only


@pytest.mark.skipif(torch_available() is not None, reason=str(torch_available()))
def test_cpu_runs_are_set_aside_and_a_gpu_result_outranks_the_published_figure(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "resnet50-train", "--batch-size", "2", "--image-size", "32",
                           "--warmup-steps", "1", "--max-steps", "2"], capture_output=True, text=True, timeout=240,
                          check=False, env={"GPUFORGE_POC_INSTANCE_TYPE": "p4d.24xlarge", "PATH": "/usr/bin:/bin"})
    doc = json.loads(proc.stdout.splitlines()[-1])
    (tmp_path / "cpu.json").write_text(json.dumps(doc))
    res = _suggest("--profile", "cv-training", "--results", str(tmp_path), "--format", "json")
    ranking = json.loads(res.output)["workload_ranking"]
    assert [a["why"] for a in ranking["set_aside"]] == ["measured-cpu run on p4d.24xlarge: shown, never ranked"]
    assert {r["label"] for r in ranking["ranked"]} == {"published"}
    # Here the test, not a GPU, relabels the CPU document (see the module docstring).
    doc["provenance"]["device"] |= {"kind": "cuda", "name": "relabelled by the test", "driver": "n/a"}
    (tmp_path / "cpu.json").unlink()
    (tmp_path / "gpu.json").write_text(json.dumps(doc))
    ranking = json.loads(_suggest("--profile", "cv-training", "--results", str(tmp_path), "--format", "json",
                                  "--top", "50").output)["workload_ranking"]
    p4d = next(r for r in ranking["ranked"] + ranking["unranked"] if r["instance_type"] == "p4d.24xlarge")
    assert p4d["label"] == "measured" and p4d["basis"] == "measured on 1 GPU(s), x 8 (linear)"
    assert p4d["figure"] == pytest.approx(8 * doc["result"]["images_per_s_per_rank"], rel=1e-3)
    assert p4d["source"].endswith("gpu.json") and ranking["set_aside"] == []


def test_a_broken_result_file_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    res = _suggest_main("--profile", "cv-training", "--results", str(tmp_path))
    assert res.returncode == 2 and res.stderr.startswith("error: --results:") and "bad.json" in res.stderr
    assert "Traceback" not in res.stderr


def test_the_ranking_page_renders_in_chromium_with_a_bar_per_shape(tmp_path: Path) -> None:
    """Debian's chromium through playwright (as tests/cli/test_html_report.py): the bars have a size
    in proportion to their value, nothing is fetched, the page raises no error."""
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("Debian's chromium is not installed (scripts/setup.sh --with-test-hosts installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    page_path = tmp_path / "ranking.html"
    res = _suggest("--profile", "cv-training", "--results", str(tmp_path), "--html", str(page_path), "--format", "json")
    assert res.exit_code == 0, res.output
    costs = {r["shape"]: r["cost"]["usd_per_unit"]["on_demand"] for r in json.loads(res.output)["workload_ranking"]["ranked"]}
    problems: list[str] = []
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(chromium), headless=True, args=["--no-sandbox"])
        try:
            page = b.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("request", lambda r: problems.append(f"network: {r.url}") if not r.url.startswith("file:") else None)
            page.goto(page_path.as_uri(), wait_until="load")
            page.screenshot(path=str(tmp_path / "ranking.png"), full_page=True)
            widths = page.eval_on_selector_all(
                "rect.bar.cost", "els => els.map(e => [e.dataset.shape, e.getBoundingClientRect().width])")
        finally:
            b.close()
    assert problems == []
    assert [s for s, _ in widths] == list(costs)  # cheapest first, as ranked
    drawn = dict(widths)
    widest = max(costs.values())
    for shape, usd in costs.items():  # bar length in proportion to its cost
        assert drawn[shape] == pytest.approx(drawn[max(costs, key=lambda k: costs[k])] * usd / widest, rel=0.02)
