"""gpuforge guardrails as CrossGuard policies (pulumi-policy).

Each policy reads the resource inputs as the engine sends them (camelCase), so the same
callbacks run under `pulumi preview --policy-pack policy` and over the graph that
`gpuforge preview` records offline (cli/policycheck.py). The GPU quota per team comes from
the team data files (stacks/teams/*.yaml) through the policy config; prices come from the catalog.
"""

from __future__ import annotations

import importlib
import inspect
import ipaddress
import math
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from gpuforge.core.catalog import load_catalog
from gpuforge.core.config_rules import internet_wide
from gpuforge.core.cost import HOURS_30_DAYS
from gpuforge.core.costplan import load_platform_prices
from gpuforge.core.fleet import guardrails

REQUIRED_TAGS = ("project", "team", "owner", "profile", "stack")
OPEN = {"0.0.0.0/0", "::/0"}
SSH_PORT = 22
TEAMS_DIR = Path(__file__).resolve().parents[1] / "stacks" / "teams"

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
ASG = "aws:autoscaling/group:Group"
EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"


# --- helpers -------------------------------------------------------------------------------


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


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _by_type(resources: Iterable[Any], token: str) -> list[Any]:
    return [r for r in resources if r.resource_type == token]


def stack_gpus(resources: list[Any]) -> tuple[int, dict[str, int]]:
    """(total GPUs at the stack's maximum size, instance type -> node count) from the graph."""
    catalog = load_catalog()
    lts = {r.name: r.props for r in _by_type(resources, LAUNCH_TEMPLATE)}
    only_lt_type = next((p.get("instanceType") for p in lts.values() if p.get("instanceType")), None)
    nodes: dict[str, int] = {}

    def add(type_name: str | None, count: int) -> None:
        if type_name and count:
            nodes[type_name] = nodes.get(type_name, 0) + count

    for r in _by_type(resources, INSTANCE):
        add(r.props.get("instanceType") or only_lt_type, 1)
    for r in _by_type(resources, ASG):
        mixed = r.props.get("mixedInstancesPolicy") or {}
        overrides = ((mixed.get("launchTemplate") or {}).get("overrides")) or []
        # the largest override is the worst case for a mixed group
        types = [o.get("instanceType") for o in overrides if o.get("instanceType")] or [only_lt_type]
        worst = max(types, key=lambda t: catalog.instance_types[t].gpu_count if t in catalog.instance_types else 0)
        add(worst, int(r.props.get("maxSize") or 0))
    for r in _by_type(resources, EKS_NODE_GROUP):
        types = r.props.get("instanceTypes") or [only_lt_type]
        add(types[0], int((r.props.get("scalingConfig") or {}).get("maxSize") or 0))
    total = sum(catalog.instance_types[t].gpu_count * n for t, n in nodes.items() if t in catalog.instance_types)
    return total, nodes


def stack_region(resources: list[Any]) -> str | None:
    """The region whose AZ IDs include the stack's (from the subnet or the directory bucket)."""
    az_ids = {r.props.get("availabilityZoneId") for r in resources if r.props.get("availabilityZoneId")}
    az_ids |= {(r.props.get("location") or {}).get("name") for r in _by_type(resources, "aws:s3/directoryBucket:DirectoryBucket")}
    for region in load_catalog().regions.values():
        if az_ids & set(region.az_ids):
            return region.name
    return None


def spot_max_price(resources: list[Any]) -> float | None:
    """The spot max price the graph sets (launch template or mixed-instances group), if any.
    Spot without one is capped at the on-demand price, so on-demand stays the worst case."""
    prices = []
    for r in _by_type(resources, LAUNCH_TEMPLATE):
        market = r.props.get("instanceMarketOptions") or {}
        if market.get("marketType") == "spot":
            prices.append((market.get("spotOptions") or {}).get("maxPrice"))
    for r in _by_type(resources, ASG):
        dist = (r.props.get("mixedInstancesPolicy") or {}).get("instancesDistribution") or {}
        if dist.get("onDemandPercentageAboveBaseCapacity") == 0:
            prices.append(dist.get("spotMaxPrice"))
    try:
        return max(float(str(p)) for p in prices) if prices and all(prices) else None
    except (TypeError, ValueError):
        return None


def teams_config(directory: Path = TEAMS_DIR) -> dict[str, Any]:
    """Policy config from the team data files: {team: gpu_quota}, and the headroom to keep."""
    from gpuforge.core.teams import load_teams

    quotas = {name: team.gpu_quota for name, team in load_teams(directory).items()}
    return {"teamQuotas": quotas, "headroomFraction": guardrails()["quota"]["headroom_fraction"]}


# --- resource policies ----------------------------------------------------------------------


def _no_public_ssh(args: ResourceValidationArgs, report: ReportViolation) -> None:
    p = args.props
    cidrs: list[str] = []
    if args.resource_type == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule":
        cidrs = [c for c in (p.get("cidrIpv4"), p.get("cidrIpv6")) if c]
        rules = [{"fromPort": p.get("fromPort"), "toPort": p.get("toPort"), "protocol": p.get("ipProtocol")}]
    elif args.resource_type == "aws:ec2/securityGroup:SecurityGroup":
        rules = p.get("ingress") or []
        for rule in rules:
            if _covers_ssh(rule.get("fromPort"), rule.get("toPort"), rule.get("protocol")):
                cidrs += list(rule.get("cidrBlocks") or []) + list(rule.get("ipv6CidrBlocks") or [])
        rules = [{"fromPort": SSH_PORT, "toPort": SSH_PORT, "protocol": "tcp"}] if cidrs else []
    elif args.resource_type == "aws:ec2/securityGroupRule:SecurityGroupRule" and p.get("type") == "ingress":
        cidrs = list(p.get("cidrBlocks") or []) + list(p.get("ipv6CidrBlocks") or [])
        rules = [{"fromPort": p.get("fromPort"), "toPort": p.get("toPort"), "protocol": p.get("protocol")}]
    else:
        return
    if any(_covers_ssh(r["fromPort"], r["toPort"], r["protocol"]) for r in rules) and OPEN & set(cidrs):
        report(
            f"{args.name}: SSH (tcp/22) is open to {', '.join(sorted(OPEN & set(cidrs)))}; "
            "list your own CIDRs in gpuforge:sshCidrs, or use SSM Session Manager",
            None,
        )


def _covers_ssh(from_port: Any, to_port: Any, protocol: Any) -> bool:
    if str(protocol) in ("-1", "all"):
        return True
    if str(protocol).lower() not in ("tcp", "6"):
        return False
    try:
        return int(from_port) <= SSH_PORT <= int(to_port)
    except (TypeError, ValueError):
        return False


def _encryption_on(args: ResourceValidationArgs, report: ReportViolation) -> None:
    p = args.props
    if args.resource_type == LAUNCH_TEMPLATE:
        for bdm in p.get("blockDeviceMappings") or []:
            ebs = bdm.get("ebs")
            if ebs is not None and not _true(ebs.get("encrypted")):
                report(f"{args.name}: volume {bdm.get('deviceName')} is not encrypted; set ebs.encrypted=true", None)
    elif args.resource_type == "aws:ebs/volume:Volume" and not _true(p.get("encrypted")):
        report(f"{args.name}: EBS volume is not encrypted; set encrypted=True", None)
    elif args.resource_type == INSTANCE and p.get("rootBlockDevice") and not _true(p["rootBlockDevice"].get("encrypted")):
        report(f"{args.name}: root volume is not encrypted", None)
    elif args.resource_type == "aws:sns/topic:Topic" and not p.get("kmsMasterKeyId"):
        report(f"{args.name}: SNS topic is not encrypted; set kms_master_key_id (a customer-managed key)", None)


def _imdsv2(args: ResourceValidationArgs, report: ReportViolation) -> None:
    p = args.props
    if args.resource_type == LAUNCH_TEMPLATE or (args.resource_type == INSTANCE and not p.get("launchTemplate")):
        if (p.get("metadataOptions") or {}).get("httpTokens") != "required":
            report(f"{args.name}: IMDSv1 is allowed; set metadata_options.http_tokens='required' (IMDSv2 only)", None)


def _tags_present(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not taggable(args.resource_type):
        return
    tags = tag_map(args.props)
    missing = [k for k in REQUIRED_TAGS if not tags.get(k)]
    if missing:
        report(
            f"{args.name} ({args.resource_type}): missing cost-allocation tags {', '.join(missing)}; "
            "set gpuforge:team and gpuforge:owner in the stack file",
            None,
        )


# --- stack policies -------------------------------------------------------------------------


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
        if not _covers_ssh(p.get("fromPort"), p.get("toPort"), p.get(protocol_key)):
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
        for r in _by_type(res, LAUNCH_TEMPLATE)
        if any(n.get("interfaceType") in ("efa", "efa-only") for n in r.props.get("networkInterfaces") or [])
    ]
    if not efa_lts:
        return
    _, nodes = stack_gpus(res)
    if sum(nodes.values()) <= 1:
        return  # one node: EFA only matters between nodes
    cluster_pgs = {
        r.props.get("name") or r.name
        for r in _by_type(res, "aws:ec2/placementGroup:PlacementGroup")
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
    for r in _by_type(res, ASG):
        subnets |= set(r.props.get("vpcZoneIdentifiers") or [])
    for r in _by_type(res, EKS_NODE_GROUP):
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
    subnet_azs = {r.props.get("availabilityZoneId") for r in _by_type(res, "aws:ec2/subnet:Subnet")} - {None}
    for b in _by_type(res, "aws:s3/directoryBucket:DirectoryBucket"):
        az = (b.props.get("location") or {}).get("name")
        if subnet_azs and az not in subnet_azs:
            report(
                f"{b.name}: directory bucket in {az}, nodes in {', '.join(sorted(subnet_azs))}; "
                "co-located storage must be in the nodes' AZ ID",
                b.urn,
            )
    vol_azs = {r.props.get("availabilityZone") for r in _by_type(res, "aws:ebs/volume:Volume")}
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
    budgets = _by_type(res, "aws:budgets/budget:Budget")
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
    for _cluster in _by_type(res, EKS_CLUSTER):
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


Validate = Callable[[Any, ReportViolation], None]
MANDATORY = EnforcementLevel.MANDATORY

RESOURCE_POLICIES = [
    ResourceValidationPolicy("no-public-ssh", "SSH is never open to the internet", _no_public_ssh, MANDATORY),
    ResourceValidationPolicy("encryption-on", "EBS volumes and SNS topics are encrypted", _encryption_on, MANDATORY),
    ResourceValidationPolicy("imdsv2-only", "Nodes require IMDSv2 tokens", _imdsv2, MANDATORY),
    ResourceValidationPolicy("cost-tags", f"Taggable resources carry {', '.join(REQUIRED_TAGS)}", _tags_present, MANDATORY),
]
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
POLICIES = [*RESOURCE_POLICIES, *STACK_POLICIES]
