"""Fixtures for whole-program tests: run the real __main__.py offline, once per stack."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gpuforge.preview import PreviewResult, run_preview

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def preview_of() -> Callable[[str], PreviewResult]:
    """Preview of a committed stack, cached per session (each run is a whole program run)."""
    cache: dict[str, PreviewResult] = {}

    def get(stack: str) -> PreviewResult:
        if stack not in cache:
            cache[stack] = run_preview(ROOT, stack)
        return cache[stack]

    return get


@pytest.fixture
def project(tmp_path: Path) -> Callable[..., Path]:
    """A scratch copy of the project with one stack file written from a dict."""

    def make(stack: str = "t", config: dict | None = None, raw: str | None = None) -> Path:
        proj = tmp_path / "proj"
        if not proj.exists():
            proj.mkdir()
            shutil.copy(ROOT / "Pulumi.yaml", proj / "Pulumi.yaml")
            shutil.copy(ROOT / "__main__.py", proj / "__main__.py")
            (proj / "stacks").mkdir()
        text = raw if raw is not None else yaml.safe_dump({"config": config or {}})
        (proj / "stacks" / f"Pulumi.{stack}.yaml").write_text(text)
        return proj

    return make
