"""Issue 18: rich is not a base dependency (the `rich` extra; `deploy` includes it). Without it the
commands a base install runs print plain tables, plain markup-free lines and a plain progress line,
never an ImportError. Here rich is blocked in a subprocess of this venv (sys.modules["rich"] =
None: `import rich` raises ImportError, as in a base install); tests/packaging/test_wheel.py runs
the same commands in a real base-only venv built from the wheel.

The markup helpers (common/plain.py) are checked against rich itself, installed here."""

from __future__ import annotations

import io
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.markup import escape as rich_escape
from rich.text import Text

from gpuforge.common.plain import escape, strip_markup

REPO = Path(__file__).resolve().parents[2]
BOX = set("┏┓┗┛┃━│─┡┩╇┳┻╋")
WITHOUT_RICH = """
import sys
sys.modules["rich"] = None  # import rich -> ImportError, as in the base install
from gpuforge.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print("rich-imported:", any(m.startswith("rich.") for m in sys.modules), file=sys.stderr)
sys.exit(code)
"""

SAMPLES = [
    "plain text",
    "[bold]1. p4d.24xlarge[/] (cheapest)",
    "a [secret] token",
    "[dim]Prices: the catalog snapshot (core/catalog/meta.yaml); spot moves hourly.[/]",
    "ends with a backslash \\",
    "\\[bold] escaped",
    "\\\\[bold]two backslashes[/bold]",
    "list[int] and [/] and [#ff0000]red[/]",
    "gpu-[01-08] nodes",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_escape_is_riches_escape(text: str) -> None:
    assert escape(text) == rich_escape(text)


@pytest.mark.parametrize("text", SAMPLES)
def test_escaped_text_prints_as_it_is(text: str) -> None:
    # as the commands use it: escaped data between tags
    markup = f"[bold]{escape(text)}[/]"
    assert strip_markup(markup) == text == Text.from_markup(markup).plain


@pytest.mark.parametrize("markup", [s for s in SAMPLES if "[secret]" not in s])
def test_strip_markup_shows_what_rich_shows(markup: str) -> None:
    assert strip_markup(markup) == Text.from_markup(markup).plain


def _run(*args: str, columns: int = 120) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-c", WITHOUT_RICH, "--project-dir", str(REPO), *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False, cwd="/")  # fmt: skip


@pytest.mark.parametrize("args", [
    ["catalog", "list", "--format", "table"],
    ["cost", "--stack", "cv-training", "--format", "table"],
    ["catalog", "suggest", "--profile", "cv-training", "--format", "table"],
], ids=lambda a: " ".join(a[:2]))  # fmt: skip
def test_tables_without_rich_are_aligned_text(args: list[str]) -> None:
    p = _run(*args)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "rich-imported: False" in p.stderr
    assert not BOX & set(p.stdout), "a box-drawing character: rich drew this"
    assert "[/]" not in p.stdout and "[bold]" not in p.stdout and "[dim]" not in p.stdout
    lines = p.stdout.splitlines()
    # a header line followed by its rule: dashes under each column, two spaces between them
    rules = [i for i, line in enumerate(lines) if line and set(line) <= {"-", " "} and "  " in line]
    assert rules, p.stdout
    header, rule = lines[rules[0] - 1], lines[rules[0]]
    spans = [m.span() for m in re.finditer(r"-+", rule)]
    # each column name lies within its rule, and nothing lies between the rules
    assert len(spans) >= 2 and all(header[a:b].strip() for a, b in spans), (header, rule)
    gaps = [header[b:a] for (_, b), (a, _) in itertools.pairwise(spans)]
    assert all(not g.strip() for g in gaps), (header, rule)


def test_catalog_list_without_rich_never_cuts_a_type_name() -> None:
    p = _run("catalog", "list", "--format", "table")
    assert p.returncode == 0 and "p4de.24xlarge" in p.stdout.split()


def test_a_narrow_terminal_without_rich_gets_records() -> None:
    p = _run("catalog", "list", "--format", "table", columns=40)
    assert p.returncode == 0, p.stderr
    assert any(line.strip().startswith("type: ") for line in p.stdout.splitlines()), p.stdout
    assert "p4de.24xlarge" in p.stdout.split()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_validate_progress_on_a_terminal_without_rich_is_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuforge.commands.validate_output import LiveProgress

    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setitem(sys.modules, "rich", None)
    with LiveProgress() as progress:
        progress.stage("gpu", 2)
        progress.advance("a: ok")
        progress.advance("b: FAIL")
    assert err.getvalue().splitlines() == ["validate gpu: 2 job(s) ...", "validate gpu 1/2: a: ok", "validate gpu 2/2: b: FAIL"]
