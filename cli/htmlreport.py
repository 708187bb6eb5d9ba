"""`gpuforge validate --html FILE`: one self-contained page to look at (issue 13 item 10).

Everything is inline (CSS, SVG, a few lines of JS for hover detail): the page opens from a
laptop, an artefact store or an air-gapped share with no network. It shows:

- per-node verdicts: reachability state, the worst result level, the failing checks with their
  messages, and links to each node's raw evidence files;
- the node-by-node bandwidth heatmap (iperf3 Gbit/s, row sends to column): one `rect.cell` per
  measured pair, unmeasured pairs drawn as `rect.none` (so nothing reads as a zero);
- NCCL bus bandwidth against message size, read from the nccl-tests outputs in the evidence
  directory with the same parser validate judges them with (validate/nccl.py);
- links to the evidence, relative to the page, so the directory can be moved as a whole.

Values are escaped (html.escape) everywhere; node names and messages come from the cluster.
"""

from __future__ import annotations

import html
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuforge.common.results import Level, Report

_ORDER = [Level.PASS, Level.INFO, Level.WARNING, Level.UNKNOWN, Level.ERROR]
_COLOURS = {"pass": "#2e7d32", "info": "#0277bd", "warning": "#ef6c00", "unknown": "#8e24aa", "error": "#c62828"}
_EVIDENCE_BODY = "\n--- stdout ---\n"


@dataclass(frozen=True)
class NcclSeries:
    label: str
    evidence: Path
    points: list[tuple[int, float]]  # (message bytes, out-of-place busbw GB/s)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _worst(levels: list[Level]) -> Level:
    return max(levels, key=_ORDER.index, default=Level.PASS)


def nccl_series(evidence_dir: Path) -> list[NcclSeries]:
    """Every nccl-tests output in the evidence directory, parsed; files that hold no table are skipped."""
    from gpuforge.validate.checks import ParseError
    from gpuforge.validate.nccl import parse_nccl

    series: list[NcclSeries] = []
    for path in sorted((evidence_dir / "evidence").rglob("*.txt")):
        text = path.read_text(errors="replace")
        head, _, rest = text.partition(_EVIDENCE_BODY)
        if "all_reduce_perf" not in head:
            continue
        stdout = rest.split("\n--- stderr ---\n", 1)[0]
        try:
            run = parse_nccl(stdout)
        except ParseError:
            continue
        if run.rows:
            series.append(NcclSeries(_label(path, evidence_dir), path, [(r.size, r.oop_busbw) for r in run.rows]))
    return series


def _label(path: Path, evidence_dir: Path) -> str:
    rel = path.relative_to(evidence_dir / "evidence")
    return f"{rel.parent}/{rel.stem.split('-', 1)[-1]}"


def render(report: Report, evidence_dir: Path, page: Path) -> str:
    """The page's HTML; links are relative to where the page will be written."""
    ctx = report.context
    nodes: dict[str, dict[str, Any]] = ctx.get("nodes") or {}
    matrix: dict[str, dict[str, float | None]] = ctx.get("matrix_gbps") or {}
    series = nccl_series(evidence_dir)
    parts = [
        _HEAD.replace("{title}", _e(f"gpuforge validate: {_overall(report).value}")),
        f"<h1>gpuforge validate <span class='lvl {_overall(report).value}'>{_overall(report).value}</span></h1>",
        f"<p class='meta'>{_e(len(nodes))} node(s), {_e(len(report.results))} results, "
        f"{_e(ctx.get('wall_s', '?'))} s; transport {_e(ctx.get('transport', '?'))}"
        + (" — <strong>interrupted: partial</strong>" if ctx.get("interrupted") else "") + "</p>",
    ]
    loc = ctx.get("localisation")
    if isinstance(loc, dict):
        parts.append(f"<p class='loc'>localisation: <strong>{_e(loc.get('kind'))}</strong> — {_e(loc.get('message'))}</p>")
    parts.append(_nodes_section(report, nodes, evidence_dir, page))
    parts.append(_heatmap_section(matrix))
    parts.append(_nccl_section(series, page))
    parts.append(_evidence_section(evidence_dir, page))
    parts.append(_TAIL)
    return "\n".join(parts)


def _overall(report: Report) -> Level:
    return _worst([r.level for r in report.results])


def _link(target: Path, page: Path, text: str) -> str:
    rel = os.path.relpath(target.resolve(), page.resolve().parent)
    return f"<a href='{_e(Path(rel).as_posix())}'>{_e(text)}</a>"


def _nodes_section(report: Report, nodes: dict[str, dict[str, Any]], evidence_dir: Path, page: Path) -> str:
    rows = []
    names = list(nodes) or sorted({t for r in report.results for t in r.targets if "<->" not in t})
    for name in names:
        mine = [r for r in report.results if name in r.targets]
        worst = _worst([r.level for r in mine])
        state = (nodes.get(name) or {}).get("state", "?")
        bad = [r for r in mine if r.level in (Level.ERROR, Level.UNKNOWN, Level.WARNING)]
        detail = "".join(f"<li><span class='lvl {r.level.value}'>{r.level.value}</span> {_e(r.check)}: {_e(r.message)}</li>"
                         for r in bad) or "<li>all checks passed</li>"
        folder = evidence_dir / "evidence" / name
        files = sorted(folder.glob("*.txt")) if folder.is_dir() else []
        links = " ".join(_link(f, page, f.stem) for f in files) or "—"
        rows.append(f"<tr data-node='{_e(name)}' class='node {worst.value}'><th>{_e(name)}</th><td>{_e(state)}</td>"
                    f"<td><span class='lvl {worst.value}'>{worst.value}</span></td><td><ul>{detail}</ul></td>"
                    f"<td class='ev'>{links}</td></tr>")
    return ("<h2>Nodes</h2><table class='nodes'><thead><tr><th>node</th><th>state</th><th>verdict</th>"
            "<th>findings</th><th>evidence</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _heatmap_section(matrix: dict[str, dict[str, float | None]]) -> str:
    if not matrix:
        return ("<h2>Bandwidth heatmap</h2><p class='none'>No pair measurements in this run "
                "(one node, or --checks without network).</p>")
    nodes = list(matrix)
    values = [v for row in matrix.values() for v in row.values() if v is not None]
    top = max(values, default=1.0) or 1.0
    size, pad = 56, 110
    width = pad + size * len(nodes) + 10
    cells = []
    for i, a in enumerate(nodes):
        cells.append(f"<text class='row' x='{pad - 8}' y='{pad + i * size + size / 2 + 4}' text-anchor='end'>{_e(a)}</text>")
        for j, b in enumerate(nodes):
            x, y = pad + j * size, pad + i * size
            if a == b:
                continue
            value = matrix[a].get(b)
            if value is None:
                cells.append(f"<rect class='none' x='{x}' y='{y}' width='{size - 2}' height='{size - 2}'>"
                             f"<title>{_e(a)} → {_e(b)}: not measured</title></rect>")
                continue
            frac = max(0.0, min(1.0, value / top))
            cells.append(
                f"<rect class='cell' data-from='{_e(a)}' data-to='{_e(b)}' data-gbps='{value:.6g}' x='{x}' y='{y}' "
                f"width='{size - 2}' height='{size - 2}' fill='{_shade(frac)}'><title>{_e(a)} → {_e(b)}: "
                f"{value:.3g} Gbit/s</title></rect>"
                f"<text class='val' x='{x + size / 2 - 1}' y='{y + size / 2 + 4}' text-anchor='middle'>{value:.3g}</text>"
            )
    heads = "".join(
        f"<text class='col' x='{pad + j * size + size / 2}' y='{pad - 10}' text-anchor='start' "
        f"transform='rotate(-45 {pad + j * size + size / 2} {pad - 10})'>{_e(b)}</text>"
        for j, b in enumerate(nodes)
    )
    svg = (f"<svg class='heatmap' xmlns='http://www.w3.org/2000/svg' width='{width}' height='{width}' "
           f"viewBox='0 0 {width} {width}' role='img' aria-label='iperf3 Gbit/s, row sends to column'>"
           f"{heads}{''.join(cells)}</svg>")
    return (f"<h2>Bandwidth heatmap</h2><p class='meta'>iperf3 Gbit/s, row sends to column; darker is faster "
            f"(max {top:.3g}); dashed grey: not measured.</p>{svg}")


def _shade(frac: float) -> str:
    # light (slow) to dark blue (fast); a slow pair stands out against its row
    lo, hi = (227, 242, 253), (13, 71, 161)
    r, g, b = (round(lo[k] + (hi[k] - lo[k]) * frac) for k in range(3))
    return f"#{r:02x}{g:02x}{b:02x}"


def _nccl_section(series: list[NcclSeries], page: Path) -> str:
    if not series:
        return "<h2>NCCL bus bandwidth</h2><p class='none'>No nccl-tests output in this run's evidence.</p>"
    w, h, left, bottom, top_pad, right = 720, 360, 64, 48, 16, 16
    sizes = [s for one in series for s, _ in one.points if s > 0]
    bws = [bw for one in series for _, bw in one.points]
    x0, x1 = math.log2(min(sizes)), math.log2(max(sizes))
    y1 = max(bws) * 1.1 or 1.0
    span = (x1 - x0) or 1.0

    def px(size: int) -> float:
        return left + (math.log2(max(size, 1)) - x0) / span * (w - left - right)

    def py(bw: float) -> float:
        return h - bottom - bw / y1 * (h - bottom - top_pad)

    palette = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f"]
    lines, legend = [], []
    for k, one in enumerate(series):
        colour = palette[k % len(palette)]
        pts = " ".join(f"{px(s):.1f},{py(bw):.1f}" for s, bw in one.points if s > 0)
        count = len([p for p in one.points if p[0] > 0])
        lines.append(f"<polyline class='nccl' data-series='{_e(one.label)}' data-points='{count}' "
                     f"fill='none' stroke='{colour}' stroke-width='2' points='{pts}'/>")
        legend.append(f"<li><span class='swatch' style='background:{colour}'></span>{_link(one.evidence, page, one.label)}</li>")
    ticks = []
    for e in range(math.ceil(x0), math.floor(x1) + 1, 3):
        ticks.append(f"<text class='tick' x='{px(2**e):.1f}' y='{h - bottom + 16}' text-anchor='middle'>{_bytes(2**e)}</text>")
    for k in range(5):
        v = y1 * k / 4
        ticks.append(f"<text class='tick' x='{left - 6}' y='{py(v) + 4:.1f}' text-anchor='end'>{v:.3g}</text>"
                     f"<line class='grid' x1='{left}' x2='{w - right}' y1='{py(v):.1f}' y2='{py(v):.1f}'/>")
    svg = (f"<svg class='ncclchart' xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' viewBox='0 0 {w} {h}' "
           f"role='img' aria-label='NCCL bus bandwidth against message size'>{''.join(ticks)}{''.join(lines)}"
           f"<text class='axis' x='{(w + left) / 2}' y='{h - 8}' text-anchor='middle'>"
           "message size (log scale)</text>"
           f"<text class='axis' x='14' y='{h / 2}' transform='rotate(-90 14 {h / 2})' text-anchor='middle'>"
           "busbw GB/s</text></svg>")
    return (f"<h2>NCCL bus bandwidth</h2><p class='meta'>all_reduce_perf, out-of-place busbw.</p>{svg}"
            f"<ul class='legend'>{''.join(legend)}</ul>")


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:g} {unit}"
        n //= 1024
    return f"{n:g} TiB"


def _evidence_section(evidence_dir: Path, page: Path) -> str:
    root = evidence_dir / "evidence"
    items = []
    for name in ("report.json", "versions.json"):
        if (evidence_dir / name).is_file():
            items.append(f"<li>{_link(evidence_dir / name, page, name)}</li>")
    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            files = sorted(folder.rglob("*.txt"))
            links = " ".join(_link(f, page, f.stem) for f in files)
            items.append(f"<li><strong>{_e(folder.name)}</strong> ({len(files)}): {links}</li>")
    return "<h2>Evidence</h2><ul class='evidence'>" + ("".join(items) or "<li>none</li>") + "</ul>"


_HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1a1a1a;max-width:1200px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta,.none{color:#555}.loc{background:#fff8e1;padding:6px 10px;border-left:4px solid #ef6c00}
table.nodes{border-collapse:collapse;width:100%}table.nodes th,table.nodes td{border-bottom:1px solid #eee;padding:6px 8px;
text-align:left;vertical-align:top}table.nodes ul{margin:0;padding-left:16px}td.ev a{margin-right:6px;font-size:12px}
.lvl{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:12px}
.lvl.pass{background:#2e7d32}.lvl.info{background:#0277bd}.lvl.warning{background:#ef6c00}
.lvl.unknown{background:#8e24aa}.lvl.error{background:#c62828}
svg text{font-size:11px;fill:#333}svg .val{fill:#fff;font-size:10px;pointer-events:none}
rect.none{fill:#f3f3f3;stroke:#ccc;stroke-dasharray:3 2}rect.cell{stroke:#fff}
rect.cell:hover{stroke:#000;stroke-width:2}line.grid{stroke:#eee}.swatch{display:inline-block;width:12px;height:3px;
margin-right:6px;vertical-align:middle}ul.legend,ul.evidence{padding-left:18px}ul.evidence a{margin-right:6px;font-size:12px}
#hover{position:fixed;bottom:12px;right:12px;background:#263238;color:#fff;padding:4px 8px;border-radius:4px;display:none}
</style></head><body>"""

_TAIL = """<div id="hover"></div>
<script>
// Hover detail for heatmap cells: the pair and its rate, also for keyboard-less screens.
(function () {
  var box = document.getElementById("hover");
  document.querySelectorAll("rect.cell").forEach(function (cell) {
    cell.addEventListener("mouseenter", function () {
      box.textContent = cell.dataset.from + " \\u2192 " + cell.dataset.to + ": " + cell.dataset.gbps + " Gbit/s";
      box.style.display = "block";
    });
    cell.addEventListener("mouseleave", function () { box.style.display = "none"; });
  });
})();
</script></body></html>
"""


def write_html(report: Report, evidence_dir: Path, page: Path) -> None:
    from gpuforge.common.results import atomic_write

    atomic_write(page, render(report, evidence_dir, page))


def report_from_json(path: Path) -> Report:
    """A Report from report.json (what --out keeps), for re-rendering a page from evidence."""
    from gpuforge.common.results import CheckResult

    doc = json.loads(path.read_text())
    report = Report(doc["kind"], context=doc.get("context") or {})
    for r in doc.get("results", []):
        report.add(CheckResult(r["check"], Level(r["level"]), tuple(r["targets"]), r["observed"], r["expected"], r["message"]))
    return report
