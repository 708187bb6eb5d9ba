"""The typed stack configuration, validated before any resource is declared.

`parse_stack_config` takes config as the Pulumi engine hands it over (a flat map of
`namespace:key` to string values) and returns a frozen `StackConfig`, or raises `ConfigError`
naming the key, the bad value and the fix. The same function runs inside `__main__.py` (real
`pulumi up`) and in `gpuforge preview` before the program starts, so both refuse the same input.
The keys and their types (`RawStackConfig`, Pulumi.yaml's `config:` as a model) are in
core/config_schema.py; the rules that join several keys (network, egress, subnet size, bucket
names, the EKS and spot combinations, name lengths) are in core/config_rules.py.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from gpuforge.common.errors import ConfigError
from gpuforge.core.catalog import Catalog, InstanceType, did_you_mean, load_catalog
from gpuforge.core.config_rules import (
    check_aws_key,
    check_bucket_base,
    check_egress,
    check_eks_combinations,
    check_ena_express,
    check_name_lengths,
    check_network,
    check_spot_interruption,
    check_subnet_size,
    check_tags,
)
from gpuforge.core.config_schema import CONFIG_KEYS, LIST_KEYS, RawStackConfig
from gpuforge.core.fleet import FleetConfig, check_gpu_quota, parse_fleet
from gpuforge.core.kubernetes.settings import KubernetesSettings, kubernetes_settings
from gpuforge.core.mirror import Mirror, MirrorError, parse_mirror
from gpuforge.core.profiles import Profile, UnknownProfileError, load_profile, profile_names
from gpuforge.core.scheduler import SlurmSettings, slurm_settings

PROJECT = "gpuforge"
MAX_NODES = 256  # one cluster placement group; larger fleets are split into several stacks




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
    def deploy_refusals(self) -> tuple[ConfigError, ...]:
        """What `pulumi up` refuses before the first resource while the offline preview only warns
        (a placeholder in the committed stack file): components/deploygate.py."""
        return self.kubernetes.deploy_refusals if self.kubernetes is not None else ()

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
    if key in LIST_KEYS and isinstance(value, str):
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
    if ns == "aws":
        check_aws_key(full_key, key)
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
    if node_count == 0:
        raise ConfigError(
            f"{PROJECT}:nodeCount",
            "0 nodes: gpuforge does not deploy a stack without GPU nodes (0 never means the profile's count)",
            f"to stop paying for the nodes, `pulumi destroy --stack {stack}`; remove the key for the profile's "
            f"{profile.shape.node_count}, or set 1 to {MAX_NODES}",
        )
    if not 1 <= node_count <= MAX_NODES:
        raise ConfigError(
            f"{PROJECT}:nodeCount",
            f"{node_count} is out of range",
            f"use 1 to {MAX_NODES} nodes (one cluster placement group per stack)",
        )

    check_network(parsed, stack)
    check_tags(parsed)
    check_ena_express(parsed, instance)
    bucket_base = parsed.bucketBase or f"gpuforge-{stack}"
    check_bucket_base(bucket_base, parsed.azId, region)
    fleet = _fleet(parsed, instance, region, catalog, node_count)
    check_subnet_size(parsed, instance, fleet.max_nodes(node_count))
    check_egress(parsed, instance, fleet)
    check_name_lengths(parsed, stack, node_names(stack, node_count), fleet)

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


def _fleet(parsed: RawStackConfig, instance: InstanceType, region: str, catalog: Catalog, node_count: int) -> FleetConfig:
    check_eks_combinations(parsed)
    check_spot_interruption(parsed)
    fleet = parse_fleet(parsed, instance, region, parsed.azId, catalog)
    check_gpu_quota(fleet, instance, node_count)
    return fleet
