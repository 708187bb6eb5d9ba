"""Build the inventory from EC2 itself: `gpuforge validate --discover STACK`.

Stacks whose GPU nodes come from an EKS managed node group or an Auto Scaling group export an
inventory with no nodes (their instances are not known at deploy time). Every instance gpuforge
launches carries the stack's tags (core/config.py StackConfig.tags: project, stack,
profile, ...; the launch template propagates them to group members), so the running instances
are found by `project=gpuforge` + `stack=STACK`. The result is the same Inventory model a file
gives (validate/inventory.py), so everything after this is unchanged.

boto3 only: validate never imports pulumi (DESIGN.md). Every AWS failure becomes an InputError
(exit 2, one `error:` line), never a traceback.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gpuforge.common.errors import EXIT_CHECKS_FAILED, GpuforgeError, InputError
from gpuforge.validate.inventory import Inventory

PROJECT = "gpuforge"  # the `project` tag value (core/config.py PROJECT); a literal: no pulumi import
NAME_SUFFIX_TAG = "gpuforge-name-suffix"  # components/autoscaling.py NAME_SUFFIX_TAG (test_hostnames.py)
# EKS stacks' system node group (components/kubernetes/eks.py SYSTEM_ROLE_TAG) carries the stack's
# tags too; its nodes have no GPU and nothing of gpuforge's to validate, so they are left out.
ROLE_TAG, SYSTEM_ROLE = "gpuforge-node-role", "system"
_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthFailure",
           "InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken", "UnrecognizedClientException"}  # fmt: skip


def _filters(stack: str) -> list[dict[str, Any]]:
    return [
        {"Name": "tag:project", "Values": [PROJECT]},
        {"Name": "tag:stack", "Values": [stack]},
        {"Name": "instance-state-name", "Values": ["running"]},
    ]


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags") or [] if "Key" in t and "Value" in t}


class AwsUnreachable(GpuforgeError):
    """The EC2 endpoint did not answer: not bad input (exit 2) but, as in preflight, a check that
    could not be made (exit 1)."""

    exit_code = EXIT_CHECKS_FAILED


HEARTBEAT_S = 5.0


@contextmanager
def _waiting(progress: Callable[[str], None] | None, what: str, detail: str = "") -> Iterator[None]:
    """A line before the call, and one every HEARTBEAT_S while it lasts: never a silent wait."""
    if progress is None:
        yield
        return
    progress(f"discover: {what}{detail} ...")
    start, done = time.monotonic(), threading.Event()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            progress(f"discover: still waiting for {what} ({time.monotonic() - start:.0f} s)")

    ticker = threading.Thread(target=beat, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()


def _aws_error(api: str, exc: Exception, region: str | None) -> GpuforgeError:
    """One error per failure kind, naming the API and how to fix it."""
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        ReadTimeoutError,
    )

    where = f" in {region}" if region else ""
    if isinstance(exc, NoCredentialsError):
        return InputError(
            f"--discover: no AWS credentials found for {api}",
            "configure credentials (AWS_PROFILE, aws configure, or an instance role), or pass --inventory FILE",
        )
    if isinstance(exc, NoRegionError):
        return InputError("--discover: no AWS region configured", "pass --region (e.g. --region us-east-1)")
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code") or "")
        message = str(err.get("Message") or "").strip().splitlines()[0:1]
        text = f"{code}: {message[0]}" if message else code
        if code in _DENIED or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 403:
            return InputError(
                f"--discover: {api} was denied{where} ({text})",
                f"allow {api} for these credentials, or pass --inventory FILE",
            )
        return InputError(f"--discover: {api} failed{where} ({text})", "check --region and the credentials")
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError)):
        return AwsUnreachable(f"--discover: the EC2 endpoint{where} did not answer {api} ({exc})",
                              "check the network, a proxy, AWS_ENDPOINT_URL, the region; or pass --inventory FILE")  # fmt: skip
    return AwsUnreachable(f"--discover: {api} failed{where}: {type(exc).__name__}: {exc}",
                          "check the network and the credentials; --debug shows the traceback")  # fmt: skip


def _running_instances(ec2: Any, stack: str, page_size: int | None) -> list[dict[str, Any]]:
    paginator = ec2.get_paginator("describe_instances")
    config = {"PageSize": page_size} if page_size else {}
    out: list[dict[str, Any]] = []
    for page in paginator.paginate(Filters=_filters(stack), PaginationConfig=config):
        for reservation in page.get("Reservations", []):
            out.extend(i for i in reservation.get("Instances", []) if _tags(i).get(ROLE_TAG) != SYSTEM_ROLE)
    return out


def _zone_ids(ec2: Any) -> dict[str, str]:
    zones = ec2.describe_availability_zones(AllAvailabilityZones=True)["AvailabilityZones"]
    return {z["ZoneName"]: z["ZoneId"] for z in zones if "ZoneName" in z and "ZoneId" in z}


def nodes_from_instances(instances: list[dict[str, Any]], zone_ids: dict[str, str]) -> list[dict[str, Any]]:
    """Inventory node entries, the same keys as components/cluster.py's `inventory` export.

    Name: the Name tag, else the instance id. Auto Scaling and node-group members usually share
    one Name tag; names must be unique, so a shared Name gets the instance id appended.
    """
    names = Counter(_tags(i).get("Name") or i["InstanceId"] for i in instances)
    nodes = []
    for inst in instances:
        iid = inst["InstanceId"]
        tags = _tags(inst)
        tag_name = tags.get("Name") or iid
        # gpuforge's Auto Scaling nodes name their host Name-<instance id> (bootstrap base phase):
        # use that name even when only one of them runs, so validate's names match the hosts'.
        suffixed = tags.get(NAME_SUFFIX_TAG) == "instance-id" and "Name" in tags
        name = tag_name if names[tag_name] == 1 and not suffixed else f"{tag_name}-{iid}"
        public, private = inst.get("PublicIpAddress"), inst.get("PrivateIpAddress")
        host = public or private
        if not host:
            continue  # running without any address (detached ENI): nothing to reach
        zone = (inst.get("Placement") or {}).get("AvailabilityZone")
        nodes.append(
            {
                "name": name,
                "host": host,
                "instance_id": iid,
                "private_ip": private,
                "public_ip": public,
                "availability_zone": zone,
                "az_id": zone_ids.get(zone) if zone else None,
                "instance_type": inst.get("InstanceType"),
            }
        )
    return sorted(nodes, key=lambda n: n["name"])


def _profile(instances: list[dict[str, Any]], stack: str) -> str | None:
    profiles = sorted({p for i in instances if (p := _tags(i).get("profile"))})
    if len(profiles) > 1:
        raise InputError(
            f"--discover {stack}: the running instances carry different `profile` tags: {', '.join(profiles)}",
            "one stack has one profile; check the instances' tags, or pass --inventory FILE",
        )
    return profiles[0] if profiles else None


def discover_inventory(
    stack: str,
    region: str | None = None,
    *,
    ssh: dict[str, Any] | None = None,
    page_size: int | None = None,
    session: Any = None,
    progress: Callable[[str], None] | None = None,
) -> Inventory:
    """The Inventory of the stack's running instances; a GpuforgeError for every failure.

    The region is found as the AWS CLI finds it (gpuforge.common.awsconfig: --region, AWS_REGION,
    AWS_DEFAULT_REGION, the profile's); `progress` hears of every wait."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from gpuforge.common.awsconfig import aws_region

    api = "ec2:DescribeInstances"
    try:
        from botocore.config import Config

        # Bounded like preflight (issue 13 item 2): a stalled endpoint costs 2 x (5 + 10) s at
        # most, not botocore's default 60 s connect and read timeouts per attempt.
        bounded = Config(connect_timeout=5, read_timeout=10, retries={"mode": "standard", "total_max_attempts": 2})
        sess = session or boto3.session.Session()
        region, _source = aws_region(region, sess)
        ec2 = sess.client("ec2", region_name=region, config=bounded) if region else sess.client("ec2", config=bounded)
        region = region or ec2.meta.region_name
        bound = "up to 30 s: 2 attempts of 5 s connect + 10 s read"
        with _waiting(progress, api, f" in {region} at {ec2.meta.endpoint_url} ({bound})"):
            instances = _running_instances(ec2, stack, page_size)
        if not instances:
            raise InputError(
                f"--discover {stack}: no running instances tagged project={PROJECT}, stack={stack} in {region}",
                "check the stack name and --region; instances still booting or scaled to zero are not listed",
            )
        api = "ec2:DescribeAvailabilityZones"
        with _waiting(progress, api, f" in {region}"):
            zone_ids = _zone_ids(ec2)
    except (ClientError, BotoCoreError) as exc:
        raise _aws_error(api, exc, region) from None
    nodes = nodes_from_instances(instances, zone_ids)
    if not nodes:
        raise InputError(
            f"--discover {stack}: {len(instances)} running instance(s) but none has an IP address",
            "check the instances' network interfaces",
        )
    doc: dict[str, Any] = {"profile": _profile(instances, stack), "nodes": nodes}
    if ssh:
        doc["ssh"] = ssh
    return Inventory.model_validate(doc)
