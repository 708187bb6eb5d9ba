"""Terminal output without rich: what the base install prints with (issue 18).

rich, and with it pygments, markdown-it-py and mdurl (12 MB of site-packages on a node), is not
a base dependency: `pip install 'gpuforge[rich]'` (or `[deploy]`, which includes it) adds it.
Without it, a table is drawn as aligned text (same columns, same no-word-breaking widths, same
`column: value` records when the terminal is too narrow), and a console prints its text with
the markup removed. The markup is rich's own syntax (rich/markup.py at v14.3.3, 42899d8a:
`RE_TAGS`, `escape`, `_parse`), so the commands write one markup string for both.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from itertools import zip_longest
from typing import Any, Protocol

import click

# rich/markup.py RE_TAGS: a tag, and the backslashes before it
_TAGS = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")
_ESCAPE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")
GAP = "  "  # between columns


class _Column(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def justify(self) -> str: ...


class Table(Protocol):
    """What a table shows (gpuforge.common.table.Rows), read-only."""

    @property
    def title(self) -> str: ...
    @property
    def columns(self) -> Sequence[_Column]: ...
    @property
    def rows(self) -> Sequence[Sequence[str]]: ...
    @property
    def caption(self) -> str | None: ...


def have_rich() -> bool:
    """Whether rich is installed (the `rich` extra): True draws with it, False as plain text."""
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def escape(markup: str) -> str:
    """rich.markup.escape: `text` inside markup is shown as it is, brackets included."""

    def one(match: re.Match[str]) -> str:
        backslashes, text = match.groups()
        return f"{backslashes}{backslashes}\\{text}"

    markup = _ESCAPE.sub(one, markup)
    if markup.endswith("\\") and not markup.endswith("\\\\"):
        return markup + "\\"
    return markup


def strip_markup(markup: str) -> str:
    """The text rich would show for `markup`, without its styles (rich.markup._parse and render)."""
    out: list[str] = []
    position = 0
    for match in _TAGS.finditer(markup):
        full, escapes, _tag = match.groups()
        start, end = match.span()
        if start > position:
            out.append(markup[position:start].replace("\\[", "["))
        position = end
        if escapes:
            backslashes, escaped = divmod(len(escapes), 2)
            out.append("\\" * backslashes)
            if escaped:
                out.append(full[len(escapes):])
    out.append(markup[position:].replace("\\[", "["))
    return "".join(out)


class PlainConsole:
    """The part of rich's Console the commands use: `print` (markup removed), `width`, `is_terminal`."""

    def __init__(self, *, width: int, stderr: bool = False, **_ignored: Any) -> None:
        self.stderr = stderr
        self.width = width
        self.is_terminal = False  # no live display without rich

    def print(self, *objects: Any, sep: str = " ", end: str = "\n", **_ignored: Any) -> None:
        text = sep.join(strip_markup(o) if isinstance(o, str) else str(o) for o in objects)
        click.echo(text + end, nl=False, err=self.stderr)


def _wrap(cell: str, width: int) -> list[str]:
    # at spaces only: a token (an instance type, an AZ ID) is never cut
    return textwrap.wrap(cell, width, break_long_words=False, break_on_hyphens=False) or [cell]


def table_text(rows: Table, widths: list[int]) -> str:
    """`rows` as aligned text: the title, the header, a rule, the rows (cells wrapped at spaces)."""

    def line(cells: Sequence[str]) -> list[str]:
        parts = [_wrap(cell, w) for cell, w in zip(cells, widths, strict=True)]
        out = []
        for pieces in zip_longest(*parts, fillvalue=""):
            cols = zip(pieces, widths, rows.columns, strict=True)
            out.append(GAP.join(p.rjust(w) if c.justify == "right" else p.ljust(w) for p, w, c in cols).rstrip())
        return out

    lines = [rows.title, *line([c.name for c in rows.columns]), GAP.join("-" * w for w in widths)]
    for row in rows.rows:
        lines += line(row)
    if rows.caption:
        lines.append(rows.caption)
    return "\n".join(lines) + "\n"


def records_text(rows: Table, width: int) -> str:
    """Too narrow for a table: each record as `column: value` lines, wrapped at spaces only."""
    label = max(len(c.name) for c in rows.columns)
    room = max(width - label - 4, 10)
    lines = [rows.title]
    for row in rows.rows:
        lines.append("")
        for col, cell in zip(rows.columns, row, strict=True):
            for i, part in enumerate(_wrap(cell, room)):
                lines.append((f"  {col.name.rjust(label)}: " if i == 0 else " " * (label + 4)) + part)
    if rows.caption:
        lines.append(rows.caption)
    return "\n".join(lines) + "\n"
