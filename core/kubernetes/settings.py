"""Typed, validated settings of the Kubernetes layer, built from the flat stack config keys.

Called by core/config.py's `parse_stack_config`, so a bad value fails before any resource
is declared, with the same `error:` line under `pulumi up` and `gpuforge preview`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpuforge.common.errors import ConfigError
from gpuforge.core.catalog import GpuModel, InstanceType
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

@dataclass(frozen=True)
class KubernetesSettings:
    mode: str  # eks | existing
    version: str
    public_access_cidrs: tuple[str, ...]
    endpoint_access: str  # public | private (eks only)
    private_access_cidrs: tuple[str, ...]
    transit_gateway_id: str | None
    teams: tuple[str, ...]
    headroom_percent: int
    inference_image: str
    inference_replicas: int
    inference_port: int
    max_batch_size: int
    max_batch_delay_ms: int
    control_plane_az_id: str | None  # EKS needs subnets in two AZs; only control-plane ENIs go here

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
    known = defaults()["eks_versions"]
    if not _VERSION.fullmatch(version) or (raw.kubernetes == "eks" and version not in known):
        raise ConfigError(f"{ns}:kubernetesVersion", f"{version!r} is not a supported version",
                          f"use one of {', '.join(known)}")

    if raw.kubernetes == "eks":
        _check_endpoint_access(raw, ns)

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
        teams=teams,
        headroom_percent=raw.gpuHeadroomPercent,
        inference_image=raw.inferenceImage or profile.bootstrap.container_image,
        inference_replicas=raw.inferenceReplicas,
        inference_port=raw.inferencePort,
        max_batch_size=raw.inferenceMaxBatchSize,
        max_batch_delay_ms=raw.inferenceMaxBatchDelayMs,
        control_plane_az_id=others[0] if raw.kubernetes == "eks" and others else None,
    )


# RFC 1918: addresses that never reach a public endpoint as a source (they leave through NAT).
_RFC1918 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


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


def _check_endpoint_access(raw: Any, ns: str) -> None:
    """The machine that runs `pulumi up` must reach the EKS API: every Kubernetes object is
    declared through it. EKS user guide, "Cluster API server endpoint": a public endpoint is open
    to 0.0.0.0/0 unless publicAccessCidrs limits it; a private-only endpoint answers only inside
    the VPC or over a connected network (VPN, Direct Connect, transit gateway), and the cluster
    security group must allow tcp/443 from that network."""
    pub, priv = f"{ns}:eksPublicAccessCidrs", f"{ns}:eksPrivateAccessCidrs"
    fix_private = (f"or set {ns}:eksEndpointAccess: private with {ns}:eksPrivateAccessCidrs and "
                   f"{ns}:eksTransitGatewayId (the network path from your operators to the VPC)")
    public_nets = _cidrs(pub, raw.eksPublicAccessCidrs)
    private_nets = _cidrs(priv, raw.eksPrivateAccessCidrs)
    if raw.eksEndpointAccess == "public":
        if not public_nets:
            raise ConfigError(pub, "is empty: the EKS API would be open to 0.0.0.0/0 (EKS's default)",
                              f"list the public CIDRs your operators (and CI) reach the internet from, {fix_private}")
        for net in public_nets:
            if any(net.subnet_of(r) for r in _RFC1918 if net.version == r.version):  # type: ignore[arg-type]
                raise ConfigError(pub, f"{net} is a private range: the public endpoint sees your NAT's public address",
                                  f"list public CIDRs, {fix_private}")
        if private_nets or raw.eksTransitGatewayId:
            raise ConfigError(f"{ns}:eksEndpointAccess", "is 'public', but a private access path is configured",
                              f"set {ns}:eksEndpointAccess: private, or remove eksPrivateAccessCidrs/eksTransitGatewayId")
        return
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
