"""Preflight tests run against the shared moto server fixtures, plus in-process injections.

The fixtures are imported, not listed in `pytest_plugins`: pytest only accepts
`pytest_plugins` in the rootdir conftest, and this one is not at the root.
moto serves no EC2 service quotas and no capacity reservations (research/moto-coverage.md), so
`quotas` patches the in-process server's Service Quotas backend; the server still answers over
HTTP, so the code under test takes its real path through boto3.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
from moto.servicequotas.exceptions import NoSuchResource
from moto.servicequotas.models import ServiceQuotasBackend

from tests.support.moto_server import aws_env, moto_auth, moto_server

__all__ = ["aws_env", "moto_auth", "moto_server"]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's Pulumi.yaml and stacks, so --pin-az edits never touch the repo."""
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(REPO / "stacks", tmp_path / "stacks")
    return tmp_path


@pytest.fixture
def quotas(aws_env: str) -> Iterator[Callable[[dict[str, float]], None]]:
    """`quotas({"L-417A185B": 384})` makes the server answer those EC2 quota values."""
    values: dict[str, float] = {}

    def get_service_quota(self: Any, service_code: str, quota_code: str) -> dict[str, Any]:
        if service_code == "ec2" and quota_code in values:
            return {"ServiceCode": "ec2", "QuotaCode": quota_code, "Value": values[quota_code], "Unit": "None"}
        raise NoSuchResource

    with mock.patch.object(ServiceQuotasBackend, "get_service_quota", get_service_quota):
        yield values.update


@pytest.fixture
def image_id(aws_env: str) -> str:
    """An available x86_64 image of moto's built-in set (moto has no Ubuntu 22.04 image)."""
    images = boto3.client("ec2").describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}])["Images"]
    return str(next(i["ImageId"] for i in images if i["State"] == "available" and "ubuntu" in i["Name"].lower()))


@pytest.fixture
def set_stack(project: Path) -> Callable[..., None]:
    """`set_stack("cv-training", amiId=...)`: add or replace scalar `gpuforge:<key>` lines by hand."""

    def edit(stack: str, **values: str) -> None:
        path = project / "stacks" / f"Pulumi.{stack}.yaml"
        lines = [ln for ln in path.read_text().splitlines() if not any(f"gpuforge:{k}:" in ln for k in values)]
        i = lines.index("config:") + 1
        lines[i:i] = [f"  gpuforge:{k}: {v}" for k, v in values.items()]
        path.write_text("\n".join(lines) + "\n")

    return edit
