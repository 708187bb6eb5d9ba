"""Tabular output for every report command: one policy for terminals and pipes (issue 13 item 4).

`--format` takes the same three choices everywhere:

- `table`: a rich table for people. A token (an instance type, an AZ ID, a node name) is never
  broken: cells wrap only at spaces, and when the columns' longest words do not fit the
  terminal, the rows are printed as `column: value` blocks instead of a squeezed table.
- `plain`: one record per line, fields separated by tabs, a `#`-prefixed header line; what
  `grep`, `cut` and `awk` expect. The default when stdout is not a terminal.
- `json`: one document, written by each command (its shape is the command's own).

rich is imported only when a table is drawn, so JSON and plain output do not pay for it. rich is
not a base dependency (the `rich` extra, in `deploy`): without it, a table is aligned text and a
console prints without styles (common/plain.py); the commands write the same markup for both.
"""

from __future__ import annotations

import difflib
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from gpuforge.common.plain import PlainConsole, have_rich, records_text, table_text

FORMATS = ("table", "plain", "json")
FORMAT_HELP = "table (default on a terminal), plain (one record per line; default when piped) or json."

# rich draws `│ ` before each cell and ` │` after the last: 3 columns per cell plus 1.
_BORDER_PER_COLUMN = 3


class SuggestingChoice(click.Choice):
    """click.Choice whose refusal names the closest choice, like gpuforge's other errors."""

    def fail(self, message: str, param: click.Parameter | None = None, ctx: click.Context | None = None) -> Any:
        value = message.split("'")[1] if message.count("'") >= 2 else ""
        close = difflib.get_close_matches(value, [str(c) for c in self.choices], n=1, cutoff=0.6)
        if close:
            message = message.rstrip(".") + f" (did you mean {close[0]!r}?)"
        return super().fail(message, param, ctx)


def format_option(fn: Any) -> Any:
    """`--format table|plain|json`, the same on every report command; default by stdout."""
    return click.option(
        "--format", "fmt", type=SuggestingChoice(FORMATS), default=None, help=FORMAT_HELP,
        callback=lambda _c, _p, value: value or default_format(),
    )(fn)


def default_format() -> str:
    return "table" if sys.stdout.isatty() else "plain"


@dataclass
class Column:
    name: str
    justify: str = "left"  # "left" | "right"
    styles: dict[str, str] = field(default_factory=dict)  # cell text -> rich style (e.g. levels)


@dataclass
class Rows:
    """A titled list of records: what a table shows, independent of how it is drawn."""

    title: str
    columns: list[Column]
    rows: list[list[str]] = field(default_factory=list)
    caption: str | None = None

    def add(self, *cells: Any) -> None:
        self.rows.append(["-" if c is None or c == "" else str(c) for c in cells])


def emit(rows: Rows, fmt: str) -> None:
    """Print `rows` as a table or as plain records on stdout."""
    if fmt == "plain":
        click.echo(plain(rows), nl=False)
    else:
        print_table(rows)


def plain(rows: Rows) -> str:
    head = "# " + "\t".join(c.name for c in rows.columns)
    lines = [head, *("\t".join(_one_line(cell) for cell in row) for row in rows.rows)]
    return "\n".join(lines) + "\n"


def _one_line(cell: str) -> str:
    # A record stays on one line: newlines and tabs inside a cell become spaces.
    return " ".join(cell.replace("\t", " ").split())


def terminal_width() -> int:
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return shutil.get_terminal_size((100, 24)).columns


def column_widths(rows: Rows, width: int) -> list[int] | None:
    """Each column's width so that no word is broken, or None when the terminal is too narrow.

    Every column gets at least its longest word; what is left goes round-robin to the columns
    whose longest cell is wider still. rich's own squeezing would cut words (`p4de.24xlar…`).
    """
    cols = range(len(rows.columns))
    texts = [[rows.columns[i].name, *(r[i] for r in rows.rows)] for i in cols]
    least = [max(len(w) for cell in texts[i] for w in (cell.split() or [""])) or 1 for i in cols]
    most = [max(len(cell) for cell in texts[i]) or 1 for i in cols]
    spare = width - (len(least) * _BORDER_PER_COLUMN + 1) - sum(least)
    if spare < 0:
        return None
    widths = list(least)
    while spare > 0:
        wanting = [i for i in cols if widths[i] < most[i]]
        if not wanting:
            break
        for i in wanting[:spare]:
            widths[i] += 1
        spare -= min(spare, len(wanting))
    return widths


def console(**kwargs: Any) -> Any:
    """A rich Console whose broken pipe is an OSError(EPIPE) like click's, not rich's own
    `SystemExit(1)` (rich Console.on_broken_pipe), which would read as "checks failed": the CLI
    ends a closed pipe with 141 (cli/cli.py, issue 22). Without rich: a PlainConsole (same
    `print` of markup strings, styles dropped; click.echo's broken pipe is already EPIPE)."""
    if not have_rich():
        return PlainConsole(width=kwargs.get("width") or terminal_width(), stderr=bool(kwargs.get("stderr")))
    import errno

    from rich.console import Console

    class _PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    # No automatic highlighting: rich paints every number in a sentence ("30 days", "1 TB") in
    # bold cyan, which reads as emphasis nobody chose (issue 22). Styles are given explicitly.
    kwargs.setdefault("highlight", False)
    return _PipeConsole(**kwargs)


def print_table(rows: Rows) -> None:
    width = terminal_width()
    widths = column_widths(rows, width)
    if not have_rich():
        click.echo(records_text(rows, width) if widths is None else table_text(rows, widths), nl=False)
        return
    from rich.table import Table
    from rich.text import Text

    out = console(width=width, soft_wrap=False)
    if widths is None:
        _print_records(out, rows)
        return
    table = Table(title=rows.title, caption=rows.caption)
    for col, w in zip(rows.columns, widths, strict=True):
        # A fixed width at least the column's longest word: cells wrap at spaces only. (rich's
        # overflow="fold" breaks long words, and its own squeezing ignores word lengths.)
        table.add_column(col.name, justify=col.justify, overflow="ellipsis", width=w)  # type: ignore[arg-type]
    for row in rows.rows:
        # Text, not markup: a cell such as `[secret]` is data, not a style tag.
        table.add_row(*(Text(cell, style=col.styles.get(cell, "")) for col, cell in zip(rows.columns, row, strict=True)))
    out.print(table)


def _print_records(console: Any, rows: Rows) -> None:
    """Too narrow for a table: each record as `column: value` lines, wrapped at spaces only (a
    word longer than the line stays whole: the terminal may wrap it, but it is never cut)."""
    from rich.text import Text

    console.print(Text(rows.title, style="bold"), soft_wrap=True)
    label = max(len(c.name) for c in rows.columns)
    room = max(console.width - label - 4, 10)
    for row in rows.rows:
        console.print("", soft_wrap=True)
        for col, cell in zip(rows.columns, row, strict=True):
            parts = textwrap.wrap(cell, room, break_long_words=False, break_on_hyphens=False) or [cell]
            for i, part in enumerate(parts):
                line = Text(f"  {col.name.rjust(label)}: " if i == 0 else " " * (label + 4))
                line.append(part, style=col.styles.get(cell, ""))
                console.print(line, soft_wrap=True, highlight=False)
    if rows.caption:
        console.print(Text(rows.caption, style="dim"), soft_wrap=True)


def kv(value: Any) -> str:
    """A value for a cell: dicts as `key=value` words (so they wrap at spaces), lists joined."""
    if value is None:
        return "-"
    if isinstance(value, dict):
        return " ".join(f"{k}={kv(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(kv(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def cells(values: Sequence[Any]) -> list[str]:
    return [kv(v) for v in values]
