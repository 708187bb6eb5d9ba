"""Issue 13 item 10: `gpuforge validate --html FILE`, looked at in a real headless Chromium.

The browser is Debian's `chromium` (scripts/setup.sh installs it), driven through the
`playwright` Python package with executable_path (its wheel carries the driver; no browser is
downloaded). Checks: the page renders with no console errors or failed requests (it is
self-contained), the heatmap has one cell per measured pair, the NCCL chart plots every
parsed row, the evidence links resolve, and a screenshot is taken in the test run.

The heatmap comes from a real `gpuforge validate --schedule full` over the netns test hosts
(root); the NCCL chart from replayed real nccl-tests output (tests/validate/fixtures/SOURCES.md:
nccl_f1_p4de_2node_srun.txt) placed in an evidence directory the way the runner writes it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Gf, base_env

CHROMIUM = Path("/usr/bin/chromium")
FIXTURES = Path(__file__).resolve().parents[1] / "validate" / "fixtures"


@pytest.fixture
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (scripts/setup.sh --with-test-hosts installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


def _open(browser: Any, page_path: Path, shot: Path) -> tuple[Any, list[str]]:
    problems: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.on("request", lambda r: problems.append(f"network request: {r.url}") if not r.url.startswith("file:") else None)
    page.goto(page_path.as_uri(), wait_until="load")
    page.screenshot(path=str(shot), full_page=True)
    return page, problems


@pytest.mark.netns
@pytest.mark.slow
def test_validate_html_heatmap_in_chromium(gf: Gf, tmp_path: Path, browser: Any) -> None:
    from tests.validate.testbed import Testbed, missing_requirements

    why = missing_requirements()
    if why:
        pytest.skip(why)
    bed = Testbed(3).up()
    try:
        bed.shape_all(100)
        inv = tmp_path / "inv.json"
        inv.write_text(json.dumps(bed.inventory(expect={"link_gbps": 0.1})))
        out, html_page = tmp_path / "ev", tmp_path / "report.html"
        r = gf("validate", "--inventory", str(inv), "--checks", "network", "--schedule", "full", "--format", "json",
               "--out", str(out), "--html", str(html_page), "--iperf-seconds", "2", "--connect-timeout", "2",
               env=base_env(), timeout=300)
    finally:
        bed.down()
    assert r.returncode in (0, 1), r.stderr[-3000:]
    matrix = json.loads((out / "report.json").read_text())["context"]["matrix_gbps"]
    measured = {(a, b) for a, row in matrix.items() for b, v in row.items() if v is not None}
    assert len(measured) == 6  # 3 nodes, every ordered pair
    page, problems = _open(browser, html_page, tmp_path / "report.png")
    assert problems == []
    cells = page.eval_on_selector_all("rect.cell", "els => els.map(e => [e.dataset.from, e.dataset.to, e.dataset.gbps])")
    assert {(a, b) for a, b, _ in cells} == measured and len(cells) == len(measured)
    for a, b, gbps in cells:
        assert float(gbps) == pytest.approx(matrix[a][b], rel=1e-5)
    assert page.locator("tr.node").count() == 3
    for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))"):
        assert (html_page.parent / href).resolve().is_file(), href
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_nccl_chart_from_real_nccl_tests_output(tmp_path: Path, browser: Any) -> None:
    from gpuforge.common.results import CheckResult, Level, Report
    from gpuforge.htmlreport import write_html
    from gpuforge.validate.nccl import parse_nccl

    stdout = (FIXTURES / "nccl_f1_p4de_2node_srun.txt").read_text()
    evidence = tmp_path / "ev"
    where = evidence / "evidence" / "nccl" / "round-01"
    where.mkdir(parents=True)
    header = {"node": "node1", "command": "mpirun ... all_reduce_perf -b 8 -e 2G -f 2 -g 1", "outcome": "ok", "exit_code": 0}
    (where / "0001-node1-node2.txt").write_text(json.dumps(header) + "\n--- stdout ---\n" + stdout + "\n--- stderr ---\n")
    report = Report("validate", context={"nodes": {"node1": {"state": "ok"}, "node2": {"state": "ok"}}})
    report.add(CheckResult("nccl.busbw", Level.PASS, ("node1<->node2",), 1.0, 1.0, "ok"))
    page_path = tmp_path / "out" / "report.html"
    write_html(report, evidence, page_path)
    rows = [r for r in parse_nccl(stdout).rows if r.size > 0]
    page, problems = _open(browser, page_path, tmp_path / "nccl.png")
    assert problems == []
    assert page.locator("polyline.nccl").count() == 1
    assert int(page.get_attribute("polyline.nccl", "data-points")) == len(rows) > 10
    href = page.get_attribute("ul.legend a", "href")
    assert (page_path.parent / href).resolve() == (where / "0001-node1-node2.txt").resolve()
    assert "No pair measurements" in page.inner_text("body")  # a run without pairs says so, no empty grid
    shutil.copy(tmp_path / "nccl.png", tmp_path / "nccl-copy.png")  # the screenshot exists and is a file
