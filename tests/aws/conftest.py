"""Graphs the mock engine records for the real program, for stack configs written on the fly:
the AWS and provider rules of docs/aws-constraints.md are checked on these."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.preview import PreviewResult, run_preview
from tests.components.stackcfg import base_config, with_overrides
from tests.support.moto_server import aws_env, moto_server

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
    cache: dict[str, PreviewResult] = {}
    proj = tmp_path_factory.mktemp("proj")
    shutil.copy(ROOT / "Pulumi.yaml", proj / "Pulumi.yaml")
    shutil.copy(ROOT / "__main__.py", proj / "__main__.py")
    (proj / "stacks").mkdir()

    def run(config: dict[str, Any], stack: str = "t") -> PreviewResult:
        key = yaml.safe_dump({"stack": stack, **config}, sort_keys=True)
        if key not in cache:
            (proj / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
            cache[key] = run_preview(proj, stack)
        return cache[key]

    return run


def one(run: Any, token: str, name_part: str = "") -> Any:
    found = [r for r in run.of_type(token) if name_part in r.name]
    assert len(found) == 1, [r.name for r in run.of_type(token)]
    return found[0]
