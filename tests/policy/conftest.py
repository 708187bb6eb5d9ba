"""Graphs recorded by the offline engine for stack configs written on the fly."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuforge.preview import PreviewResult
from tests.components.stackcfg import with_overrides
from tests.support.preview_recorder import preview_recorder

ROOT = Path(__file__).resolve().parents[2]
TEAM = {"team": "vision", "owner": "vision-leads", "costCenter": "cc-4120"}


def stack_config(**over: Any) -> dict[str, Any]:
    """A valid cv-training team stack (vision team, budget set), with overrides (None removes)."""
    cfg: dict[str, Any] = {
        "aws:region": "us-east-1",
        "gpuforge:profile": "cv-training",
        "gpuforge:azId": "use1-az4",
        "gpuforge:sshCidrs": ["10.20.0.0/16"],
        "gpuforge:budgetUsd": 25000,
        **{f"gpuforge:{k}": v for k, v in TEAM.items()},
    }
    return with_overrides(cfg, over)


@pytest.fixture(scope="session")
def record(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., PreviewResult]:
    """Run the real program offline for a config; cached per config for the session."""
    recorder = preview_recorder(tmp_path_factory)

    def run(stack: str = "vision-cv", **over: Any) -> PreviewResult:
        return recorder(stack_config(**over), stack)

    return run


def mutate(resources: list[Any], type_token: str, change: Callable[[dict[str, Any]], None]) -> list[Any]:
    """A copy of a recorded graph with the inputs of every `type_token` resource changed."""
    out = []
    for r in resources:
        if r.type == type_token:
            inputs = copy.deepcopy(r.inputs)
            change(inputs)
            out.append(dataclasses.replace(r, inputs=inputs))
        else:
            out.append(r)
    return out
