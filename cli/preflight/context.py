"""What every preflight check reads (the resolved stack) and writes (evidence per AZ ID)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuforge.core.catalog import Catalog, InstanceType
from gpuforge.core.config import StackConfig
from gpuforge.preflight.aws import Aws


@dataclass
class Evidence:
    """What the checks learned about each candidate AZ ID. `None` means "could not find out"."""

    az_ids: tuple[str, ...]
    zone_names: dict[str, str] = field(default_factory=dict)  # AZ ID -> this account's AZ name
    offered: set[str] | None = None
    s3express: set[str] | None = None
    quota_ok: bool | None = None
    reserved: dict[str, int] | None = None  # AZ ID -> instances still free in active reservations
    subnet_az: str | None = None  # an existing subnet from config pins the AZ
    no_capacity: set[str] = field(default_factory=set)  # AZ IDs where the capacity probe got ICE
    spot_price: dict[str, float] = field(default_factory=dict)
    account: str | None = None  # the caller's account id (STS); it is part of the bucket names


@dataclass
class Context:
    stack: str
    cfg: StackConfig  # validated; its az_id may be a stand-in when the configured one is unusable
    configured_az: str
    catalog: Catalog
    aws: Aws
    evidence: Evidence
    secrets: tuple[str, ...] = ()
    probe_capacity: bool = False

    @property
    def region(self) -> str:
        return self.cfg.region

    @property
    def instance(self) -> InstanceType:
        return self.cfg.instance

    @property
    def vcpus_needed(self) -> int:
        # vCPU quotas count the type's default vCPUs per running instance (catalog fact).
        return self.cfg.node_count * self.cfg.instance.vcpus
