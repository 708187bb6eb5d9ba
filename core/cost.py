"""The cost section of `gpuforge preview`: compute and storage, on-demand and spot, per hour and
per 30 days; on EKS stacks also the control plane and the system nodes (fixed items). The
arithmetic is `components.costplan.stack_cost` (the same figures as `gpuforge cost`); this module
only lays them out as the preview's lines and notes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gpuforge.core.catalog import Catalog, load_catalog
from gpuforge.core.config import StackConfig
from gpuforge.core.costplan import HOURS_30_DAYS, HOURS_PER_MONTH, load_platform_prices, stack_cost

__all__ = ["HOURS_30_DAYS", "HOURS_PER_MONTH", "CostEstimate", "CostLine", "estimate"]


@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: float
    unit: str
    on_demand_usd_per_hour: float | None
    # None where the item costs the same either way: storage, and the fixed EKS items (control
    # plane, on-demand system nodes) whatever the GPU nodes are bought as
    spot_usd_per_hour: float | None


@dataclass(frozen=True)
class CostEstimate:
    lines: tuple[CostLine, ...]
    notes: tuple[str, ...]
    hourly_on_demand: float | None
    hourly_spot: float | None

    def to_dict(self) -> dict[str, Any]:
        od, sp = self.hourly_on_demand, self.hourly_spot
        return {
            "currency": "USD",
            "lines": [asdict(line) for line in self.lines],
            "hourly": {"on_demand": _r(od), "spot": _r(sp)},
            "thirty_days": {
                "on_demand": _r(od * HOURS_30_DAYS if od is not None else None),
                "spot": _r(sp * HOURS_30_DAYS if sp is not None else None),
            },
            "notes": list(self.notes),
        }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def estimate(cfg: StackConfig, catalog: Catalog | None = None) -> CostEstimate:
    catalog = catalog or load_catalog()
    sc = stack_cost(cfg)
    n = sc.node_count
    od, spot = sc.compute_per_node["on_demand"], sc.compute_per_node["spot"]
    prices = catalog.storage.usd_per_gb_month
    lines = [
        CostLine(
            f"compute {cfg.instance.name}",
            n,
            "nodes",
            od * n if od is not None else None,
            spot * n if spot is not None else None,
        ),
        CostLine(
            "storage root gp3", cfg.root_volume_gib * n, "GiB", cfg.root_volume_gib * n * prices["gp3"] / HOURS_PER_MONTH, None
        ),
    ]
    dv = cfg.profile.storage.data_volume
    if dv is not None:
        lines.append(
            CostLine(f"storage data {dv.type}", dv.size_gib * n, "GiB", dv.size_gib * n * prices[dv.type] / HOURS_PER_MONTH, None)
        )
    lines += [CostLine(f.item, f.quantity, f.unit, f.usd_per_hour, None) for f in sc.fixed]
    notes = [
        f"prices: {catalog.meta['snapshot']['taken']}; spot is the lowest regular-AZ price in {cfg.region}, "
        "which moves hourly",
        f"storage: {catalog.storage.source}",
        "S3 buckets are billed by usage and are not estimated",
        "commitments and the hybrid scenario: `gpuforge cost --stack " + cfg.stack + "`",
    ]
    if sc.fixed:
        platform = load_platform_prices()
        if cfg.kubernetes is not None and cfg.kubernetes.mode == "eks":
            notes += [
                f"EKS control plane: {platform.eks_source}; {platform.eks_extended_usd_per_cluster_hour:.2f} $/h "
                "once the cluster's Kubernetes version is in extended support",
                f"system nodes: {platform.instance_source}; always on-demand, so the same under spot",
            ]
        if cfg.slurm is not None:
            notes.append(_slurm_head_note(cfg, platform.instance_source))
        notes += [f"no price for {f.item} in {cfg.region}: the total is unknown" for f in sc.fixed if f.usd_per_hour is None]
    if sc.max_nodes:
        notes.append(f"autoscaled: costed at the group minimum ({n} nodes); up to {sc.max_nodes} nodes under load")
    if od is None:
        notes.append(f"{cfg.instance.name} has no on-demand price in {cfg.region} (sold via capacity blocks?)")
    return CostEstimate(tuple(lines), tuple(notes), sc.hourly("on_demand"), sc.hourly("spot"))


def _slurm_head_note(cfg: StackConfig, source: str) -> str:
    """Why the Slurm head is the size it is: the accounting database's place decides it."""
    slurm = cfg.slurm
    assert slurm is not None
    head = f"Slurm head: {slurm.head_instance_type}, on demand whatever the GPU nodes are bought as ({source})"
    acct = slurm.accounting
    profile_slurm = cfg.profile.scheduler.slurm if cfg.profile.scheduler else None
    profile_type = profile_slurm.head_instance_type if profile_slurm else "?"
    if acct is None:
        return head
    if acct.embedded and acct.volume is not None:
        return (f"{head}; accounting runs MariaDB on the head, hence {slurm.head_instance_type} and not {profile_type}, "
                f"with its data on a {acct.volume.size_gib} GiB {acct.volume.type} volume of its own, kept when the head "
                "or the stack is deleted and billed until removed; with gpuforge:accountingDbEndpoint the head is "
                f"{profile_type} and has no database volume")  # fmt: skip
    return (f"{head}; accounting stores into the database at {acct.host}:{acct.port}, billed where it runs and not "
            f"counted here; without gpuforge:accountingDbEndpoint the head would run MariaDB itself")  # fmt: skip
