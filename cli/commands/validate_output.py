"""What `gpuforge validate` shows and writes: live progress on stderr (a bar on a terminal, plain
lines in a pipe or CI log), the report on stdout (the table with identical results folded into
one row, the node states, the iperf3 matrix and the localisation verdict, the TCP model; or
JSON), and the evidence files in --out (report.json, versions.json, accepted host keys).
The command itself, its inputs and the run are in cli/commands/validate.py.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import click

from gpuforge.common.plain import have_rich
from gpuforge.common.results import CheckResult, Report, atomic_write
from gpuforge.common.table import Column, Rows, emit
from gpuforge.common.table import console as rich_console
from gpuforge.validate.runner import RunResult


class LiveProgress:
    """A live bar on a terminal; plain lines when stderr is a pipe or a file (a CI log), where
    rich would show nothing until the end. rich is imported only for the bar: a CI log's first
    result should not wait for it. Without rich (not a base dependency) a terminal gets the same
    plain lines. Workers report from their own threads: one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live = sys.stderr.isatty() and have_rich()
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.console = rich_console(stderr=True)
            self.live = self.console.is_terminal
            self.bar = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.fields[note]}"), console=self.console, transient=False,
            )  # fmt: skip
        self.task: Any = None
        self.name, self.total, self.done = "", 0, 0

    def __enter__(self) -> LiveProgress:
        if self.live:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.bar.stop()

    def stage(self, name: str, total: int) -> None:
        self.name, self.total, self.done = name, total, 0
        if self.live:
            self.task = self.bar.add_task(name, total=total, note="")
        else:
            click.echo(f"validate {name}: {total} job(s) ...", err=True)

    def advance(self, note: str = "") -> None:
        with self.lock:
            self.done += 1
            if self.live and self.task is not None:
                self.bar.update(self.task, advance=1, note=note)
            elif not self.live:
                click.echo(f"validate {self.name} {self.done}/{self.total}: {note}", err=True)


def write_outputs(out: Path, result: RunResult, accepted: list[dict[str, str]]) -> None:
    atomic_write(out / "report.json", result.report.to_json() + "\n")
    versions: dict[str, Any] = {"iperf3": result.report.context.get("versions", {}).get("iperf3", {})}
    for r in result.report.results:
        if r.check == "system.identity" and isinstance(r.observed, dict):
            versions.setdefault("kernel", {})[r.targets[0]] = r.observed.get("kernel")
        if r.check.startswith("gpu.cluster."):
            versions[r.check] = r.observed
    atomic_write(out / "versions.json", json.dumps(versions, indent=2, default=str) + "\n")
    if accepted:
        atomic_write(out / "accepted_host_keys.json", json.dumps(accepted, indent=2) + "\n")


def render(result: RunResult, fmt: str) -> None:
    if fmt == "json":
        click.echo(result.report.to_json())
        return
    emit(folded_report(result.report).rows("gpuforge validate"), fmt)
    states = Rows("nodes", [Column("node"), Column("state"), Column("detail")])
    for name, st in result.states.items():
        states.add(name, st.state, st.detail)
    emit(states, fmt)
    if result.verdict is not None and result.matrix:
        emit(matrix_rows(result.matrix), fmt)
        line = f"localisation: {result.verdict.kind} — {result.verdict.message}"
        click.echo(line if fmt == "table" else f"# {line}")
    tcp = result.report.context.get("tcp_model")
    if isinstance(tcp, dict):
        lines = []
        if tcp.get("reason"):
            lines.append(f"TCP ceiling judged against: {tcp['reason']}; floor {tcp['floor_gbps']:.3g} Gbit/s per direction")
        lines.append(str(tcp.get("nccl", "")))
        for line in filter(None, lines):
            click.echo(line if fmt == "table" else f"# {line}")


def folded_report(report: Report) -> Report:
    """For the table only: identical results on several nodes become one row (node[1-4])."""
    groups: dict[tuple[Any, ...], list[CheckResult]] = {}
    for r in report.results:
        key = (r.check, r.level, json.dumps(r.observed, default=str), json.dumps(r.expected, default=str), r.message)
        groups.setdefault(key, []).append(r)
    folded = Report(report.kind, context=report.context)
    for rs in groups.values():
        targets = tuple(t for r in rs for t in r.targets)
        first = rs[0]
        folded.add(CheckResult(first.check, first.level, targets, first.observed, first.expected, first.message))
    return folded


def matrix_rows(mat: dict[str, dict[str, float | None]]) -> Rows:
    nodes = list(mat)
    rows = Rows("iperf3 Gbit/s (row sends to column)",
                [Column("from \\ to"), *(Column(n, justify="right") for n in nodes)])
    for a in nodes:
        rows.add(a, *("·" if a == b else ("-" if mat[a].get(b) is None else f"{mat[a][b]:.3g}") for b in nodes))
    return rows
