"""The stack config's keys: `RawStackConfig`, the `gpuforge:*` keys by their Pulumi names with
their types, bounds and "not set" defaults (Pulumi.yaml `config:` as a model).

core/config.py validates a stack's raw config against it and resolves the result; the cross-key
rules in core/config_rules.py read it. Neither imports the other for it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Keys whose Pulumi.yaml default is 0 and means "not set" (the profile's value, or no budget /
# quota). The Pulumi CLI treats a declared key with no `default` as required (pulumi/pulumi
# pkg/workspace/config.go mergeConfig), so optional keys need a default the program reads as
# unset: "" for strings, 0 for these integers (none of them accepts 0 as a real value).
ZERO_MEANS_UNSET = frozenset({"rootVolumeGib", "budgetUsd", "gpuQuota"})
# nodeCount's "not set" is -1, not 0: a stack that writes `nodeCount: 0` means no nodes, and
# reading it as "the profile's" deployed a whole p4de for a user scaling to zero (issue 22).
NODE_COUNT_UNSET = -1


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
            if key == "nodeCount" and not isinstance(value, bool) and value in (NODE_COUNT_UNSET, str(NODE_COUNT_UNSET)):
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
    kubernetesVersion: str = "1.35"  # core/kubernetes/defaults.yaml eks_versions.default
    eksPublicAccessCidrs: tuple[str, ...] = ()
    eksEndpointAccess: Literal["public", "private"] = "public"
    eksPrivateAccessCidrs: tuple[str, ...] = ()
    eksTransitGatewayId: str | None = None
    eksTransitGatewayRouteTableId: str | None = None
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
    # Slurm accounting (core/scheduler.py accounting_settings): an existing database instead of
    # MariaDB on the head node.
    accountingDbEndpoint: str | None = None
    accountingDbPasswordParameter: str | None = None
    accountingDbUser: str = Field(default="slurm", pattern=r"^[A-Za-z0-9_]{1,32}$")
    # The embedded database's own EBS volume: its size (gp3: 1 GiB to 16 TiB), and an existing
    # volume to adopt (the one a destroyed stack left behind) instead of making a blank one.
    accountingDbVolumeGib: int = Field(default=50, ge=10, le=16384)
    accountingDbVolumeId: str | None = Field(default=None, pattern=r"^vol-([0-9a-f]{8}|[0-9a-f]{17})$")


CONFIG_KEYS = tuple(RawStackConfig.model_fields)
LIST_KEYS = {"sshCidrs", "budgetEmails", "eksPublicAccessCidrs", "eksPrivateAccessCidrs", "kubernetesTeams", "mirror"}
