"""`gpuforge catalog suggest --results DIR --html PAGE`: the workload ranking as one page to look at.

Self-contained like validate's report (cli/htmlreport.py): inline CSS and SVG, nothing
fetched. Two horizontal bar charts, one bar per ranked shape: the cost of one unit (an epoch,
1M inferences, 1e9 paths) at on-demand prices, and the shape's throughput. Each bar is coloured
by its label (measured here, or published by NVIDIA) and carries the label in its title; a table
below names every figure's basis, system and source. Every value is escaped.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from gpuforge.core.poccost import UNITS
from gpuforge.core.pocrank import FIGURE_UNITS, Ranking, ShapeFigure

COLOURS = {"measured": "#2e7d32", "published": "#1565c0"}


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _bars(title: str, css: str, shapes: list[ShapeFigure], values: list[float], fmt: str) -> str:
    w, left, right, bar, gap, top = 760, 190, 110, 18, 6, 8
    h = top + len(shapes) * (bar + gap) + 24
    hi = max(values, default=1.0) or 1.0
    parts = []
    for k, (s, v) in enumerate(zip(shapes, values, strict=True)):
        y = top + k * (bar + gap)
        length = (w - left - right) * v / hi
        label = s.label or "none"
        parts.append(
            f"<text class='name' x='{left - 6}' y='{y + bar - 5}' text-anchor='end'>{_e(s.candidate.label)}</text>"
            f"<rect class='bar {css} {_e(label)}' x='{left}' y='{y}' width='{length:.1f}' height='{bar}' "
            f"fill='{COLOURS.get(label, '#888')}' data-shape='{_e(s.candidate.label)}' data-label='{_e(label)}' "
            f"data-value='{v:.6g}'><title>{_e(s.candidate.label)}: {_e(fmt.format(v))} ({_e(label)})</title></rect>"
            f"<text class='val' x='{left + length + 4:.1f}' y='{y + bar - 5}'>{_e(fmt.format(v))}</text>"
        )
    return (f"<h2>{_e(title)}</h2><svg class='chart {css}' xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' "
            f"viewBox='0 0 {w} {h}' role='img' aria-label='{_e(title)}'>{''.join(parts)}</svg>")


def render(r: Ranking) -> str:
    unit, words = UNITS[r.workload]
    shapes = [s for s in r.ranked if s.cost is not None]
    costs = [float(s.cost.usd_per_unit["on_demand"] or 0.0) for s in shapes if s.cost is not None]
    rates = [s.cost.stack_rate for s in shapes if s.cost is not None]
    rate_unit = {"resnet50-train": "images/s", "bert-infer": "inferences/s", "mc-fp64": "paths/s"}[r.workload]
    rows = "".join(
        f"<tr><td>{i}</td><td>{_e(s.candidate.label)}</td><td><span class='tag {_e(s.label)}'>{_e(s.label)}</span></td>"
        f"<td>{_e(f'{s.figure:,.1f}' if s.figure is not None else '-')}</td><td>{_e(s.basis)}</td><td>{_e(s.system)}</td>"
        f"<td>{_link(s.source)}</td></tr>"
        for i, s in enumerate(shapes, 1)
    )
    unranked = ", ".join(s.candidate.label for s in r.unranked) or "none"
    aside = "".join(f"<li>{_e(f)}: {_e(why)}</li>" for f, why in r.set_aside) or "<li>none</li>"
    legend = "".join(f"<span class='tag {k}'>{k}</span> " for k in COLOURS)
    return "\n".join([
        _HEAD.replace("{title}", _e(f"gpuforge: {r.workload} cost per {unit}, {r.profile}")),
        f"<h1>{_e(r.workload)} on {_e(r.profile)}'s shapes in {_e(r.region)}</h1>",
        f"<p class='meta'>Ranked by the cost of {_e(words)} at on-demand prices (the catalog, as <code>gpuforge cost</code>). "
        f"{legend} measured = a <code>gpuforge poc</code> result on that instance type; published = NVIDIA's figure for the "
        "GPU, on the system named (not an EC2 shape).</p>",
        _bars(f"Cost per {unit} (USD, on-demand)", "cost", shapes, costs, "${:,.4g}"),
        _bars(f"Throughput per shape ({rate_unit}, the whole shape)", "rate", shapes, rates, "{:,.0f}"),
        f"<h2>Figures</h2><table class='figs'><tr><th>#</th><th>shape</th><th>label</th><th>{_e(FIGURE_UNITS[r.workload])}</th>"
        f"<th>basis</th><th>measured on</th><th>source</th></tr>{rows}</table>",
        f"<p class='meta'>Not ranked (no figure or no on-demand price): {_e(unranked)}</p>",
        f"<h2>Results set aside</h2><ul>{aside}</ul>",
        "</body></html>",
    ])  # fmt: skip


def _link(src: str) -> str:
    if src.startswith("https://"):
        return f"<a href='{_e(src)}'>{_e(src.split('/blob/', maxsplit=1)[0].removeprefix('https://github.com/'))}</a>"
    return _e(src)


def write_page(r: Ranking, page: Path) -> None:
    from gpuforge.common.results import atomic_write

    atomic_write(page, render(r))


_HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1a1a1a;max-width:1200px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555}svg text{font-size:11px;fill:#333}table.figs{border-collapse:collapse;width:100%}
table.figs th,table.figs td{border-bottom:1px solid #eee;padding:5px 8px;text-align:left;vertical-align:top}
.tag{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:12px}
.tag.measured{background:#2e7d32}.tag.published{background:#1565c0}rect.bar:hover{stroke:#000;stroke-width:1.5}
</style></head><body>"""
