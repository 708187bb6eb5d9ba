"""Shared fixtures for the bootstrap tests (`--update-golden` is registered in tests/conftest.py).

`pytest tests/bootstrap --update-golden` rewrites tests/bootstrap/golden/ from the current
templates on purpose; review the diff before committing it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuforge.core.config import StackConfig, parse_stack_config
from gpuforge.stackfile import load_stack_config

PROJECT = Path(__file__).resolve().parents[2]
STACKS = ("cv-training", "nlp-inference", "risk-sim")


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
    return bool(request.config.getoption("--update-golden"))
