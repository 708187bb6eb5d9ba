"""Graphs the mock engine records for the real program, for stack configs written on the fly:
the AWS and provider rules of docs/aws-constraints.md are checked on these."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuforge.preview import PreviewResult
from tests.components.stackcfg import base_config, with_overrides
from tests.support.moto_server import aws_env, moto_server
from tests.support.preview_recorder import preview_recorder

__all__ = ["aws_env", "moto_server"]

ROOT = Path(__file__).resolve().parents[2]
# An EKS inference stack as the committed nlp-inference one, with the operator's CIDR named.
EKS = {
    "profile": "nlp-inference", "azId": "use1-az5", "kubernetes": "eks",
    "budgetUsd": 5000, "eksPublicAccessCidrs": ["198.51.100.0/24"], "publicIps": False,
}


def eks_config(**over: Any) -> dict[str, Any]:
    return with_overrides(base_config(**EKS), over)


@pytest.fixture(scope="session")
def record(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., PreviewResult]:
    """Run the real program offline for `config` (a full `ns:key` dict); cached per config."""
    recorder = preview_recorder(tmp_path_factory)

    def run(config: dict[str, Any], stack: str = "t") -> PreviewResult:
        return recorder(config, stack)

    return run


def one(run: Any, token: str, name_part: str = "") -> Any:
    found = [r for r in run.of_type(token) if name_part in r.name]
    assert len(found) == 1, [r.name for r in run.of_type(token)]
    return found[0]
