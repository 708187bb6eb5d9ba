"""Commands find the project from any directory below it, as git finds its repository."""

from __future__ import annotations

from pathlib import Path

from gpuforge.commands.options import find_project_dir
from tests.components.stackcfg import ROOT


def test_found_from_a_subdirectory():
    assert find_project_dir(ROOT / "stacks") == ROOT
    assert find_project_dir(ROOT / "components" / "catalog") == ROOT


def test_outside_any_project_the_start_is_returned(tmp_path: Path):
    assert find_project_dir(tmp_path) == tmp_path.resolve()
