"""What the guardrail policies read from the resource graph, shared by the resource and the
stack policies: the type tokens, the cost-allocation tags, whether a rule opens tcp/22, and the
stack's GPUs, region and spot cap.

The inputs are read as the engine sends them (camelCase), under `pulumi preview --policy-pack
policy` and over the graph `gpuforge preview` records offline (cli/policycheck.py) alike.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from gpuforge.core.catalog import load_catalog

REQUIRED_TAGS = ("project", "team", "owner", "profile", "stack")
OPEN = {"0.0.0.0/0", "::/0"}
SSH_PORT = 22

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
ASG = "aws:autoscaling/group:Group"
EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"


@cache
def taggable(type_token: str) -> bool:
    """Whether the pulumi-aws class for `type_token` takes a `tags` input (introspected, not listed)."""
    pkg, _, rest = type_token.partition(":")
    module, _, cls_name = rest.partition(":")
    if pkg != "aws" or not cls_name:
        return False
    mod_name = module.split("/")[0]
    try:
        mod = importlib.import_module("pulumi_aws" if mod_name == "index" else f"pulumi_aws.{mod_name}")
        cls = getattr(mod, cls_name)
    except (ImportError, AttributeError):
        return False
    return "tags" in inspect.signature(cls._internal_init).parameters


def tag_map(props: Mapping[str, Any]) -> dict[str, str]:
    tags = props.get("tags")
    if isinstance(tags, list):  # Auto Scaling groups: [{key, value, propagateAtLaunch}]
        return {str(t.get("key")): str(t.get("value")) for t in tags if isinstance(t, dict)}
    return dict(tags or {})


def by_type(resources: Iterable[Any], token: str) -> list[Any]:
    return [r for r in resources if r.resource_type == token]


def covers_ssh(from_port: Any, to_port: Any, protocol: Any) -> bool:
    if str(protocol) in ("-1", "all"):
        return True
    if str(protocol).lower() not in ("tcp", "6"):
        return False
    try:
        return int(from_port) <= SSH_PORT <= int(to_port)
    except (TypeError, ValueError):
        return False


def stack_gpus(resources: list[Any]) -> tuple[int, dict[str, int]]:
    """(total GPUs at the stack's maximum size, instance type -> node count) from the graph."""
    catalog = load_catalog()
    lts = {r.name: r.props for r in by_type(resources, LAUNCH_TEMPLATE)}
    only_lt_type = next((p.get("instanceType") for p in lts.values() if p.get("instanceType")), None)
    nodes: dict[str, int] = {}

    def add(type_name: str | None, count: int) -> None:
        if type_name and count:
            nodes[type_name] = nodes.get(type_name, 0) + count

    for r in by_type(resources, INSTANCE):
        add(r.props.get("instanceType") or only_lt_type, 1)
    for r in by_type(resources, ASG):
        mixed = r.props.get("mixedInstancesPolicy") or {}
        overrides = ((mixed.get("launchTemplate") or {}).get("overrides")) or []
        # the largest override is the worst case for a mixed group
        types = [o.get("instanceType") for o in overrides if o.get("instanceType")] or [only_lt_type]
        worst = max(types, key=lambda t: catalog.instance_types[t].gpu_count if t in catalog.instance_types else 0)
        add(worst, int(r.props.get("maxSize") or 0))
    for r in by_type(resources, EKS_NODE_GROUP):
        types = r.props.get("instanceTypes") or [only_lt_type]
        add(types[0], int((r.props.get("scalingConfig") or {}).get("maxSize") or 0))
    total = sum(catalog.instance_types[t].gpu_count * n for t, n in nodes.items() if t in catalog.instance_types)
    return total, nodes


def stack_region(resources: list[Any]) -> str | None:
    """The region whose AZ IDs include the stack's (from the subnet or the directory bucket)."""
    az_ids = {r.props.get("availabilityZoneId") for r in resources if r.props.get("availabilityZoneId")}
    az_ids |= {(r.props.get("location") or {}).get("name") for r in by_type(resources, "aws:s3/directoryBucket:DirectoryBucket")}
    for region in load_catalog().regions.values():
        if az_ids & set(region.az_ids):
            return region.name
    return None


def spot_max_price(resources: list[Any]) -> float | None:
    """The spot max price the graph sets (launch template or mixed-instances group), if any.
    Spot without one is capped at the on-demand price, so on-demand stays the worst case."""
    prices = []
    for r in by_type(resources, LAUNCH_TEMPLATE):
        market = r.props.get("instanceMarketOptions") or {}
        if market.get("marketType") == "spot":
            prices.append((market.get("spotOptions") or {}).get("maxPrice"))
    for r in by_type(resources, ASG):
        dist = (r.props.get("mixedInstancesPolicy") or {}).get("instancesDistribution") or {}
        if dist.get("onDemandPercentageAboveBaseCapacity") == 0:
            prices.append(dist.get("spotMaxPrice"))
    try:
        return max(float(str(p)) for p in prices) if prices and all(prices) else None
    except (TypeError, ValueError):
        return None
