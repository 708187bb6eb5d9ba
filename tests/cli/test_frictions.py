"""Frictions a newcomer met (issue 22): a command without `--project-dir` although the README says
every command takes it; colour painted on the numbers inside sentences."""

from __future__ import annotations

import re

import click
import pytest

from tests.cli.conftest import Gf, base_env


def _leaves() -> list[tuple[str, click.Command]]:
    from gpuforge.cli import cli

    ctx = click.Context(cli, info_name="gpuforge")
    out: list[tuple[str, click.Command]] = []
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            out += [(f"{name} {sub}", c) for sub in cmd.list_commands(ctx) if (c := cmd.get_command(ctx, sub))]
        else:
            out.append((name, cmd))
    return out


def test_every_command_takes_project_dir() -> None:
    missing = [name for name, cmd in _leaves() if not any("--project-dir" in getattr(p, "opts", []) for p in cmd.params)]
    assert not missing, f"README: every command takes --project-dir; these do not: {missing}"


# rich's ReprHighlighter paints numbers bold cyan (`repr.number`); gpuforge styles what it means to
NUMBER_PAINT = re.compile(r"\x1b\[1;(?:2;)?36m\d")


@pytest.mark.parametrize("args", [
    ["cost", "--stack", "cv-training", "--format", "table"],
    ["preview", "--stack", "cv-training", "--format", "table", "--no-policies"],
    ["catalog", "suggest", "--profile", "cv-training", "--format", "table"],
])  # fmt: skip
def test_no_colour_on_digits_inside_sentences(gf: Gf, args: list[str]) -> None:
    r = gf(*args, env=base_env(FORCE_COLOR="1", COLUMNS="160"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "\x1b[" in r.stdout  # it is coloured: the check below looks at real terminal output
    painted = [line for line in r.stdout.splitlines() if NUMBER_PAINT.search(line)]
    assert not painted, painted[:5]
