"""Item 4 of issue 10: every node has a way out. Public nodes route to an internet gateway with
public IPs; private ones (always on EKS) through a NAT gateway and/or interface endpoints; EKS
rejects a node subnet that routes to an internet gateway without public IPs
(Ec2SubnetInvalidConfiguration)."""

from __future__ import annotations

import pytest

from gpuforge.common.errors import ConfigError
from gpuforge.core.addressing import INTERFACE_SERVICES
from gpuforge.core.config import parse_stack_config
from gpuforge.core.costplan import platform_items
from gpuforge.preview import run_preview
from tests.aws.conftest import ROOT, eks_config, one
from tests.components.stackcfg import base_config

SUBNET, ROUTE = "aws:ec2/subnet:Subnet", "aws:ec2/route:Route"


def routes_of_subnet(run, subnet_id: str) -> list[dict]:
    """The routes of the table associated with `subnet_id` (mock ids are `<name>-offline`)."""
    (assoc,) = [a.inputs for a in run.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")
                if a.inputs["subnetId"] == subnet_id]
    return [r.inputs for r in run.of_type(ROUTE) if r.inputs["routeTableId"] == assoc["routeTableId"]]


def igw_ids(run) -> set[str]:
    return {f"{g.name}-offline" for g in run.of_type("aws:ec2/internetGateway:InternetGateway")}


def test_eks_node_subnet_never_routes_to_an_internet_gateway_without_public_ips() -> None:
    run = run_preview(ROOT, "nlp-inference").run
    subnets = {f"{s.name}-offline": s for s in run.of_type(SUBNET)}
    for ng in run.of_type("aws:eks/nodeGroup:NodeGroup"):
        for sid in ng.inputs["subnetIds"]:
            routes = routes_of_subnet(run, sid)
            to_igw = [r for r in routes if r.get("gatewayId") in igw_ids(run)]
            assert not to_igw or subnets[sid].inputs.get("mapPublicIpOnLaunch") is True, ng.name
            # ... and the nodes still have a way out: the NAT gateway
            (default,) = [r for r in routes if r.get("destinationCidrBlock") == "0.0.0.0/0"]
            assert default["natGatewayId"] == f"{one(run, 'aws:ec2/natGateway:NatGateway').name}-offline"


def test_private_nodes_leave_through_a_nat_gateway_in_their_az_id(record) -> None:
    result = record(base_config(publicIps=False), stack="priv")
    run = result.run
    nat = one(run, "aws:ec2/natGateway:NatGateway").inputs
    egress = one(run, SUBNET, "-egress")
    assert nat["subnetId"] == f"{egress.name}-offline" and nat["connectivityType"] == "public"
    assert egress.inputs["availabilityZoneId"] == result.config.az_id  # a NAT gateway serves its own AZ
    (egress_default,) = routes_of_subnet(run, nat["subnetId"])
    assert egress_default["gatewayId"] in igw_ids(run)
    node_subnet = one(run, SUBNET, "priv-subnet")
    (node_default,) = routes_of_subnet(run, f"{node_subnet.name}-offline")
    assert node_default["natGatewayId"] == "priv-nat-offline"
    assert all(i.inputs["launchTemplate"] for i in run.of_type("aws:ec2/instance:Instance"))
    assert run.of_type("aws:ec2/eip:Eip")[0].name == "priv-nat-eip"  # the gateway's, no node EIPs


def test_interface_endpoints_for_ssm_ecr_sts_ec2_logs(record) -> None:
    run = record(base_config(publicIps=False, interfaceEndpoints=True), stack="vpce").run
    eps = [e.inputs for e in run.of_type("aws:ec2/vpcEndpoint:VpcEndpoint") if e.inputs["vpcEndpointType"] == "Interface"]
    assert sorted(e["serviceName"].rsplit("us-east-1.", 1)[1] for e in eps) == sorted(INTERFACE_SERVICES)
    node_subnet = f"{one(run, SUBNET, 'vpce-subnet').name}-offline"
    assert all(e["privateDnsEnabled"] is True and e["subnetIds"] == [node_subnet] for e in eps)
    (rule,) = [r.inputs for r in run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
               if r.name == "vpce-endpoints-in-443"]
    assert (rule["fromPort"], rule["toPort"], rule["referencedSecurityGroupId"]) == (443, 443, "vpce-sg-offline")
    assert all(e["securityGroupIds"] == ["vpce-endpoints-sg-offline"] for e in eps)


@pytest.mark.parametrize(
    ("cfg", "key", "hint"),
    [
        (eks_config(publicIps=True), "gpuforge:publicIps", "private subnet"),
        (base_config(autoscaling=True, budgetUsd=900000), "gpuforge:publicIps", "no public IP at launch"),
        (base_config(publicIps=False, natGateway=False), "gpuforge:natGateway", "no way out"),
        (base_config(publicIps=False, natGateway=False, interfaceEndpoints=True), "gpuforge:natGateway", "mirror"),
        (base_config(vpcId="vpc-0abc12345", subnetId="subnet-0abc12345", interfaceEndpoints=True),
         "gpuforge:interfaceEndpoints", "VPC it creates"),
    ],
)
def test_a_node_without_a_way_out_is_refused(cfg, key, hint) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_stack_config(cfg, "t")
    assert exc.value.key == key and hint in exc.value.render()


def test_eks_keeps_its_nat_gateway_and_endpoints_only_need_a_mirror() -> None:
    # EKS private-cluster guide: without outbound access images must come from a registry in the VPC
    with pytest.raises(ConfigError, match=r"nvcr\.io"):
        parse_stack_config(eks_config(natGateway=False, interfaceEndpoints=True), "t")
    cfg = parse_stack_config(base_config(publicIps=False, natGateway=False, interfaceEndpoints=True,
                                         mirror=["nvcr.io=registry.internal/nvcr"]), "t")
    assert not cfg.nat_gateway and cfg.interface_endpoints


def test_egress_is_priced() -> None:
    items = {i.item: i for i in platform_items(parse_stack_config(base_config(publicIps=False, interfaceEndpoints=True), "t"))}
    assert items["NAT gateway"].usd_per_hour == pytest.approx(0.045)
    assert items["interface endpoints (1 AZ)"].quantity == 8
    assert items["interface endpoints (1 AZ)"].usd_per_hour == pytest.approx(0.08)
    assert platform_items(parse_stack_config(base_config(), "t")) == ()  # public nodes: no NAT, no endpoints
