"""`gpuforge validate --discover STACK` against the real moto server (tests/support/moto_server.py).

Instances are launched with run_instances + TagSpecifications, as the launch template of an
Auto Scaling group or EKS node group tags them, then discovered over HTTP through boto3.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpuforge.cli import main
from gpuforge.validate.discover import discover_inventory

TAGS = {"project": "gpuforge", "stack": "cv-training", "profile": "cv-training", "team": "vision", "owner": "ana"}


@pytest.fixture
def image_id(aws_env: str) -> str:
    images = boto3.client("ec2").describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}])["Images"]
    return str(next(i["ImageId"] for i in images if i["State"] == "available"))


def launch(image_id: str, n: int, tags: dict[str, str], *, subnet: str | None = None, itype: Any = "p4de.24xlarge") -> list[str]:
    kwargs: dict[str, Any] = {"SubnetId": subnet} if subnet else {}
    tag_list: list[Any] = [{"Key": k, "Value": v} for k, v in tags.items()]
    res = boto3.client("ec2").run_instances(
        ImageId=image_id, MinCount=n, MaxCount=n, InstanceType=itype,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tag_list}], **kwargs,
    )  # fmt: skip
    return [i["InstanceId"] for i in res["Instances"]]


def private_subnet() -> str:
    ec2 = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    return str(ec2.create_subnet(VpcId=vpc, CidrBlock="10.42.1.0/24", AvailabilityZone="us-east-1b")["Subnet"]["SubnetId"])


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ex:
        main(["validate", *args])
    out = capsys.readouterr()
    return int(ex.value.code or 0), out.out, out.err


def test_discovers_only_the_stacks_running_instances(aws_env: str, image_id: str) -> None:
    ec2 = boto3.client("ec2")
    named = launch(image_id, 1, {**TAGS, "Name": "cv-training-gpu-0"})
    unnamed = launch(image_id, 1, TAGS, subnet=private_subnet())  # private only: host is the private IP
    stopped = launch(image_id, 1, {**TAGS, "Name": "stopped"})
    ec2.stop_instances(InstanceIds=stopped)
    launch(image_id, 1, {**TAGS, "stack": "nlp-inference", "Name": "other-stack"})
    launch(image_id, 1, {**TAGS, "project": "someone-else", "Name": "other-project"})
    # an EKS stack's system node (components/kubernetes/eks.py): the stack's tags, no GPU to validate
    launch(image_id, 1, {**TAGS, "gpuforge-node-role": "system", "Name": "system"}, itype="m6i.large")

    inv = discover_inventory("cv-training", ssh={"user": "ubuntu", "key_file": "/k"})
    by_id = {n.extras()["instance_id"]: n for n in inv.nodes}
    assert set(by_id) == {named[0], unnamed[0]}
    zones = {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    desc = {i["InstanceId"]: i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}

    n = by_id[named[0]]
    assert n.name == "cv-training-gpu-0" and n.instance_type == "p4de.24xlarge"
    assert n.host == desc[named[0]]["PublicIpAddress"] and n.private_ip == desc[named[0]]["PrivateIpAddress"]
    az = desc[named[0]]["Placement"]["AvailabilityZone"]
    assert n.extras()["availability_zone"] == az and n.extras()["az_id"] == zones[az]

    u = by_id[unnamed[0]]
    assert "PublicIpAddress" not in desc[unnamed[0]]
    assert u.name == unnamed[0] and u.host == desc[unnamed[0]]["PrivateIpAddress"]
    assert u.extras()["az_id"] == zones["us-east-1b"]
    assert inv.profile == "cv-training" and inv.ssh.user == "ubuntu" and inv.ssh.key_file == "/k"


def test_pagination_and_shared_name_tags(aws_env: str, image_id: str) -> None:
    """An Auto Scaling group's members share one Name tag: names get the instance id to stay unique."""
    # one reservation each: EC2 (and moto) page by reservation, not by instance
    ids = [i for _ in range(7) for i in launch(image_id, 1, {**TAGS, "Name": "asg-member"})]
    ids += [i for _ in range(5) for i in launch(image_id, 1, TAGS)]
    pages = list(boto3.client("ec2").get_paginator("describe_instances").paginate(PaginationConfig={"PageSize": 5}))
    assert len(pages) == 3  # the server really pages at this size, so the next assertion tests our paging
    inv = discover_inventory("cv-training", page_size=5)
    assert sorted(n.extras()["instance_id"] for n in inv.nodes) == sorted(ids)
    assert sorted(n.name for n in inv.nodes if n.name.startswith("asg-member")) == sorted(f"asg-member-{i}" for i in ids[:7])


def test_single_auto_scaling_node_is_named_as_its_host(aws_env: str, image_id: str) -> None:
    """A gpuforge Auto Scaling node names its host Name-<instance id> (bootstrap base phase), even
    when it is the group's only member: discover must use the same name."""
    (iid,) = launch(image_id, 1, {**TAGS, "Name": "cv-training-node", "gpuforge-name-suffix": "instance-id"})
    (plain,) = launch(image_id, 1, {**TAGS, "Name": "cv-training-node01"})
    names = {n.extras()["instance_id"]: n.name for n in discover_inventory("cv-training").nodes}
    assert names == {iid: f"cv-training-node-{iid}", plain: "cv-training-node01"}


def _error(err: str) -> str:
    """stderr from the `error:` line on; what comes before it must be progress (issue 22: a wait
    for AWS is said while it lasts)."""
    head, sep, tail = err.partition("error: ")
    assert sep and all(line.startswith("discover: ") for line in head.splitlines()), err
    return sep + tail


def test_cli_no_running_instances_is_exit_2(aws_env: str, image_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    stopped = launch(image_id, 2, TAGS)
    boto3.client("ec2").stop_instances(InstanceIds=stopped)
    code, _, err = cli(capsys, "--discover", "cv-training", "--region", "us-east-1")
    assert code == 2 and _error(err).startswith("error: --discover cv-training: no running instances tagged")
    assert "us-east-1" in err and "Traceback" not in err


def test_cli_access_denied_is_exit_2(
    aws_env: str,
    image_id: str,
    moto_auth: Callable[[float], None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    launch(image_id, 1, TAGS)
    iam = boto3.client("iam")
    iam.create_user(UserName="validator")
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["ec2:DescribeAvailabilityZones"], "Resource": "*"},
        {"Effect": "Deny", "Action": ["ec2:DescribeInstances"], "Resource": "*"}]}  # fmt: skip
    iam.put_user_policy(UserName="validator", PolicyName="p", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="validator")["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    moto_auth(0)
    code, _, err = cli(capsys, "--discover", "cv-training")
    assert code == 2, err
    assert _error(err).startswith("error: --discover: ec2:DescribeInstances was denied") and "Traceback" not in err
    assert "allow ec2:DescribeInstances" in err


def test_cli_no_credentials_is_exit_2(aws_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    code, _, err = cli(capsys, "--discover", "cv-training")
    assert code == 2 and _error(err).startswith("error: --discover: no AWS credentials found") and "Traceback" not in err


def test_cli_discover_and_inventory_are_exclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"nodes": [{"name": "a", "host": "127.0.0.1"}]}))
    for args in (["--inventory", str(inv), "--discover", "cv-training"], []):
        code, _, err = cli(capsys, *args)
        assert code == 2 and err.startswith("error: pass exactly one of --inventory FILE and --discover STACK")
    code, _, err = cli(capsys, "--inventory", str(inv), "--region", "us-east-1")
    assert code == 2 and "--region only applies to --discover" in err


def test_cli_discovered_inventory_reaches_the_runner(
    aws_env: str, image_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the CLI: the discovered node is the one validated, under its Name tag.

    moto's addresses must not be dialled (tests stay on loopback), so the one node is validated
    with --transport local: the run is still the real runner over the discovered inventory.
    """
    launch(image_id, 1, {**TAGS, "Name": "gpu-0"})
    code, out, err = cli(capsys, "--discover", "cv-training", "--region", "us-east-1", "--transport", "local",
                         "--checks", "system", "--format", "json", "--out", str(tmp_path / "ev"))  # fmt: skip
    doc = json.loads(out)
    assert list(doc["context"]["nodes"]) == ["gpu-0"] and doc["context"]["transport"] == "local", err
    assert code in (0, 1) and "Traceback" not in err


def test_ssh_flags_override_an_inventory_file(tmp_path: Path) -> None:
    from gpuforge.commands.validate import _load

    inv = tmp_path / "inv.yaml"
    inv.write_text("ssh: {user: root, port: 2222}\nnodes: [{name: a, host: 127.0.0.1}]\n")
    got = _load(str(inv), None, None, {"user": "ubuntu", "key_file": "/k", "known_hosts": None})
    assert (got.ssh.user, got.ssh.key_file, got.ssh.port) == ("ubuntu", "/k", 2222)
