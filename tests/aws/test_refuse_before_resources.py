"""Issue 21 items 1, 4 and 6: every refusal of `pulumi up` comes before its first resource.

Each test runs the real program as `pulumi up` runs it (the SDK's mock engine, not as the
offline preview: tests/aws/conftest.py `pulumi_up`) and counts what was registered: a refusal
after the VPC, the NAT gateway or the control plane would leave billable resources behind.
AWS is a moto server on 127.0.0.1 (the AMI lookup of the refusal asks it).
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from gpuforge.common.errors import ConfigError
from gpuforge.core.config import parse_stack_config
from gpuforge.core.config_rules import iam_role_names
from gpuforge.core.limits import limit
from gpuforge.preview import run_preview
from tests.aws.conftest import OPERATOR_CIDR, ROOT, created, eks_config, pulumi_up
from tests.components.stackcfg import base_config

COMMITTED = sorted(p.name.split(".")[1] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


def committed_project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "stacks", proj / "stacks")
    shutil.copy(ROOT / "Pulumi.yaml", proj / "Pulumi.yaml")
    shutil.copy(ROOT / "__main__.py", proj / "__main__.py")
    return proj


def refusal(run, error) -> str:
    """The refusal's text, asserting that nothing was registered before it."""
    assert error is not None, "pulumi up went ahead"
    assert created(run) == [], [r.name for r in created(run)][:5]
    text = str(error)
    assert text.startswith("error: ") and "\n  fix: " in text, text
    return text


@pytest.mark.parametrize("stack", COMMITTED)
def test_committed_stack_creates_its_resources_or_refuses_before_the_first(aws_env, tmp_path, stack) -> None:
    run, error = pulumi_up(committed_project(tmp_path), None, stack=stack)
    if error is None:
        assert created(run)
    else:
        refusal(run, error)


def test_committed_inference_stack_refuses_its_placeholder_with_the_command_that_fixes_it(aws_env, tmp_path) -> None:
    run, error = pulumi_up(committed_project(tmp_path), None, stack="nlp-inference")
    text = refusal(run, error)
    assert "gpuforge:eksPublicAccessCidrs: 203.0.113.0/24 is a documentation range" in text
    assert "pulumi config set --path 'gpuforge:eksPublicAccessCidrs[0]' \"$(curl -s https://checkip.amazonaws.com)/32\"" in text
    assert "eksEndpointAccess: private" in text  # or the private path


def test_the_offline_preview_only_warns_and_still_prints_the_graph() -> None:
    result = run_preview(ROOT, "nlp-inference")
    assert any(w.startswith("`pulumi up` would refuse: error: gpuforge:eksPublicAccessCidrs") for w in result.warnings)
    assert result.run.of_type("aws:eks/cluster:Cluster")  # the graph is the stack's, placeholder and all


@pytest.mark.parametrize("cidr", ["203.0.113.0/24", "192.0.2.10/32", "100.64.0.0/10", "198.18.0.0/15", "2001:db8::/48"])
def test_an_operator_cidr_that_is_not_globally_routable_is_refused_before_any_resource(aws_env, tmp_path, cidr) -> None:
    text = refusal(*pulumi_up(tmp_path, eks_config(azId="use1-az5", eksPublicAccessCidrs=[cidr]), az_id="use1-az5"))
    assert text.startswith(f"error: gpuforge:eksPublicAccessCidrs: {cidr} is ")
    assert limit("eks_public_access_cidrs_global").source in text


@pytest.mark.parametrize("cidr", ["100.64.0.0/10", "198.18.0.0/15"])
def test_a_non_global_range_that_is_no_placeholder_fails_the_preview_too(cidr) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_stack_config(eks_config(eksPublicAccessCidrs=[cidr]), "t")
    assert "not globally routable" in exc.value.render()


def test_a_globally_routable_operator_cidr_deploys(aws_env, tmp_path) -> None:
    run, error = pulumi_up(tmp_path, eks_config(azId="use1-az5", eksPublicAccessCidrs=[OPERATOR_CIDR]), az_id="use1-az5")
    assert error is None, error
    (cluster,) = run.of_type("aws:eks/cluster:Cluster")
    assert cluster.inputs["vpcConfig"]["publicAccessCidrs"] == [OPERATOR_CIDR]


# --- the AMI refusal (item 6): the exact command, with the image found in the region ---------------------------

CANONICAL = "099720109477"


def add_images(images: list[tuple[str, str, str]], region: str = "us-east-1") -> None:
    """Images as Canonical publishes them, into the in-process moto server's EC2 backend (moto's
    RegisterImage cannot set another owner): (id, name, creation date)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import Ami

    backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
    for image_id, name, created_at in images:
        backend.amis[image_id] = Ami(backend, image_id, name=name, owner_id=CANONICAL, architecture="x86_64",
                                     virtualization_type="hvm", creation_date=dt.datetime.fromisoformat(created_at))


def test_unpinned_ami_refusal_names_the_image_found_for_the_region(aws_env, tmp_path) -> None:
    jammy = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-"
    add_images([
        ("ami-0aaaaaaaaaaaaaaa1", jammy + "20261001", "2026-10-01T00:00:00+00:00"),
        ("ami-0bbbbbbbbbbbbbbb2", jammy + "20261120", "2026-11-20T00:00:00+00:00"),  # the newest
        ("ami-0ccccccccccccccc3", "ubuntu/images/hvm-ssd/ubuntu-focal-20.04-amd64-server-20261201",
         "2026-12-01T00:00:00+00:00"),  # another release: not matched
    ])
    text = refusal(*pulumi_up(tmp_path, base_config()))
    assert text.startswith("error: gpuforge:amiId: not set")
    assert text.endswith("`pulumi config set gpuforge:amiId ami-0bbbbbbbbbbbbbbb2`"), text


def test_without_a_match_the_refusal_shows_how_to_find_one(aws_env, tmp_path) -> None:
    text = refusal(*pulumi_up(tmp_path, base_config()))
    assert "aws ec2 describe-images --region us-east-1 --owners 099720109477" in text


def test_a_pinned_ami_deploys(aws_env, tmp_path) -> None:
    run, error = pulumi_up(tmp_path, base_config(amiId="ami-0abc1234567890def"))
    assert error is None and created(run)


# --- limits from core/aws_limits.yaml, refused before the first resource ---------------------------------

def test_user_data_over_the_ec2_limit_is_refused_before_any_resource(aws_env, tmp_path, monkeypatch) -> None:
    from gpuforge.bootstrap import render

    monkeypatch.setattr(render, "EC2_USER_DATA_LIMIT", 1000)  # any real rendering is larger
    text = refusal(*pulumi_up(tmp_path, base_config(amiId="ami-0abc1234567890def")))
    assert "user data for the launch template" in text and "EC2 allows 1000" in text


def test_a_stack_name_too_long_for_its_iam_roles_is_refused_before_any_resource(aws_env, tmp_path) -> None:
    longest = max(iam_role_names("x", "eks", "none", False), key=len)
    room = limit("iam_role_name_chars").value - limit("pulumi_autoname_suffix_chars").value - (len(longest) - 1)
    config = eks_config(azId="use1-az5", eksPublicAccessCidrs=[OPERATOR_CIDR], bucketBase="gf-names")
    text = refusal(*pulumi_up(tmp_path, config, stack="s" * (room + 1), az_id="use1-az5"))
    assert text.startswith("error: stack: ") and f"at most {room} characters" in text
    run, error = pulumi_up(tmp_path, config, stack="s" * room, az_id="use1-az5")
    assert error is None
    assert max(len(r.name) for r in run.of_type("aws:iam/role:Role")) + 8 == limit("iam_role_name_chars").value


@pytest.mark.parametrize(("over", "kubernetes", "scheduler", "boots"), [
    ({}, "none", "none", True),
    ({"scheduler": "slurm", "nodeCount": 2, "os": "ubuntu-24.04"}, "none", "slurm", True),
    ({**{k: v for k, v in eks_config().items() if k.startswith("gpuforge:")}, "gpuforge:azId": "use1-az5",
      "gpuforge:eksPublicAccessCidrs": [OPERATOR_CIDR]}, "eks", "none", False),
])
def test_the_role_names_config_judges_are_the_roles_the_program_declares(aws_env, tmp_path, over, kubernetes,
                                                                          scheduler, boots) -> None:
    config = {**base_config(amiId="ami-0abc1234567890def"), **{(k if ":" in k else f"gpuforge:{k}"): v
                                                                for k, v in over.items()}}
    run, error = pulumi_up(tmp_path, config, stack="names", az_id=config["gpuforge:azId"])
    assert error is None, error
    assert sorted(r.name for r in run.of_type("aws:iam/role:Role")) == sorted(
        iam_role_names("names", kubernetes, scheduler, boots))
