"""Issue 21 items 2, 3 and 5: a graph that reaches Ready, fleets that stay pinned.

The real program under the SDK's mock engine as `pulumi up` runs it (tests/aws/conftest.py
`pulumi_up`); each test reads the dependencies the engine would order the creates by."""

from __future__ import annotations

import pytest

from tests.aws.conftest import OPERATOR_CIDR, eks_config, pulumi_up
from tests.components.stackcfg import base_config

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
DAEMONSET = "kubernetes:apps/v1:DaemonSet"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ADDON = "aws:eks/addon:Addon"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
PINNED_AMI = "ami-0abc1234567890def"


@pytest.fixture(scope="module")
def eks(tmp_path_factory):
    run, error = pulumi_up(tmp_path_factory.mktemp("eks"), eks_config(azId="use1-az5", eksPublicAccessCidrs=[OPERATOR_CIDR]),
                           stack="inf", az_id="use1-az5")
    assert error is None, error
    return run


def urn(run, token: str, name_part: str) -> str:
    (found,) = [r for r in run.of_type(token) if name_part in r.name]
    return found.urn


def deps(run, token: str, name_part: str) -> set[str]:
    (found,) = [r for r in run.of_type(token) if name_part in r.name]
    return set(found.dependencies)


def test_inference_deployment_waits_for_its_association_node_group_addons_account_and_device_plugin(eks) -> None:
    waits = deps(eks, DEPLOYMENT, "inference")
    assert urn(eks, ASSOCIATION, "storage-inference") in waits  # EKS injects credentials at admission
    assert urn(eks, NODE_GROUP, "-gpu") in waits  # its pods run on the GPU nodes
    assert urn(eks, ADDON, "pod-identity-agent") in waits  # serves the credentials on the node
    assert urn(eks, SERVICE_ACCOUNT, "inference-storage") in waits
    assert urn(eks, DAEMONSET, "nvidia-device-plugin") in waits  # advertises nvidia.com/gpu


def test_every_storage_service_account_waits_for_its_association(eks) -> None:
    for sa in eks.of_type(SERVICE_ACCOUNT):
        ns = sa.inputs["metadata"]["namespace"]
        assert urn(eks, ASSOCIATION, f"storage-{ns}") in sa.dependencies, sa.name


def test_every_pod_creating_object_waits_for_the_nodes_it_runs_on_and_the_addons(eks) -> None:
    gpu, system = urn(eks, NODE_GROUP, "-gpu"), urn(eks, NODE_GROUP, "-system")
    addons = {a.urn for a in eks.of_type(ADDON)}
    objects = [r for r in eks.resources if r.type in (DEPLOYMENT, DAEMONSET) or r.type.endswith((":Job", ":StatefulSet"))]
    assert len(objects) >= 3
    for obj in objects:
        pod = obj.inputs["spec"]["template"]["spec"]
        node_group = gpu if pod.get("nodeSelector", {}).get("gpuforge.io/gpu") == "true" else system
        assert node_group in obj.dependencies, obj.name
        assert addons <= set(obj.dependencies), obj.name


def test_readiness_waits_are_sized_and_stated(eks) -> None:
    (deployment,) = eks.of_type(DEPLOYMENT)
    assert deployment.custom_timeouts[:2] == ("15m", "15m")  # 10 GiB at 25 MiB/s + 180 s, x1.5 (defaults.yaml)
    for ds in eks.of_type(DAEMONSET):
        assert ds.custom_timeouts[:2] == ("10m", "10m"), ds.name


def test_cluster_and_node_groups_wait_for_their_role_policy_attachments(eks) -> None:
    attachments = eks.of_type(ATTACHMENT)
    cluster_attachments = {a.urn for a in attachments if "eks-cluster" in a.name}
    node_attachments = {a.urn for a in attachments if "eks-node" in a.name}
    assert cluster_attachments and node_attachments
    (cluster,) = eks.of_type("aws:eks/cluster:Cluster")
    assert cluster_attachments <= set(cluster.dependencies)
    for group in eks.of_type(NODE_GROUP):
        assert node_attachments <= set(group.dependencies), group.name


def test_nat_eip_waits_for_the_internet_gateway(eks) -> None:
    assert urn(eks, "aws:ec2/internetGateway:InternetGateway", "igw") in deps(eks, "aws:ec2/eip:Eip", "nat-eip")


def test_multi_card_nodes_eips_wait_for_the_internet_gateway(tmp_path) -> None:
    run, error = pulumi_up(tmp_path, base_config(amiId=PINNED_AMI, nodeCount=2))  # p4de: 4 network cards, public
    assert error is None, error
    igw = urn(run, "aws:ec2/internetGateway:InternetGateway", "igw")
    eips = [e for e in run.of_type("aws:ec2/eip:Eip") if "node" in e.name]
    assert len(eips) == 2 and all(igw in e.dependencies for e in eips)


def test_private_path_names_the_transit_gateway_route_table(tmp_path) -> None:
    private = {"eksEndpointAccess": "private", "eksPublicAccessCidrs": [], "eksPrivateAccessCidrs": ["10.8.0.0/16"],
               "eksTransitGatewayId": "tgw-0123456789abcdef0", "eksTransitGatewayRouteTableId": "tgw-rtb-0123456789abcdef0"}
    run, error = pulumi_up(tmp_path, eks_config(azId="use1-az5", **private), az_id="use1-az5")
    assert error is None, error
    (attach,) = run.of_type("aws:ec2transitgateway/vpcAttachment:VpcAttachment")
    assert attach.inputs["transitGatewayDefaultRouteTableAssociation"] is False
    assert attach.inputs["transitGatewayDefaultRouteTablePropagation"] is False
    for token in ("aws:ec2transitgateway/routeTableAssociation:RouteTableAssociation",
                  "aws:ec2transitgateway/routeTablePropagation:RouteTablePropagation"):
        (res,) = run.of_type(token)
        assert res.inputs["transitGatewayRouteTableId"] == "tgw-rtb-0123456789abcdef0"
        assert attach.urn in res.dependencies


# --- item 3: Auto Scaling groups launch the pinned template version ------------------------------------------

ASG = "aws:autoscaling/group:Group"
AUTOSCALED = {"autoscaling": True, "budgetUsd": 700000, "publicIps": False, "amiId": PINNED_AMI}


@pytest.mark.parametrize("purchase", ["on-demand", "spot"])
def test_autoscaling_group_keeps_its_pinned_template_version_after_template_changes(tmp_path, purchase) -> None:
    run, error = pulumi_up(tmp_path, base_config(**AUTOSCALED, purchaseOption=purchase), latest=3)
    assert error is None, error
    (asg,) = run.of_type(ASG)
    spec = (asg.inputs["mixedInstancesPolicy"]["launchTemplate"]["launchTemplateSpecification"] if purchase == "spot"
            else asg.inputs["launchTemplate"])
    assert spec["version"] == "1"  # not $Latest (3): a scale-out adds nodes like the running ones
    assert run.outputs["nodeTemplateVersions"] == {"booted": 1, "latest": 3}  # the stack names its pin


def test_raising_the_pin_moves_the_autoscaling_group(tmp_path) -> None:
    run, error = pulumi_up(tmp_path, base_config(**AUTOSCALED, nodeTemplateVersion=3), latest=3)
    assert error is None, error
    (asg,) = run.of_type(ASG)
    assert asg.inputs["launchTemplate"]["version"] == "3"
