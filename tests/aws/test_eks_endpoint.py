"""Item 3 of issue 10: the machine that runs `pulumi up` must reach the EKS API, since every
Kubernetes object is declared through it (EKS user guide, "Cluster API server endpoint")."""

from __future__ import annotations

import pytest

from gpuforge.common.errors import ConfigError
from gpuforge.core.config import parse_stack_config
from gpuforge.offline.mocks import _digest
from gpuforge.preview import run_preview
from tests.aws.conftest import ROOT, eks_config, one

CLUSTER = "aws:eks/cluster:Cluster"
PRIVATE = {"eksEndpointAccess": "private", "eksPublicAccessCidrs": [], "eksPrivateAccessCidrs": ["10.8.0.0/16"],
           "eksTransitGatewayId": "tgw-0123456789abcdef0", "eksTransitGatewayRouteTableId": "tgw-rtb-0123456789abcdef0"}


def test_committed_inference_stack_opens_the_api_to_named_cidrs_only() -> None:
    run = run_preview(ROOT, "nlp-inference").run
    vpc = one(run, CLUSTER).inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is True and vpc["endpointPrivateAccess"] is True
    assert vpc["publicAccessCidrs"] == ["203.0.113.0/24"]  # named in stacks/Pulumi.nlp-inference.yaml


@pytest.mark.parametrize(
    ("over", "key", "hint"),
    [
        ({"eksPublicAccessCidrs": []}, "gpuforge:eksPublicAccessCidrs", "0.0.0.0/0"),
        ({"eksPublicAccessCidrs": ["0.0.0.0/0"]}, "gpuforge:eksPublicAccessCidrs", "whole internet"),
        ({"eksPublicAccessCidrs": ["10.0.0.0/8"]}, "gpuforge:eksPublicAccessCidrs", "private range"),
        ({**PRIVATE, "eksTransitGatewayId": None}, "gpuforge:eksTransitGatewayId", "transit gateway"),
        ({**PRIVATE, "eksPrivateAccessCidrs": []}, "gpuforge:eksPrivateAccessCidrs", "operators' networks"),
        ({**PRIVATE, "eksTransitGatewayRouteTableId": None}, "gpuforge:eksTransitGatewayRouteTableId", "route table"),
        ({**PRIVATE, "eksTransitGatewayRouteTableId": "rtb-0123456789abcdef0"}, "gpuforge:eksTransitGatewayRouteTableId",
         "tgw-rtb-"),
        ({**PRIVATE, "eksPublicAccessCidrs": ["198.51.100.0/24"]}, "gpuforge:eksPublicAccessCidrs", "private"),
        ({"eksTransitGatewayId": "tgw-0123456789abcdef0"}, "gpuforge:eksEndpointAccess", "private"),
    ],
)
def test_unreachable_or_open_api_is_refused(over, key, hint) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_stack_config(eks_config(**over), "t")
    assert exc.value.key == key and hint in exc.value.render()


def test_private_endpoint_gets_the_named_path_and_the_443_rule(record) -> None:
    run = record(eks_config(**PRIVATE), stack="priv").run
    cluster = one(run, CLUSTER)
    vpc = cluster.inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is False and vpc["endpointPrivateAccess"] is True
    assert "publicAccessCidrs" not in vpc
    attach = one(run, "aws:ec2transitgateway/vpcAttachment:VpcAttachment").inputs
    assert attach["transitGatewayId"] == "tgw-0123456789abcdef0"
    assert attach["subnetIds"] == vpc["subnetIds"]  # both AZs that hold endpoint ENIs
    routes = [r.inputs for r in run.of_type("aws:ec2/route:Route") if r.inputs.get("transitGatewayId")]
    (node_rt,) = [r for r in run.of_type("aws:ec2/routeTable:RouteTable") if r.name == "priv-rt"]
    tables = {r["routeTableId"] for r in routes}
    assert len(tables) == 2 and f"{node_rt.name}-offline" in tables  # node subnet's table and the main one
    assert all(r["destinationCidrBlock"] == "10.8.0.0/16" for r in routes)
    (rule,) = [r.inputs for r in run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
               if r.inputs.get("fromPort") == 443]
    assert (rule["toPort"], rule["ipProtocol"], rule["cidrIpv4"]) == (443, "tcp", "10.8.0.0/16")
    assert rule["securityGroupId"] == f"sg-{_digest(cluster.name):08x}"  # the cluster's group (mock output)
