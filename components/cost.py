"""Cost of a stack from the catalog: compute (on-demand and spot) and storage, per hour and per
30 days. Pure arithmetic over catalog data; no Pulumi."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from components.catalog import Catalog, load_catalog
from components.config import StackConfig

HOURS_PER_MONTH = 730  # AWS prices GB-month storage over 730 hours
HOURS_30_DAYS = 720


@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: float
    unit: str
    on_demand_usd_per_hour: float | None
    spot_usd_per_hour: float | None  # None: no spot price known (or not applicable: same as on-demand)


@dataclass(frozen=True)
class CostEstimate:
    lines: tuple[CostLine, ...]
    notes: tuple[str, ...]

    def total(self, spot: bool = False) -> float | None:
        total = 0.0
        for line in self.lines:
            value = line.spot_usd_per_hour if spot else line.on_demand_usd_per_hour
            if value is None:
                if spot and line.on_demand_usd_per_hour is not None and line.item.startswith("storage"):
                    value = line.on_demand_usd_per_hour  # storage costs the same either way
                else:
                    return None
            total += value
        return total

    def to_dict(self) -> dict[str, Any]:
        od, sp = self.total(), self.total(spot=True)
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
    offering = cfg.instance.offering(cfg.region)
    n = cfg.node_count
    od = offering.on_demand_usd_per_hour if offering else None
    spot = offering.spot_usd_per_hour if offering else None
    notes = [
        f"prices: {catalog.meta['snapshot']['taken']}; spot is the lowest regular-AZ price in {cfg.region}, "
        "which moves hourly",
        f"storage: {catalog.storage.source}",
        "S3 buckets are billed by usage and are not estimated",
    ]
    if od is None:
        notes.append(f"{cfg.instance.name} has no on-demand price in {cfg.region} (sold via capacity blocks?)")
    lines = [
        CostLine(
            f"compute {cfg.instance.name}",
            n,
            "nodes",
            od * n if od is not None else None,
            spot * n if spot is not None else None,
        )
    ]
    prices = catalog.storage.usd_per_gb_month
    root_hourly = cfg.root_volume_gib * n * prices["gp3"] / HOURS_PER_MONTH
    lines.append(CostLine("storage root gp3", cfg.root_volume_gib * n, "GiB", root_hourly, None))
    dv = cfg.profile.storage.data_volume
    if dv is not None:
        hourly = dv.size_gib * n * prices[dv.type] / HOURS_PER_MONTH
        lines.append(CostLine(f"storage data {dv.type}", dv.size_gib * n, "GiB", hourly, None))
    return CostEstimate(tuple(lines), tuple(notes))
