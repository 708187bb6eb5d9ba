"""Item 6 of issue 10: a stack in an existing VPC (gpuforge:vpcId/subnetId).

The mock answers the EC2 route-table lookups with EC2's filter semantics (cli/offline/mocks.py
ExistingVpc): `association.subnet-id` matches explicit associations only, so a subnet that follows
the VPC's main route table has none, and terraform-provider-aws's singular route-table data source
fails on it ("query returned no results", vpc_route_table_data_source.go)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from gpuforge.core.config import PROJECT
from gpuforge.offline.engine import run_program
from gpuforge.offline.mocks import ExistingVpc, MockHints, OfflineMocks
from gpuforge.stackfile import load_stack_config
from tests.components.stackcfg import base_config

ROOT = Path(__file__).resolve().parents[2]
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
CONFIG = base_config(vpcId="vpc-0abc12345", subnetId="subnet-0abc12345")


def run_in(tmp_path: Path, vpc: ExistingVpc):
    (tmp_path / "stacks").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copy(ROOT / "__main__.py", tmp_path / "__main__.py")
    (tmp_path / "stacks" / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": CONFIG}))
    raw, secrets = load_stack_config(tmp_path, "t")
    hints = MockHints(region="us-east-1", az_id="use1-az4", subnet_cidr="10.42.0.0/20", existing_vpc=vpc)
    return run_program(tmp_path, PROJECT, "t", raw, secrets, OfflineMocks(hints))


def test_subnet_on_the_main_route_table_gets_endpoints_on_the_main_table(tmp_path) -> None:
    run = run_in(tmp_path, ExistingVpc(main_route_table="rtb-0main"))
    endpoints = run.of_type(ENDPOINT)
    assert sorted(e.inputs["serviceName"] for e in endpoints) == ["com.amazonaws.us-east-1.s3",
                                                                  "com.amazonaws.us-east-1.s3express"]
    assert all(e.inputs["routeTableIds"] == ["rtb-0main"] for e in endpoints)


def test_explicitly_associated_subnet_uses_its_own_table(tmp_path) -> None:
    run = run_in(tmp_path, ExistingVpc(main_route_table="rtb-0main", subnet_route_table="rtb-0own"))
    assert {tuple(e.inputs["routeTableIds"]) for e in run.of_type(ENDPOINT)} == {("rtb-0own",)}


def test_existing_gateway_endpoint_is_not_created_again(tmp_path) -> None:
    vpc = ExistingVpc(main_route_table="rtb-0main", endpoint_routes=(("rtb-0main", "s3"),))
    run = run_in(tmp_path, vpc)
    assert [e.inputs["serviceName"] for e in run.of_type(ENDPOINT)] == ["com.amazonaws.us-east-1.s3express"]


def test_mock_singular_lookup_fails_like_the_provider(tmp_path) -> None:
    """The port of the provider's rule itself: a main-table subnet has no association to find."""
    mocks = OfflineMocks(MockHints("us-east-1", "use1-az4", "10.42.0.0/20"))
    with pytest.raises(Exception, match="query returned no results"):
        mocks._route_table({"subnetId": "subnet-0abc12345"})
