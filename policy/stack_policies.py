"""The stack policies: each judges the whole graph (policy/graph.py reads it).

no-public-ssh-union (the CIDRs that open tcp/22, joined per security group and per node),
efa-placement-one-az (a multi-node EFA cluster in one cluster placement group and one AZ),
storage-same-az (co-located storage in the nodes' AZ ID), gpu-quota (the team's quota less
headroom, from the policy config), budget-present (a budget that covers the on-demand cost).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from gpuforge.core.catalog import load_catalog
from gpuforge.core.config_rules import internet_wide
from gpuforge.core.cost import HOURS_30_DAYS
from gpuforge.core.costplan import load_platform_prices
from gpuforge.core.fleet import guardrails
from gpuforge.policy.graph import (
    ASG,
    EKS_CLUSTER,
    EKS_NODE_GROUP,
    INGRESS_RULE,
    LAUNCH_TEMPLATE,
    OPEN,
    SECURITY_GROUP,
    SG_RULE,
    by_type,
    covers_ssh,
    spot_max_price,
    stack_gpus,
    stack_region,
    tag_map,
    taggable,
)

MANDATORY = EnforcementLevel.MANDATORY


def _known(props: Mapping[str, Any], key: str) -> Any:
    """props[key], or None while preview cannot know it. The analyzer wraps inputs in a proxy
    that raises UnknownValueError on an unknown value, and an uncaught one in a stack policy
    skips the whole policy with an advisory note (pulumi_policy/policy.py AnalyzeStack)."""
    try:
        return props.get(key)
    except UnknownValueError:
        return None


def _ssh_cidrs(p: Mapping[str, Any], protocol_key: str, v4_key: str, v6_key: str) -> list[str]:
    """The CIDRs one rule (resource inputs or an inline block) opens tcp/22 to; none if unknown."""
    try:
        if not covers_ssh(p.get("fromPort"), p.get("toPort"), p.get(protocol_key)):
            return []
        out: list[str] = []
        for key in (v4_key, v6_key):
            value = p.get(key)
            out += [value] if isinstance(value, str) else [str(c) for c in value or []]
        return out
    except UnknownValueError:
        return []


def _group_of(rule: Any) -> tuple[str, str, str]:
    """(join key, name for messages, URN to report on) of the security group a rule resource adds to.

    A new group's id is unknown during a real preview, so the engine's property dependency of
    `securityGroupId` is the join; a literal id (an existing group) is the fallback; a rule with
    neither stands alone."""
    deps = [d for d in (rule.property_dependencies or {}).get("securityGroupId", []) if d.resource_type == SECURITY_GROUP]
    if deps:
        return deps[0].urn, deps[0].name, deps[0].urn
    group_id = _known(rule.props, "securityGroupId")
    if isinstance(group_id, str) and group_id:
        return f"id:{group_id}", group_id, rule.urn
    return rule.urn, rule.name, rule.urn


def _family(cidrs: list[str], version: int) -> list[str]:
    """The valid CIDRs of one IP version, deduplicated, in address order (as a reader lists them)."""
    nets: dict[str, Any] = {}
    for c in cidrs:
        try:
            net = ipaddress.ip_network(c, strict=False)
        except ValueError:
            continue  # not a CIDR (EC2 refuses it); nothing to add to the union
        if net.version == version:
            nets[c] = net
    return sorted(nets, key=lambda c: nets[c])


def _member_groups(r: Any) -> list[str]:
    """Join keys of the security groups a node resource (instance, launch template, network
    interface) attaches: property dependencies on group resources, and literal group ids."""
    keys: list[str] = []
    for prop in ("vpcSecurityGroupIds", "securityGroups", "networkInterfaces"):
        keys += [d.urn for d in (r.property_dependencies or {}).get(prop, []) if d.resource_type == SECURITY_GROUP]
    ids: list[Any] = []
    for prop in ("vpcSecurityGroupIds", "securityGroups"):
        ids += _known_list(r.props, prop)
    for nic in _known_list(r.props, "networkInterfaces"):
        if isinstance(nic, Mapping):
            ids += _known_list(nic, "securityGroups")
    keys += [f"id:{i}" for i in ids if isinstance(i, str)]
    return list(dict.fromkeys(keys))


def _known_list(props: Mapping[str, Any], key: str) -> list[Any]:
    """The known elements of a list input (unknown ones, or an unknown list, left out)."""
    value = _known(props, key)
    if not isinstance(value, Iterable) or isinstance(value, (str, Mapping)):
        return []
    out = []
    for i in range(len(value)):  # type: ignore[arg-type]
        try:
            out.append(value[i])  # type: ignore[index]
        except UnknownValueError:
            continue
    return out


def _no_public_ssh_union(args: StackValidationArgs, report: ReportViolation) -> None:
    """The union of every CIDR that opens tcp/22, per security group and per node.

    EC2 allows a packet if any rule of any group on the interface allows it, so 0.0.0.0/1 and
    128.0.0.0/1 in two rules of one group, or in two groups on one node, is 0.0.0.0/0. A group
    is reported when its own rules cover a whole address family; a node (instance, launch
    template, network interface) when only its groups together do. A single rule that is itself
    0.0.0.0/0 or ::/0 is no-public-ssh's finding and is not reported twice."""
    groups: dict[str, tuple[str, str, list[str]]] = {}

    def add(key: str, name: str, urn: str, cidrs: list[str]) -> None:
        if cidrs:
            groups.setdefault(key, (name, urn, []))[2].extend(cidrs)

    for r in args.resources:
        if r.resource_type == SECURITY_GROUP:
            for block in _known_list(r.props, "ingress"):
                add(r.urn, r.name, r.urn, _ssh_cidrs(block, "protocol", "cidrBlocks", "ipv6CidrBlocks"))
        elif r.resource_type == INGRESS_RULE:
            add(*_group_of(r), _ssh_cidrs(r.props, "ipProtocol", "cidrIpv4", "cidrIpv6"))
        elif r.resource_type == SG_RULE and _known(r.props, "type") == "ingress":
            add(*_group_of(r), _ssh_cidrs(r.props, "protocol", "cidrBlocks", "ipv6CidrBlocks"))
    fix = "list your own CIDRs in gpuforge:sshCidrs, or use SSM Session Manager"
    wide_alone: set[tuple[str, int]] = set()  # (group, IP version) that open a whole family by themselves
    for key, (name, urn, cidrs) in groups.items():
        for version in (4, 6):
            family = _family(cidrs, version)
            wide = internet_wide(family)
            if wide is None:
                continue
            wide_alone.add((key, version))
            if not OPEN & set(family):
                report(f"security group {name}: its rules together open SSH (tcp/22) to the whole internet ({wide}); {fix}", urn)
    for r in args.resources:
        if r.resource_type in (SECURITY_GROUP, INGRESS_RULE, SG_RULE):
            continue
        attached = [k for k in _member_groups(r) if k in groups]
        if len(attached) < 2:
            continue
        for version in (4, 6):
            if any((k, version) in wide_alone for k in attached):
                continue  # already reported on the group
            wide = internet_wide(_family([c for k in attached for c in groups[k][2]], version))
            if wide is not None:
                names = ", ".join(groups[k][0] for k in attached)
                report(
                    f"{r.name}: its security groups ({names}) together open SSH (tcp/22) to the whole internet ({wide}); {fix}",
                    r.urn,
                )


def _efa_placement_one_az(args: StackValidationArgs, report: ReportViolation) -> None:
    res = args.resources
    efa_lts = [
        r
        for r in by_type(res, LAUNCH_TEMPLATE)
        if any(n.get("interfaceType") in ("efa", "efa-only") for n in r.props.get("networkInterfaces") or [])
    ]
    if not efa_lts:
        return
    _, nodes = stack_gpus(res)
    if sum(nodes.values()) <= 1:
        return  # one node: EFA only matters between nodes
    cluster_pgs = {
        r.props.get("name") or r.name
        for r in by_type(res, "aws:ec2/placementGroup:PlacementGroup")
        if r.props.get("strategy") == "cluster"
    }
    for lt in efa_lts:
        group = (lt.props.get("placement") or {}).get("groupName")
        if not group or group not in cluster_pgs:
            report(
                f"{lt.name}: a multi-node EFA cluster must launch into a cluster placement group "
                f"(placement.groupName={group!r}, cluster groups: {sorted(cluster_pgs) or 'none'})",
                lt.urn,
            )
    # A cluster placement group cannot span AZs; the nodes' subnets must agree too: every EFA
    # interface, Auto Scaling group and EKS node group in one subnet (one subnet is one AZ).
    subnets = {n.get("subnetId") for lt in efa_lts for n in lt.props.get("networkInterfaces") or []}
    for r in by_type(res, ASG):
        subnets |= set(r.props.get("vpcZoneIdentifiers") or [])
    for r in by_type(res, EKS_NODE_GROUP):
        subnets |= set(r.props.get("subnetIds") or [])
    subnets.discard(None)
    if len(subnets) > 1:
        report(
            f"a multi-node EFA cluster must sit in one AZ; its nodes use {len(subnets)} subnets "
            f"({', '.join(sorted(map(str, subnets)))})",
            None,
        )


def _storage_same_az(args: StackValidationArgs, report: ReportViolation) -> None:
    res = args.resources
    subnet_azs = {r.props.get("availabilityZoneId") for r in by_type(res, "aws:ec2/subnet:Subnet")} - {None}
    for b in by_type(res, "aws:s3/directoryBucket:DirectoryBucket"):
        az = (b.props.get("location") or {}).get("name")
        if subnet_azs and az not in subnet_azs:
            report(
                f"{b.name}: directory bucket in {az}, nodes in {', '.join(sorted(subnet_azs))}; "
                "co-located storage must be in the nodes' AZ ID",
                b.urn,
            )
    vol_azs = {r.props.get("availabilityZone") for r in by_type(res, "aws:ebs/volume:Volume")}
    if len(vol_azs) > 1:
        report(f"EBS data volumes span several AZs ({', '.join(sorted(map(str, vol_azs)))}); put them in the nodes' AZ", None)


def _gpu_quota(args: StackValidationArgs, report: ReportViolation) -> None:
    config = args.get_config() or {}
    quotas: Mapping[str, int] = config.get("teamQuotas") or {}
    headroom = float(config.get("headroomFraction", guardrails()["quota"]["headroom_fraction"]))
    gpus, _ = stack_gpus(args.resources)
    if gpus == 0:
        return
    teams = sorted({t for r in args.resources if taggable(r.resource_type) if (t := tag_map(r.props).get("team"))})
    if not teams:
        report(f"no team tag on the stack's resources, so no GPU quota applies; the stack asks for {gpus} GPUs", None)
    for team in teams:
        if team not in quotas:
            report(f"team {team!r} has no GPU quota (stacks/teams/<team>.yaml gpu_quota); the stack asks for {gpus} GPUs", None)
            continue
        allowed = math.floor(quotas[team] * (1 - headroom))
        if gpus > allowed:
            report(
                f"stack needs {gpus} GPUs at its maximum size; team {team} may use {allowed} "
                f"({quotas[team]} quota less {headroom:.0%} headroom): lower nodeCount/autoscalingMax "
                "or raise the team's quota",
                None,
            )


def _budget_present(args: StackValidationArgs, report: ReportViolation) -> None:
    res = args.resources
    gpus, nodes = stack_gpus(res)
    if gpus == 0:
        return
    budgets = by_type(res, "aws:budgets/budget:Budget")
    if not budgets:
        report("no AWS Budget: set gpuforge:budgetUsd (monthly USD) in the stack file", None)
        return
    region = stack_region(res)
    catalog = load_catalog()
    platform = load_platform_prices()
    monthly = 0.0
    for type_name, count in nodes.items():
        it = catalog.instance_types.get(type_name)
        if it is None:  # not a GPU type: an EKS system node group's, priced in platform_prices.yaml
            price = platform.instance(type_name, region)
        else:
            offering = it.offering(region) if region else None
            price = offering.on_demand_usd_per_hour if offering else None
            cap = spot_max_price(res)
            if price is not None and cap is not None:
                price = min(price, cap)  # EC2 never charges a spot node more than its max price
        if price is None:
            report(f"no on-demand price for {type_name} in {region}: cannot prove the budget covers it", None)
            return
        monthly += price * count * HOURS_30_DAYS
    for _cluster in by_type(res, EKS_CLUSTER):
        price = platform.eks(region)
        if price is None:
            report(f"no EKS control-plane price for {region}: cannot prove the budget covers it", None)
            return
        monthly += price * HOURS_30_DAYS
    limit = max(float(b.props.get("limitAmount") or 0) for b in budgets)
    if monthly > limit:
        report(
            f"budget {limit:,.0f} USD/month is below the stack's on-demand compute (and EKS control plane) at its "
            f"maximum size ({monthly:,.0f} USD per 30 days); raise gpuforge:budgetUsd or shrink the stack",
            None,
        )


STACK_POLICIES = [
    StackValidationPolicy(
        "efa-placement-one-az", "Multi-node EFA in one cluster placement group, one AZ", _efa_placement_one_az, MANDATORY
    ),
    StackValidationPolicy(
        "no-public-ssh-union",
        "SSH is not open to the internet through several rules of one security group together",
        _no_public_ssh_union,
        MANDATORY,
    ),
    StackValidationPolicy("storage-same-az", "Co-located storage in the nodes' AZ ID", _storage_same_az, MANDATORY),
    StackValidationPolicy(
        "gpu-quota",
        "GPUs within the team's quota, less headroom",
        _gpu_quota,
        MANDATORY,
        config_schema=PolicyConfigSchema(properties={"teamQuotas": {"type": "object"}, "headroomFraction": {"type": "number"}}),
    ),
    StackValidationPolicy("budget-present", "A budget that covers the stack's on-demand cost", _budget_present, MANDATORY),
]
