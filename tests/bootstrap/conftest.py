"""Shared fixtures for the bootstrap tests, and the `--update-golden` option.

`pytest tests/bootstrap --update-golden` rewrites tests/bootstrap/golden/ from the current
templates on purpose; review the diff before committing it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from components.config import StackConfig, parse_stack_config
from gpuforge.stackfile import load_stack_config

PROJECT = Path(__file__).resolve().parents[2]
STACKS = ("cv-training", "nlp-inference", "risk-sim")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False, help="rewrite tests/bootstrap/golden")


@pytest.fixture(scope="session")
def stack_cfg() -> dict[str, StackConfig]:
    """The three reference stacks, parsed from stacks/ as `gpuforge` would."""
    out = {}
    for stack in STACKS:
        raw, _ = load_stack_config(PROJECT, stack)
        out[stack] = parse_stack_config(raw, stack)
    return out


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    # getoption with a default: the option exists only when this conftest loads at startup
    # (pytest tests/bootstrap ...); a plain `pytest` run compares against the golden files.
    return bool(request.config.getoption("--update-golden", default=False))
