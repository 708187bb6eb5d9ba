"""Item 8 of issue 10: a routine `pulumi up` must not replace every GPU node.

`launch_template` is ForceNew on aws_instance (terraform-provider-aws
internal/service/ec2/ec2_instance.go @0015dfcd), so an instance input that follows the
template's latest version replaces the node whenever the template changes; and a looked-up
`most_recent` AMI changes the template whenever a new image is published."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from gpuforge.common.errors import ConfigError
from gpuforge.components.ami import require_pinned_ami
from gpuforge.core.config import PROJECT
from gpuforge.offline.engine import run_program
from gpuforge.offline.mocks import MockHints, OfflineMocks
from gpuforge.stackfile import load_stack_config
from tests.components.stackcfg import base_config

ROOT = Path(__file__).resolve().parents[2]
INSTANCE = "aws:ec2/instance:Instance"


def run_with(tmp_path: Path, config: dict, latest: int):
    (tmp_path / "stacks").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copy(ROOT / "__main__.py", tmp_path / "__main__.py")
    (tmp_path / "stacks" / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": config}))
    raw, secrets = load_stack_config(tmp_path, "t")
    hints = MockHints(region="us-east-1", az_id="use1-az4", subnet_cidr="10.42.0.0/20", template_latest_version=latest)
    return run_program(tmp_path, PROJECT, "t", raw, secrets, OfflineMocks(hints))


def test_changed_template_does_not_move_the_instances(tmp_path) -> None:
    """The template has had two changes since the nodes were created (latest version 3): the
    instances' launch-template input stays at the version they booted, so no replacement."""
    run = run_with(tmp_path, base_config(nodeCount=2), latest=3)
    versions = {i.name: i.inputs["launchTemplate"]["version"] for i in run.of_type(INSTANCE)}
    assert versions == {"t-node01": "1", "t-node02": "1"}
    assert run.outputs["nodeTemplateVersions"] == {"booted": 1, "latest": 3}


def test_raising_the_pin_rolls_the_nodes_on_purpose(tmp_path) -> None:
    run = run_with(tmp_path, base_config(nodeTemplateVersion=3), latest=3)
    assert {i.inputs["launchTemplate"]["version"] for i in run.of_type(INSTANCE)} == {"3"}


def test_eks_gpu_node_group_keeps_its_template_version(tmp_path) -> None:
    """The same rule for the EKS GPU node group: a changed template (latest 3) rolls no node."""
    from tests.aws.conftest import eks_config

    run = run_with(tmp_path, eks_config(azId="use1-az4"), latest=3)
    (gpu,) = [g for g in run.of_type("aws:eks/nodeGroup:NodeGroup") if g.name.endswith("-gpu")]
    assert gpu.inputs["launchTemplate"]["version"] == "1"


def test_real_deployment_refuses_an_unpinned_ami() -> None:
    with pytest.raises(ConfigError) as exc:
        require_pinned_ami(None, "ubuntu-22.04", False, "us-east-1", offline=False)
    text = exc.value.render()
    assert "gpuforge:amiId" in text and "--owners 099720109477" in text and "ubuntu-jammy-22.04" in text
    require_pinned_ami("ami-0abc12345", "ubuntu-22.04", False, "us-east-1", offline=False)  # pinned: fine
    require_pinned_ami(None, "ubuntu-22.04", False, "us-east-1", offline=True)  # offline preview: lookup


def test_pinned_ami_is_what_the_template_boots(record) -> None:
    run = record(base_config(amiId="ami-0abc1234567890def"), stack="pinned").run
    (lt,) = run.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert lt.inputs["imageId"] == "ami-0abc1234567890def"


def test_preview_warns_that_pulumi_up_would_refuse_the_unpinned_ami(record) -> None:
    assert any("gpuforge:amiId is not set" in w for w in record(base_config(), stack="unpinned").warnings)
    assert not record(base_config(amiId="ami-0abc1234567890def"), stack="pinned").warnings
