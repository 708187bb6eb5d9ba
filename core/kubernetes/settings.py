"""Typed, validated settings of the Kubernetes layer, built from the flat stack config keys.

Called by core/config.py's `parse_stack_config`, so a bad value fails before any resource
is declared, with the same `error:` line under `pulumi up` and `gpuforge preview`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpuforge.common.errors import ConfigError
from gpuforge.core.catalog import GpuModel, InstanceType
from gpuforge.core.limits import limit
from gpuforge.core.profiles import Profile

DEFAULTS_FILE = Path(__file__).resolve().parent / "defaults.yaml"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_VERSION = re.compile(r"1\.\d{2}")


@cache
def defaults() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEFAULTS_FILE.read_text())
    return data


# Node label of GPU nodes: the EKS node group sets it (with the GPU taint); on an existing cluster
# the user labels GPU nodes the same way. The device plugin goes only where the label is. Named here,
# in the bottom layer, because validate's Kubernetes check looks for the same label and app.
GPU_NODE_LABEL = "gpuforge.io/gpu"
PLUGIN_APP = "nvidia-device-plugin"


def today() -> dt.date:
    """The date support lifecycles are judged on: today in UTC, or GPUFORGE_TODAY (YYYY-MM-DD) to
    see what a stack would get on another day (the tests pin it; tests/conftest.py)."""
    fixed = os.environ.get("GPUFORGE_TODAY")
    if fixed:
        try:
            return dt.date.fromisoformat(fixed)
        except ValueError:
            raise ConfigError("GPUFORGE_TODAY", f"{fixed!r} is not a date", "write it as YYYY-MM-DD, or unset it") from None
    return dt.datetime.now(dt.timezone.utc).date()


@dataclass(frozen=True)
class EksVersion:
    """One EKS Kubernetes version's support dates (defaults.yaml eks_versions, from the EKS docs)."""

    version: str
    end_of_standard: dt.date
    end_of_extended: dt.date
    source: str

    def support_on(self, day: dt.date) -> str:
        """standard | extended | ended. EKS bills extended support from the start (UTC) of the
        end-of-standard-support day, and creates no cluster from the end-of-extended-support day."""
        if day < self.end_of_standard:
            return "standard"
        return "extended" if day < self.end_of_extended else "ended"


def eks_versions() -> dict[str, EksVersion]:
    data = defaults()["eks_versions"]
    return {v: EksVersion(v, row["end_of_standard"], row["end_of_extended"], f"{data['source']} ({row['from']})")
            for v, row in data["versions"].items()}


def default_eks_version() -> str:
    return str(defaults()["eks_versions"]["default"])


@dataclass(frozen=True)
class KubernetesSettings:
    mode: str  # eks | existing
    version: str
    public_access_cidrs: tuple[str, ...]
    endpoint_access: str  # public | private (eks only)
    private_access_cidrs: tuple[str, ...]
    transit_gateway_id: str | None
    transit_gateway_route_table_id: str | None
    teams: tuple[str, ...]
    headroom_percent: int
    inference_image: str
    inference_replicas: int
    inference_port: int
    max_batch_size: int
    max_batch_delay_ms: int
    control_plane_az_id: str | None  # EKS needs subnets in two AZs; only control-plane ENIs go here
    # EKS: the version's support on the day config was read, and its dates (None on existing clusters)
    support: str | None = None  # standard | extended
    eks_version: EksVersion | None = None
    # Refusals that only bind when resources are really created (`pulumi up`): the offline preview
    # shows them as warnings and still prints the graph (components/deploygate.py).
    deploy_refusals: tuple[ConfigError, ...] = field(default=(), compare=False)

    @property
    def inference_namespace(self) -> str:
        return self.teams[0]


def kubernetes_settings(
    raw: Any, profile: Profile, instance: InstanceType, gpu: GpuModel, node_count: int, region_az_ids: Sequence[str]
) -> KubernetesSettings | None:
    """`raw` is the RawStackConfig; None when the stack asks for no Kubernetes."""
    ns = "gpuforge"
    if raw.kubernetes == "none":
        return None
    if raw.kubernetes == "existing" and not raw.kubeconfig:
        raise ConfigError(
            f"{ns}:kubeconfig",
            "not set, but kubernetes is 'existing'",
            "run `pulumi config set --secret gpuforge:kubeconfig \"$(cat ~/.kube/config)\"`",
        )
    if raw.kubernetes == "eks" and raw.kubeconfig:
        raise ConfigError(f"{ns}:kubeconfig", "is set, but kubernetes is 'eks' (gpuforge builds the kubeconfig)",
                          "remove it, or set kubernetes: existing")
    if raw.kubernetes == "eks" and raw.vpcId:
        raise ConfigError(
            f"{ns}:kubernetes",
            "'eks' needs a second subnet in another AZ for the control plane; gpuforge only adds it to a VPC it creates",
            "remove vpcId/subnetId, or build the cluster yourself and set kubernetes: existing",
        )

    version = str(raw.kubernetesVersion)
    eks_version, support = None, None
    if not _VERSION.fullmatch(version):
        raise ConfigError(f"{ns}:kubernetesVersion", f"{version!r} is not a Kubernetes minor version",
                          f"write it like {default_eks_version()}")
    refusals: list[ConfigError] = []
    if raw.kubernetes == "eks":
        eks_version, support = _eks_lifecycle(version, ns)
        refusals += _check_endpoint_access(raw, ns)

    teams = tuple(raw.kubernetesTeams)
    if not teams:
        raise ConfigError(f"{ns}:kubernetesTeams", "is empty", "list at least one team (its namespace runs the service)")
    for team in teams:
        if not _DNS_LABEL.fullmatch(team) or team.startswith(("kube-", "nvidia-")):
            raise ConfigError(f"{ns}:kubernetesTeams", f"{team!r} is not a usable namespace name",
                              "use lowercase letters, digits and hyphens (DNS label), not kube-*/nvidia-*")
    if len(set(teams)) != len(teams):
        raise ConfigError(f"{ns}:kubernetesTeams", "lists a team twice", "list each team once")

    from gpuforge.core.kubernetes.quotas import team_quota  # pure arithmetic, no Pulumi
    from gpuforge.core.kubernetes.sharing import GPU_RESOURCE, plan_sharing

    sharing = plan_sharing(profile.sharing, gpu)  # raises ConfigError for a bad MIG layout
    quota = team_quota(instance, node_count, sharing.advertised_per_gpu, raw.gpuHeadroomPercent, len(teams))
    shares = quota.gpus.get(GPU_RESOURCE, 0)
    if profile.bootstrap.recipe == "inference" and raw.inferenceReplicas > shares:
        raise ConfigError(
            f"{ns}:inferenceReplicas",
            f"{raw.inferenceReplicas} replicas need {raw.inferenceReplicas} GPU shares, but team {teams[0]!r} gets "
            f"{shares} ({sharing.advertised_per_gpu.get(GPU_RESOURCE, 0)} per GPU x "
            f"{instance.gpu_count * node_count} GPUs, less {raw.gpuHeadroomPercent}% headroom, "
            f"split over {len(teams)} teams)",
            f"use at most {shares}, fewer teams, or more nodes",
        )

    others = [a for a in region_az_ids if a != raw.azId]
    return KubernetesSettings(
        mode=raw.kubernetes,
        version=version,
        public_access_cidrs=tuple(raw.eksPublicAccessCidrs),
        endpoint_access=raw.eksEndpointAccess,
        private_access_cidrs=tuple(raw.eksPrivateAccessCidrs),
        transit_gateway_id=raw.eksTransitGatewayId,
        transit_gateway_route_table_id=raw.eksTransitGatewayRouteTableId,
        teams=teams,
        headroom_percent=raw.gpuHeadroomPercent,
        inference_image=raw.inferenceImage or profile.bootstrap.container_image,
        inference_replicas=raw.inferenceReplicas,
        inference_port=raw.inferencePort,
        max_batch_size=raw.inferenceMaxBatchSize,
        max_batch_delay_ms=raw.inferenceMaxBatchDelayMs,
        control_plane_az_id=others[0] if raw.kubernetes == "eks" and others else None,
        support=support,
        eks_version=eks_version,
        deploy_refusals=tuple(refusals),
    )


def _eks_lifecycle(version: str, ns: str) -> tuple[EksVersion, str]:
    """The version must be one EKS still creates clusters on, today (defaults.yaml eks_versions)."""
    day = today()
    known = eks_versions()
    offered = [v for v, ev in known.items() if ev.support_on(day) != "ended"]
    row = known.get(version)
    if row is None or row.support_on(day) == "ended":
        why = (f"reached the end of EKS extended support on {row.end_of_extended}: EKS creates no cluster on it"
               if row is not None else "is not an EKS version gpuforge knows the support dates of")
        standard = [v for v in offered if known[v].support_on(day) == "standard"]
        default = default_eks_version()
        raise ConfigError(f"{ns}:kubernetesVersion", f"{version!r} {why} ({row.source if row else known[default].source})",
                          f"use {default} (in standard support until {known[default].end_of_standard}); "
                          f"offered on {day}: {', '.join(offered)}"
                          + (f" (standard support: {', '.join(standard)})" if standard else ""))
    return row, row.support_on(day)


# How far ahead preview and cost look for a version leaving standard support: the cost report's
# 30-day window (core/costplan.py HOURS_30_DAYS).
MOVE_WARNING_DAYS = 30


def extended_support_warning(settings: KubernetesSettings) -> str | None:
    """What preview and cost say when the cluster's version costs the extended-support rate, or
    moves to it within the cost report's 30 days."""
    ev = settings.eks_version
    if ev is None:
        return None
    if settings.support == "standard":
        left = (ev.end_of_standard - today()).days
        if left > MOVE_WARNING_DAYS:
            return None
        return (f"gpuforge:kubernetesVersion {ev.version} leaves EKS standard support on {ev.end_of_standard} (in "
                f"{left} days): the control plane then costs the extended-support rate until {ev.end_of_extended}; "
                f"upgrade the cluster before then")
    return (f"gpuforge:kubernetesVersion {ev.version} left EKS standard support on {ev.end_of_standard}: the control "
            f"plane is priced at the extended-support rate until {ev.end_of_extended}; set "
            f"`gpuforge:kubernetesVersion: {default_eks_version()}` for the standard rate")


# RFC 1918: addresses that never reach a public endpoint as a source (they leave through NAT).
_RFC1918 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
# Documentation ranges (RFC 5737, RFC 3849): what an example stack file carries until the operator
# names their own address. A placeholder: the offline preview warns, `pulumi up` refuses.
_DOCUMENTATION = tuple(ipaddress.ip_network(n) for n in (
    "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"))
# The command that names the operator's own egress address (checkip.amazonaws.com answers with the
# caller's public IPv4 address) as the one CIDR the public endpoint admits.
EGRESS_FIX = ("pulumi config set --path 'gpuforge:eksPublicAccessCidrs[0]' "
              "\"$(curl -s https://checkip.amazonaws.com)/32\"")


def _cidrs(key: str, cidrs: Sequence[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets = []
    for cidr in cidrs:
        try:
            net = ipaddress.ip_network(cidr, strict=True)
        except ValueError as exc:
            raise ConfigError(key, f"{cidr!r} is not a valid CIDR ({exc})", "write it like 198.51.100.0/24") from None
        if net.prefixlen == 0:
            raise ConfigError(key, f"{cidr} opens the Kubernetes API to the whole internet",
                              "list the operators' own networks")
        nets.append(net)
    return nets


def _check_endpoint_access(raw: Any, ns: str) -> list[ConfigError]:
    """The machine that runs `pulumi up` must reach the EKS API: every Kubernetes object is
    declared through it. EKS user guide, "Cluster API server endpoint": a public endpoint is open
    to 0.0.0.0/0 unless publicAccessCidrs limits it; a private-only endpoint answers only inside
    the VPC or over a connected network (VPN, Direct Connect, transit gateway), and the cluster
    security group must allow tcp/443 from that network."""
    pub, priv = f"{ns}:eksPublicAccessCidrs", f"{ns}:eksPrivateAccessCidrs"
    fix_private = (f"or set {ns}:eksEndpointAccess: private with {ns}:eksPrivateAccessCidrs, "
                   f"{ns}:eksTransitGatewayId and {ns}:eksTransitGatewayRouteTableId (the network path from your "
                   "operators to the VPC)")
    public_nets = _cidrs(pub, raw.eksPublicAccessCidrs)
    private_nets = _cidrs(priv, raw.eksPrivateAccessCidrs)
    if raw.eksEndpointAccess == "public":
        if not public_nets:
            raise ConfigError(pub, "is empty: the EKS API would be open to 0.0.0.0/0 (EKS's default)",
                              f"list the public CIDRs your operators (and CI) reach the internet from, {fix_private}")
        refusals = []
        for net in public_nets:
            if any(net.subnet_of(r) for r in _RFC1918 if net.version == r.version):  # type: ignore[arg-type]
                raise ConfigError(pub, f"{net} is a private range: the public endpoint sees your NAT's public address",
                                  f"list public CIDRs, {fix_private}")
            if net.is_global:
                continue
            # aws_limits.yaml eks_public_access_cidrs_global: no packet from such a range reaches
            # the public endpoint, so every Kubernetes object of the stack would fail to connect
            # after the VPC, NAT gateway and control plane were built.
            rule = limit("eks_public_access_cidrs_global")
            placeholder = any(net.subnet_of(d) for d in _DOCUMENTATION if net.version == d.version)  # type: ignore[arg-type]
            error = ConfigError(
                pub,
                f"{net} is {'a documentation range (a placeholder)' if placeholder else 'not globally routable'}: "
                f"no operator reaches the EKS API from it, so every Kubernetes object would fail after the VPC, "
                f"NAT gateway and control plane were built (IANA special-purpose registry, {rule.source})",
                f"name your own egress address: `{EGRESS_FIX}`; {fix_private}",
            )
            if not placeholder:
                raise error
            refusals.append(error)
        if private_nets or raw.eksTransitGatewayId or raw.eksTransitGatewayRouteTableId:
            raise ConfigError(f"{ns}:eksEndpointAccess", "is 'public', but a private access path is configured",
                              f"set {ns}:eksEndpointAccess: private, or remove eksPrivateAccessCidrs/eksTransitGatewayId/"
                              "eksTransitGatewayRouteTableId")
        return refusals
    if public_nets:
        raise ConfigError(pub, "is set, but eksEndpointAccess is 'private' (no public endpoint)",
                          "remove it, or set eksEndpointAccess: public")
    if not private_nets:
        raise ConfigError(priv, "is empty: nothing outside the VPC could reach the private endpoint, so `pulumi up` "
                          "could not declare the Kubernetes objects", "list the operators' networks")
    tgw = raw.eksTransitGatewayId
    if not tgw or not re.fullmatch(r"tgw-[0-9a-f]{8,17}", tgw):
        raise ConfigError(f"{ns}:eksTransitGatewayId", f"{tgw!r} is not a transit gateway id" if tgw else "not set",
                          "name the transit gateway (tgw-...) that connects eksPrivateAccessCidrs to this VPC")
    # Which route table the attachment joins, and learns routes into, is named rather than left to
    # the gateway's defaults (off on many shared gateways: the operators' networks would then have
    # no route to the VPC although every resource was created).
    rtb = raw.eksTransitGatewayRouteTableId
    if not rtb or not re.fullmatch(r"tgw-rtb-[0-9a-f]{8,17}", rtb):
        raise ConfigError(f"{ns}:eksTransitGatewayRouteTableId",
                          f"{rtb!r} is not a transit gateway route table id" if rtb else "not set",
                          "name the route table of the transit gateway (tgw-rtb-...) that routes eksPrivateAccessCidrs "
                          "(`aws ec2 describe-transit-gateway-route-tables --filters Name=transit-gateway-id,Values=TGW`)")
    return []
