"""The typed stack configuration, validated before any resource is declared.

`parse_stack_config` takes config as the Pulumi engine hands it over (a flat map of
`namespace:key` to string values) and returns a frozen `StackConfig`, or raises `ConfigError`
naming the key, the bad value and the fix. The same function runs inside `__main__.py` (real
`pulumi up`) and in `gpuforge preview` before the program starts, so both refuse the same input.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuforge.common.errors import ConfigError
from gpuforge.core.addressing import (
    AWS_RESERVED_PER_SUBNET,
    EKS_CONTROL_PLANE_ADDRESSES,
    INTERFACE_SERVICES,
    addresses_per_node,
    interface_layout,
    usable_addresses,
)
from gpuforge.core.bucketnames import ACCOUNT_REGIONAL_UNSUPPORTED, checkpoint_bucket_name, directory_bucket_name
from gpuforge.core.catalog import Catalog, InstanceType, did_you_mean, load_catalog
from gpuforge.core.fleet import FleetConfig, check_gpu_quota, parse_fleet
from gpuforge.core.kubernetes.settings import KubernetesSettings, kubernetes_settings
from gpuforge.core.mirror import Mirror, MirrorError, parse_mirror
from gpuforge.core.profiles import Profile, UnknownProfileError, load_profile, profile_names
from gpuforge.core.scheduler import SlurmSettings, slurm_settings

PROJECT = "gpuforge"
MAX_NODES = 256  # one cluster placement group; larger fleets are split into several stacks


# Keys whose Pulumi.yaml default is 0 and means "not set" (the profile's value, or no budget /
# quota). The Pulumi CLI treats a declared key with no `default` as required (pulumi/pulumi
# pkg/workspace/config.go mergeConfig), so optional keys need a default the program reads as
# unset: "" for strings, 0 for these integers (none of them accepts 0 as a real value).
ZERO_MEANS_UNSET = frozenset({"nodeCount", "rootVolumeGib", "budgetUsd", "gpuQuota"})


class RawStackConfig(BaseModel):
    """The `gpuforge:*` keys, by their Pulumi names (camelCase). Mirrors Pulumi.yaml `config:`."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    @model_validator(mode="before")
    @classmethod
    def _unset_defaults(cls, data: Any) -> Any:
        """Pulumi.yaml's "not set" defaults ("" and the 0s above) become None, as if absent."""
        if not isinstance(data, dict):
            return data
        out = {}
        for key, value in data.items():
            field = cls.model_fields.get(key)
            optional = field is not None and field.default is None
            if optional and value == "":
                continue
            if key in ZERO_MEANS_UNSET and not isinstance(value, bool) and value in (0, "0"):
                continue
            out[key] = value
        return out

    profile: str
    azId: str
    nodeCount: int | None = None
    instanceType: str | None = None
    sshCidrs: tuple[str, ...] = ()
    allowPublicSsh: bool = False
    sshUser: str = "ubuntu"
    keyName: str | None = None
    vpcId: str | None = None
    subnetId: str | None = None
    vpcCidr: str = "10.42.0.0/16"
    subnetCidr: str = "10.42.0.0/20"
    amiId: str | None = None
    nodeTemplateVersion: int = Field(default=1, ge=1)
    os: Literal["ubuntu-22.04", "ubuntu-24.04"] = "ubuntu-22.04"
    driverPreinstalled: bool = False
    rootVolumeGib: int | None = Field(default=None, ge=30, le=16384)
    publicIps: bool = True
    natGateway: bool = True
    interfaceEndpoints: bool = False
    enaExpress: bool = False
    bucketBase: str | None = None
    team: str | None = None
    owner: str | None = None
    costCenter: str | None = None
    ngcApiKeyParameter: str | None = None
    # Purchase, autoscaling, budget, idle and quota keys (core/fleet.py resolves these).
    purchaseOption: Literal["on-demand", "spot", "capacity-reservation", "capacity-block"] = "on-demand"
    spotMaxPrice: str | None = None
    spotInterruptionBehavior: Literal["terminate", "stop", "hibernate"] = "terminate"
    capacityReservationId: str | None = None
    autoscaling: bool = False
    autoscalingMin: int | None = Field(default=None, ge=0, le=256)
    autoscalingMax: int | None = Field(default=None, ge=1, le=256)
    autoscalingQueueThreshold: int | None = Field(default=None, ge=0)
    autoscalingCooldownS: int | None = Field(default=None, ge=0, le=86400)
    queueMetricNamespace: str | None = None
    queueMetricName: str | None = None
    budgetUsd: int | None = Field(default=None, ge=1)
    budgetEmails: tuple[str, ...] = ()
    gpuQuota: int | None = Field(default=None, ge=0)
    idleUtilPercent: int | None = Field(default=None, ge=1, le=100)
    idleMinutes: int | None = Field(default=None, ge=5, le=1440)
    # Kubernetes layer (core/kubernetes/settings.py validates and resolves these).
    kubernetes: Literal["none", "eks", "existing"] = "none"
    kubeconfig: str | None = None  # read only as a Pulumi secret (components/kubernetes/component.py)
    kubernetesVersion: str = "1.33"
    eksPublicAccessCidrs: tuple[str, ...] = ()
    eksEndpointAccess: Literal["public", "private"] = "public"
    eksPrivateAccessCidrs: tuple[str, ...] = ()
    eksTransitGatewayId: str | None = None
    kubernetesTeams: tuple[str, ...] = ("inference", "research")
    gpuHeadroomPercent: int = Field(default=20, ge=15, le=50)
    inferenceImage: str | None = None
    inferenceReplicas: int = Field(default=2, ge=1, le=256)
    inferencePort: int = Field(default=8000, ge=1, le=65535)
    inferenceMaxBatchSize: int = Field(default=32, ge=1, le=4096)
    inferenceMaxBatchDelayMs: int = Field(default=10, ge=0, le=10000)
    # Package mirror for the node bootstrap: NAME=LOCATION entries (core/mirror.py).
    mirror: tuple[str, ...] = ()
    # Scheduler layer (core/scheduler.py validates and resolves it).
    scheduler: Literal["none", "slurm"] = "none"


CONFIG_KEYS = tuple(RawStackConfig.model_fields)
_LIST_KEYS = {"sshCidrs", "budgetEmails", "eksPublicAccessCidrs", "eksPrivateAccessCidrs", "kubernetesTeams", "mirror"}


class StackConfig(BaseModel):
    """Validated, resolved stack configuration: what the components are built from."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    stack: str
    region: str
    profile: Profile
    instance: InstanceType
    az_id: str
    node_count: int
    ssh_cidrs: tuple[str, ...]
    allow_public_ssh: bool
    ssh_user: str
    key_name: str | None
    vpc_id: str | None
    subnet_id: str | None
    vpc_cidr: str
    subnet_cidr: str
    ami_id: str | None
    node_template_version: int
    os: str
    driver_preinstalled: bool
    root_volume_gib: int
    public_ips: bool
    nat_gateway: bool = False  # private nodes' way out (components/network.py); only when they are private
    interface_endpoints: bool = False
    ena_express: bool
    bucket_base: str
    team: str | None
    owner: str | None
    cost_center: str | None
    ngc_api_key_parameter: str | None
    fleet: FleetConfig = FleetConfig()
    kubernetes: KubernetesSettings | None = None
    mirror: Mirror = Mirror()
    slurm: SlurmSettings | None = None

    @property
    def tags(self) -> dict[str, str]:
        """Cost-allocation tags for every taggable resource."""
        tags = {"project": PROJECT, "stack": self.stack, "profile": self.profile.name}
        for key, value in (("team", self.team), ("owner", self.owner), ("cost-center", self.cost_center)):
            if value:
                tags[key] = value
        return tags


def _decode(key: str, value: Any) -> Any:
    """Config values arrive as strings (as the CLI passes them); arrays arrive as JSON text."""
    if key in _LIST_KEYS and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ConfigError(f"{PROJECT}:{key}", f"{value!r} is not a list", "write it as a YAML list") from None
    return value


# Namespaces something reads: this program, the providers it uses, and the engine itself. A key
# in any other namespace reaches nothing; the Pulumi CLI passes it on silently, so a typo such as
# `gpuforg:nodeCount` would be ignored (issue 13 item 6).
KNOWN_NAMESPACES = (PROJECT, "aws", "kubernetes", "pulumi")


def _check_namespace(full_key: str, ns: str, key: str) -> None:
    if ns in KNOWN_NAMESPACES:
        return
    close = difflib.get_close_matches(ns, KNOWN_NAMESPACES, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}:{key}?)" if close else ""
    raise ConfigError(
        full_key,
        f"unknown namespace {ns!r}: nothing reads it (gpuforge reads {PROJECT}:, its providers aws: and kubernetes:){hint}",
        f"write it as {close[0]}:{key}" if close else "remove the key, or fix its namespace",
    )


def parse_stack_config(raw: dict[str, Any], stack: str, catalog: Catalog | None = None) -> StackConfig:
    """Validate `raw` (`ns:key` -> value) for `stack`; raise ConfigError on the first problem."""
    catalog = catalog or load_catalog()
    ours: dict[str, Any] = {}
    for full_key, value in raw.items():
        ns, _, key = full_key.partition(":")
        if ns != PROJECT:
            _check_namespace(full_key, ns, key)
            continue
        if key not in CONFIG_KEYS:
            raise ConfigError(
                full_key,
                f"unknown key{did_you_mean(key, CONFIG_KEYS)}",
                f"remove it; known keys are listed in Pulumi.yaml ({', '.join(CONFIG_KEYS[:6])}, ...)",
            )
        ours[key] = _decode(key, value)

    region = raw.get("aws:region")
    if not region:
        raise ConfigError("aws:region", "not set", "add `aws:region: us-east-1` (or another region) to the stack file")
    region = str(region)
    if region not in catalog.regions:
        raise ConfigError(
            "aws:region",
            f"{region!r} is not a region the catalog covers{did_you_mean(region, catalog.regions)}",
            f"use one of {', '.join(catalog.regions)}",
        )

    if "profile" not in ours:
        raise ConfigError(f"{PROJECT}:profile", "not set", f"set it to one of {', '.join(profile_names())}")
    if "azId" not in ours:
        raise ConfigError(
            f"{PROJECT}:azId", "not set", f"set it to an AZ ID of {region}: {', '.join(catalog.region(region).az_ids)}"
        )
    try:
        parsed = RawStackConfig.model_validate(ours)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = f"{PROJECT}:{err['loc'][0]}" if err["loc"] else PROJECT
        bad = err.get("input")
        raise ConfigError(key, f"{err['msg']} (got {bad!r})", "see Pulumi.yaml for the key's type") from None

    try:
        profile = load_profile(parsed.profile)
    except UnknownProfileError as exc:
        raise ConfigError(
            f"{PROJECT}:profile",
            f"unknown profile {parsed.profile!r}{exc.suggestion}",
            f"use one of {', '.join(exc.known)}",
        ) from None

    type_name = parsed.instanceType or profile.shape.instance_type
    try:
        instance = catalog.instance(type_name)
    except KeyError as exc:
        raise ConfigError(f"{PROJECT}:instanceType", str(exc.args[0]), "pick a type from `gpuforge catalog list`") from None

    reg = catalog.region(region)
    if parsed.azId not in reg.az_ids:
        raise ConfigError(
            f"{PROJECT}:azId",
            f"{parsed.azId!r} is not an AZ ID of {region}{did_you_mean(parsed.azId, reg.az_ids)}",
            f"use one of {', '.join(reg.az_ids)} (AZ IDs, not AZ names like us-east-1a)",
        )
    offering = instance.offering(region)
    if offering is None:
        offered = sorted(r for r in instance.offerings)
        raise ConfigError(
            f"{PROJECT}:instanceType",
            f"{instance.name} is not offered in {region} per the catalog",
            f"use a region that has it ({', '.join(offered) or 'none'}) or another instance type",
        )
    if parsed.azId not in offering.az_ids:
        raise ConfigError(
            f"{PROJECT}:azId",
            f"{instance.name} is not offered in {parsed.azId} per the catalog",
            f"use one of {', '.join(offering.az_ids)}, or run `gpuforge preflight --stack {stack}` to pick one",
        )
    if parsed.azId not in reg.s3express_az_ids:
        both = [a for a in offering.az_ids if a in reg.s3express_az_ids]
        raise ConfigError(
            f"{PROJECT}:azId",
            f"S3 Express One Zone (the co-located directory bucket) is not available in {parsed.azId}",
            f"use an AZ ID with both {instance.name} and S3 Express: {', '.join(both) or 'none in ' + region}",
        )

    node_count = parsed.nodeCount if parsed.nodeCount is not None else profile.shape.node_count
    if not 1 <= node_count <= MAX_NODES:
        raise ConfigError(
            f"{PROJECT}:nodeCount",
            f"{node_count} is out of range",
            f"use 1 to {MAX_NODES} nodes (one cluster placement group per stack)",
        )

    _check_network(parsed, stack)
    if parsed.enaExpress and not instance.ena_express:
        raise ConfigError(
            f"{PROJECT}:enaExpress",
            f"{instance.name} does not support ENA Express (describe_instance_types EnaSrdSupported is false)",
            "remove enaExpress, or pick a type that supports it (g6.48xlarge, g6e.12xlarge and larger, p5, p5e, p5en)",
        )
    if parsed.enaExpress and parsed.kubernetes == "eks":
        # The EKS GPU node group's template (components/kubernetes/eks.py) is not gpuforge's node
        # template; refusing beats a key that silently does nothing.
        raise ConfigError(
            f"{PROJECT}:enaExpress",
            "is not applied to EKS managed node groups by gpuforge",
            "remove enaExpress, or use kubernetes: none or existing",
        )
    bucket_base = parsed.bucketBase or f"gpuforge-{stack}"
    _check_bucket_base(bucket_base, parsed.azId, region)
    fleet = _fleet(parsed, instance, region, catalog, node_count)
    _check_subnet_size(parsed, instance, fleet.max_nodes(node_count))
    _check_egress(parsed, instance, fleet)

    return StackConfig(
        stack=stack,
        region=region,
        profile=profile,
        instance=instance,
        az_id=parsed.azId,
        node_count=node_count,
        ssh_cidrs=parsed.sshCidrs,
        allow_public_ssh=parsed.allowPublicSsh,
        ssh_user=parsed.sshUser,
        key_name=parsed.keyName,
        vpc_id=parsed.vpcId,
        subnet_id=parsed.subnetId,
        vpc_cidr=parsed.vpcCidr,
        subnet_cidr=parsed.subnetCidr,
        ami_id=parsed.amiId,
        node_template_version=parsed.nodeTemplateVersion,
        os=parsed.os,
        driver_preinstalled=parsed.driverPreinstalled,
        root_volume_gib=parsed.rootVolumeGib or profile.storage.root_volume_gib,
        public_ips=parsed.publicIps,
        nat_gateway=parsed.natGateway and parsed.vpcId is None and not parsed.publicIps,
        interface_endpoints=parsed.interfaceEndpoints,
        ena_express=parsed.enaExpress,
        bucket_base=bucket_base,
        team=parsed.team,
        owner=parsed.owner,
        cost_center=parsed.costCenter,
        ngc_api_key_parameter=parsed.ngcApiKeyParameter,
        fleet=fleet,
        kubernetes=kubernetes_settings(
            parsed, profile, instance, catalog.gpu(instance), node_count, reg.az_ids
        ),
        mirror=_mirror(parsed.mirror),
        slurm=slurm_settings(parsed, stack, profile, instance, catalog.gpu(instance), node_names(stack, node_count)),
    )


def _mirror(items: tuple[str, ...]) -> Mirror:
    try:
        return parse_mirror(items)
    except MirrorError as exc:
        raise ConfigError(f"{PROJECT}:mirror", exc.args[0], exc.args[1]) from None


def node_names(stack: str, count: int) -> tuple[str, ...]:
    """The GPU nodes' names: Name tag, hostname, inventory name and Slurm NodeName alike.
    Zero-padded so names sort and fold (ClusterShell and Slurm hostlists: cv-training-node[01-08])."""
    width = max(2, len(str(count)))
    return tuple(f"{stack}-node{i + 1:0{width}d}" for i in range(count))


# EC2 user guide, "Placement groups for your Amazon EC2 instances" - Rules and limitations
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups.html): "You can't launch
# a Spot Instance that is configured to stop or hibernate on interruption in a placement group."
# Every gpuforge GPU node launches in the stack's cluster placement group (components/compute.py,
# autoscaling.py, kubernetes/eks.py), so only `terminate` can launch.
PLACEMENT_GROUP_SPOT_RULE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups.html"


def _check_spot_interruption(parsed: RawStackConfig) -> None:
    behaviour = parsed.spotInterruptionBehavior
    if behaviour == "terminate":
        return
    if parsed.purchaseOption != "spot":
        raise ConfigError(
            f"{PROJECT}:spotInterruptionBehavior",
            f"{behaviour!r} is set, but purchaseOption is {parsed.purchaseOption} (it only applies to spot)",
            "remove it",
        )
    raise ConfigError(
        f"{PROJECT}:spotInterruptionBehavior",
        f"spot nodes that {behaviour} on interruption cannot launch in a placement group, and every gpuforge "
        f"node is in the stack's cluster placement group (EC2 placement group rules, {PLACEMENT_GROUP_SPOT_RULE})",
        "use terminate (the default): training resumes from its checkpoints on a new node",
    )


def _check_eks_combinations(parsed: RawStackConfig) -> None:
    """Combinations that would deploy but silently do nothing on EKS (issue 10 item 10): refused.

    On `kubernetes: eks` the GPU nodes are an EKS managed node group of fixed size nodeCount,
    launched ON_DEMAND from its own template (components/kubernetes/eks.py). An Auto Scaling group
    would boot gpuforge's own nodes, which never join the cluster; spot or reserved capacity would
    not reach the node group at all.
    """
    if parsed.kubernetes != "eks":
        return
    if parsed.autoscaling:
        raise ConfigError(
            f"{PROJECT}:autoscaling",
            "true with kubernetes 'eks': the Auto Scaling group's nodes would never join the EKS cluster "
            "(the cluster's GPU nodes are its managed node group, nodeCount of them)",
            "remove autoscaling and size the node group with nodeCount, or use kubernetes: none",
        )
    if parsed.purchaseOption != "on-demand":
        raise ConfigError(
            f"{PROJECT}:purchaseOption",
            f"{parsed.purchaseOption} with kubernetes 'eks': the EKS managed node group launches on-demand "
            "capacity, so it would be ignored",
            "use purchaseOption: on-demand with kubernetes: eks, or kubernetes: none for spot or reserved capacity",
        )


def _fleet(parsed: RawStackConfig, instance: InstanceType, region: str, catalog: Catalog, node_count: int) -> FleetConfig:
    _check_eks_combinations(parsed)
    _check_spot_interruption(parsed)
    fleet = parse_fleet(parsed, instance, region, parsed.azId, catalog)
    check_gpu_quota(fleet, instance, node_count)
    return fleet


def _network(key: str, text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ConfigError(f"{PROJECT}:{key}", f"{text!r} is not a valid CIDR ({exc})", "write it like 10.0.0.0/8") from None


def internet_wide(cidrs: tuple[str, ...] | list[str]) -> str | None:
    """The CIDRs, or the set of them, that together cover a whole address family, else None.

    `0.0.0.0/1` plus `128.0.0.0/1` is the internet split in two (issue 13 item 6): the union is
    what a security group opens, so the union is what is judged (ipaddress.collapse_addresses).
    """
    for version, everything in ((4, ipaddress.ip_network("0.0.0.0/0")), (6, ipaddress.ip_network("::/0"))):
        nets = [n for n in (ipaddress.ip_network(c, strict=False) for c in cidrs) if n.version == version]
        if everything in list(ipaddress.collapse_addresses(nets)):  # type: ignore[type-var]  # one version per pass
            covering = [str(n) for n in nets]
            return covering[0] if len(covering) == 1 else " + ".join(covering)
    return None


def _check_network(parsed: RawStackConfig, stack: str) -> None:
    for cidr in parsed.sshCidrs:
        _network("sshCidrs", cidr)
    wide = internet_wide(parsed.sshCidrs)
    if wide is not None and not parsed.allowPublicSsh:
        raise ConfigError(
            f"{PROJECT}:sshCidrs",
            f"{wide} opens SSH to the whole internet",
            f"list your own CIDRs, or set `{PROJECT}:allowPublicSsh: true` in stacks/Pulumi.{stack}.yaml "
            "if you really mean it",
        )
    vpc = _network("vpcCidr", parsed.vpcCidr)
    subnet = _network("subnetCidr", parsed.subnetCidr)
    if not subnet.subnet_of(vpc):  # type: ignore[arg-type]
        raise ConfigError(f"{PROJECT}:subnetCidr", f"{subnet} is not inside vpcCidr {vpc}", "pick a subnet of the VPC")
    if bool(parsed.vpcId) != bool(parsed.subnetId):
        missing = "subnetId" if parsed.vpcId else "vpcId"
        raise ConfigError(f"{PROJECT}:{missing}", "not set", "an existing network needs both vpcId and subnetId")
    if parsed.vpcId and not re.fullmatch(r"vpc-[0-9a-f]{8,17}", parsed.vpcId):
        raise ConfigError(f"{PROJECT}:vpcId", f"{parsed.vpcId!r} is not a VPC id", "write it like vpc-0abc1234")
    if parsed.subnetId and not re.fullmatch(r"subnet-[0-9a-f]{8,17}", parsed.subnetId):
        raise ConfigError(f"{PROJECT}:subnetId", f"{parsed.subnetId!r} is not a subnet id", "write it like subnet-0abc1234")
    if parsed.amiId and not re.fullmatch(r"ami-[0-9a-f]{8,17}", parsed.amiId):
        raise ConfigError(f"{PROJECT}:amiId", f"{parsed.amiId!r} is not an AMI id", "write it like ami-0abc1234")


def _check_egress(parsed: RawStackConfig, instance: InstanceType, fleet: FleetConfig) -> None:
    """Every node needs a way out: to package repositories (bootstrap), or on EKS to ECR, STS and
    EC2. A new VPC puts nodes in a public subnet (an internet gateway route, public IPs) or in a
    private one behind a NAT gateway and/or interface endpoints (components/network.py)."""
    if parsed.vpcId:
        if parsed.interfaceEndpoints:
            raise ConfigError(f"{PROJECT}:interfaceEndpoints", "gpuforge adds interface endpoints only to a VPC it creates",
                              "remove it; an existing VPC's owner provides its endpoints")
        return  # an existing network's egress is its owner's (gpuforge preflight checks the subnet)
    if parsed.publicIps and parsed.kubernetes == "eks":
        # EKS rejects a node group in a subnet that routes to an internet gateway but does not
        # auto-assign public IPs (Ec2SubnetInvalidConfiguration), and multi-card types get no
        # automatic public IP at all: EKS nodes go in a private subnet.
        raise ConfigError(f"{PROJECT}:publicIps", "is true, but EKS nodes sit in a private subnet (NAT gateway and/or "
                          "interface endpoints)", f"set {PROJECT}:publicIps: false")
    multi_card = len(interface_layout(instance)) > 1
    if parsed.publicIps and fleet.autoscaling is not None and multi_card:
        raise ConfigError(
            f"{PROJECT}:publicIps",
            f"is true, but EC2 gives {instance.name} (several network cards) no public IP at launch and an Auto "
            "Scaling group cannot attach Elastic IPs, so its nodes would have no way out",
            f"set {PROJECT}:publicIps: false (the nodes then leave through a NAT gateway)",
        )
    if parsed.publicIps:
        return
    if not parsed.natGateway and not parsed.interfaceEndpoints:
        raise ConfigError(f"{PROJECT}:natGateway", "is false and interfaceEndpoints too: private nodes would have no way out",
                          "keep natGateway: true, or set interfaceEndpoints: true (and a package mirror for bootstrap)")
    if not parsed.natGateway and parsed.kubernetes == "eks":
        # EKS user guide, "Deploy private clusters with limited internet access": without outbound
        # access every image must come from a registry in the VPC; the Kubernetes layer pulls from
        # nvcr.io (device plugin, Triton) and public.ecr.aws (model fetch), which endpoints do not reach.
        raise ConfigError(f"{PROJECT}:natGateway", "is false, but the EKS pods pull images from nvcr.io and "
                          "public.ecr.aws, which no interface endpoint reaches", "keep natGateway: true on EKS")
    if not parsed.natGateway and not parsed.mirror:
        raise ConfigError(f"{PROJECT}:natGateway", "is false, but bootstrap downloads packages from the internet",
                          f"keep natGateway: true, or set {PROJECT}:mirror to a package mirror the nodes reach")


def _check_subnet_size(parsed: RawStackConfig, instance: InstanceType, nodes: int) -> None:
    """The subnet gpuforge creates must hold every node's addresses (at the Auto Scaling maximum),
    and on EKS the system nodes and the control plane's interfaces (core/addressing.py)."""
    if parsed.vpcId:
        return  # an existing subnet: gpuforge preflight sees its free addresses
    per_node = addresses_per_node(instance)
    need = nodes * per_node
    parts = [f"{nodes} nodes x {per_node} address{'es' if per_node > 1 else ''}"]
    if parsed.kubernetes == "eks":
        from gpuforge.core.kubernetes.settings import defaults

        system = int(defaults()["system_nodes"]["count"])
        need += system + EKS_CONTROL_PLANE_ADDRESSES
        parts.append(f"{system} system nodes, {EKS_CONTROL_PLANE_ADDRESSES} for the EKS control plane")
    if parsed.interfaceEndpoints:
        need += len(INTERFACE_SERVICES)  # one network interface per endpoint in the node subnet
        parts.append(f"{len(INTERFACE_SERVICES)} interface endpoints")
    have = usable_addresses(parsed.subnetCidr)
    if need > have:
        prefix = next(p for p in range(28, 15, -1) if 2 ** (32 - p) - AWS_RESERVED_PER_SUBNET >= need)
        raise ConfigError(
            f"{PROJECT}:subnetCidr",
            f"{parsed.subnetCidr} has {have} usable addresses (AWS reserves {AWS_RESERVED_PER_SUBNET}), "
            f"the stack needs {need} ({', '.join(parts)})",
            f"use a /{prefix} or larger (inside vpcCidr {parsed.vpcCidr})",
        )


def _check_bucket_base(base: str, az_id: str, region: str) -> None:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{1,40}[a-z0-9]", base) or "--" in base:
        raise ConfigError(
            f"{PROJECT}:bucketBase",
            f"{base!r} is not a usable bucket base name",
            "use 3-42 lowercase letters, digits and single hyphens",
        )
    # Both names carry the 12-digit account id (core/bucketnames.py) and must fit S3's 63
    # characters: <base>-<account>--<azid>--x-s3 and <base>-ckpt-<account>-<region>-an.
    for what, longest in (("directory", directory_bucket_name(base, "0" * 12, az_id)),
                          ("checkpoint", checkpoint_bucket_name(base, "0" * 12, region))):
        if len(longest) > 63:
            room = 63 - (len(longest) - len(base))
            raise ConfigError(
                f"{PROJECT}:bucketBase",
                f"{base!r} makes the {what} bucket name {len(longest)} characters ({longest}); S3 allows 63",
                f"set gpuforge:bucketBase to at most {room} characters (default is gpuforge-<stack>)",
            )
    if region in ACCOUNT_REGIONAL_UNSUPPORTED:
        raise ConfigError(
            "aws:region",
            f"S3 account regional namespaces (the checkpoint bucket's) are not offered in {region}",
            "deploy in another region",
        )
