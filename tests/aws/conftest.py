"""Graphs the mock engine records for the real program, for stack configs written on the fly:
the AWS and provider rules of docs/aws-constraints.md are checked on these."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuforge.offline.engine import OfflineRun, attempt_program
from gpuforge.offline.mocks import MockHints, OfflineMocks
from gpuforge.preview import PreviewResult
from gpuforge.stackfile import load_stack_config
from tests.components.stackcfg import base_config, with_overrides
from tests.support.moto_server import aws_env, moto_auth, moto_server
from tests.support.preview_recorder import preview_recorder

__all__ = ["aws_env", "moto_auth", "moto_server"]

ROOT = Path(__file__).resolve().parents[2]
# An EKS inference stack as the committed nlp-inference one, with the operator's CIDR named.
EKS = {
    "profile": "nlp-inference", "azId": "use1-az5", "kubernetes": "eks",
    "budgetUsd": 5000, "eksPublicAccessCidrs": ["198.51.100.0/24"], "publicIps": False,
}
# A globally routable operator address (1.1.1.0/24 is an ordinary unicast range, is_global True):
# what `pulumi up` accepts, where the documentation range above only passes the offline preview.
OPERATOR_CIDR = "1.1.1.0/24"
STACK_TYPE = "pulumi:pulumi:Stack"


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


def pulumi_up(project: Path, config: dict[str, Any] | None, stack: str = "t", latest: int = 1,
              az_id: str = "use1-az4") -> tuple[OfflineRun, Exception | None]:
    """Run the real program as `pulumi up` runs it (the mock engine, not as the offline preview:
    cli/program.py running_offline is False), for `config` written as stacks/Pulumi.<stack>.yaml
    into `project` (a scratch copy of Pulumi.yaml and __main__.py), or for the stack file already
    there when `config` is None. Returns what was registered and the error that stopped it."""
    import shutil

    import yaml

    if not (project / "Pulumi.yaml").exists():
        (project / "stacks").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "Pulumi.yaml", project / "Pulumi.yaml")
        shutil.copy(ROOT / "__main__.py", project / "__main__.py")
    if config is not None:
        (project / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    raw, secrets = load_stack_config(project, stack)
    hints = MockHints(region=str(raw.get("aws:region", "us-east-1")), az_id=az_id, subnet_cidr="10.42.0.0/20",
                      template_latest_version=latest)
    return attempt_program(project, "gpuforge", stack, raw, secrets, OfflineMocks(hints), as_pulumi_up=True)


def created(run: OfflineRun) -> list[Any]:
    """What the run registered besides the program's Stack: resources `pulumi up` would create."""
    return [r for r in run.resources if r.type != STACK_TYPE]
