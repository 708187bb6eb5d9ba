"""Fixtures for the Slurm tests: the reference stacks with `gpuforge:scheduler: slurm`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuforge.core.config import StackConfig, parse_stack_config
from gpuforge.stackfile import load_stack_config
from tests.policy.conftest import record  # noqa: F401  (the recorded-graph fixture, for test_slurm_stack.py)

PROJECT = Path(__file__).resolve().parents[2]


def slurm_raw(stack: str, **extra: str) -> dict[str, Any]:
    raw, _ = load_stack_config(PROJECT, stack)
    # Slurm stacks run Ubuntu 24.04 (core/scheduler.py SLURM_OS_REFUSED)
    return {**raw, "gpuforge:scheduler": "slurm", "gpuforge:os": "ubuntu-24.04",
            **{f"gpuforge:{k}": v for k, v in extra.items()}}


def slurm_stack(stack: str, **extra: str) -> StackConfig:
    return parse_stack_config(slurm_raw(stack, **extra), stack)


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))
