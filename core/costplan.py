"""What a stack costs under each purchase option, and the seeds' hybrid scenario.

Pure arithmetic over catalog data (prices in offerings.csv, storage prices, commitment factors
in catalog/commitments.yaml); no Pulumi. Compute is priced per option; storage (EBS) costs the
same under every option because EBS is neither sold as spot nor reservable. EKS stacks add fixed
hourly items (catalog/platform_prices.yaml): the control plane and the on-demand system node
group, which cost the same whichever option the GPU nodes are bought under.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from gpuforge.core.catalog import CATALOG_DIR, InstanceType, read_catalog_file
from gpuforge.core.config import StackConfig
from gpuforge.core.profiles import Profile

HOURS_PER_MONTH = 730  # AWS prices GB-month storage over 730 hours
HOURS_30_DAYS = 720

OPTIONS = ("on_demand", "spot", "1y", "3y")
OPTION_LABELS = {"on_demand": "on-demand", "spot": "spot", "1y": "1y commit", "3y": "3y commit"}
# gpuforge:purchaseOption -> the catalog option it is billed at. A capacity reservation is billed at
# the On-Demand rate whether or not instances run in it (EC2 User Guide, "Capacity Reservation pricing
# and billing"); a capacity block's price is set when it is bought, so the catalog has none (None).
_PRICED_AS: dict[str, str | None] = {
    "on-demand": "on_demand",
    "spot": "spot",
    "capacity-reservation": "on_demand",
    "capacity-block": None,
}


def price_option(purchase_option: str) -> str | None:
    """The catalog option (OPTIONS) a stack's gpuforge:purchaseOption is billed at; None: not in the catalog."""
    try:
        return _PRICED_AS[purchase_option]
    except KeyError:
        raise ValueError(f"unknown purchase option {purchase_option!r}") from None
TRAINING_RECIPES = frozenset({"training", "hpc"})


@dataclass(frozen=True)
class Commitment:
    key: str
    label: str
    discount: float
    source: str


@dataclass(frozen=True)
class PurchaseData:
    commitments: dict[str, Commitment]
    hybrid_training: str
    hybrid_inference: str
    hybrid_claimed_saving: float
    hybrid_source: str


@cache
def load_purchase_data(path: Path | None = None) -> PurchaseData:
    doc = read_catalog_file(path or CATALOG_DIR / "commitments.yaml")
    commitments = {
        key: Commitment(key, c["label"], float(c["discount"]), " ".join(str(c["source"]).split()))
        for key, c in doc["commitments"].items()
    }
    hy = doc["hybrid"]
    return PurchaseData(
        commitments=commitments,
        hybrid_training=hy["training"],
        hybrid_inference=hy["inference"],
        hybrid_claimed_saving=float(hy["claimed_saving"]),
        hybrid_source=" ".join(str(hy["source"]).split()),
    )


@dataclass(frozen=True)
class PlatformPrices:
    """Per-region hourly prices of what an EKS stack runs besides its GPU nodes."""

    eks_usd_per_cluster_hour: dict[str, float]
    eks_extended_usd_per_cluster_hour: float
    eks_source: str
    instance_usd_per_hour: dict[str, dict[str, float]]  # type -> region -> USD per hour
    instance_source: str
    # The private nodes' way out (components/network.py): per NAT gateway, per interface endpoint and AZ.
    nat_gateway_usd_per_hour: dict[str, float] = field(default_factory=dict)
    interface_endpoint_usd_per_hour: dict[str, float] = field(default_factory=dict)

    def eks(self, region: str | None) -> float | None:
        return self.eks_usd_per_cluster_hour.get(region) if region else None

    def instance(self, type_name: str, region: str | None) -> float | None:
        return self.instance_usd_per_hour.get(type_name, {}).get(region) if region else None


@cache
def load_platform_prices(path: Path | None = None) -> PlatformPrices:
    doc = read_catalog_file(path or CATALOG_DIR / "platform_prices.yaml")
    eks, inst = doc["eks_control_plane"], doc["instances"]
    return PlatformPrices(
        eks_usd_per_cluster_hour={r: float(v) for r, v in eks["usd_per_cluster_hour"].items()},
        eks_extended_usd_per_cluster_hour=float(eks["extended_support_usd_per_cluster_hour"]),
        eks_source=str(eks["source"]),
        instance_usd_per_hour={t: {r: float(v) for r, v in by.items()} for t, by in inst["usd_per_hour"].items()},
        instance_source=str(inst["source"]),
        nat_gateway_usd_per_hour={r: float(v) for r, v in doc["nat_gateway"]["usd_per_hour"].items()},
        interface_endpoint_usd_per_hour={r: float(v) for r, v in doc["interface_endpoint"]["usd_per_hour"].items()},
    )


@dataclass(frozen=True)
class FixedItem:
    """A cost that does not scale with the GPU node count nor change with the purchase option."""

    item: str
    quantity: float
    unit: str
    usd_per_hour: float | None  # the item's total; None: no price known


def platform_items(cfg: StackConfig, prices: PlatformPrices | None = None) -> tuple[FixedItem, ...]:
    """The private nodes' NAT gateway and interface endpoints, the Slurm head node and its root
    volume, and on EKS the control plane, the system nodes and their root volumes."""
    prices = prices or load_platform_prices()
    return _egress_items(cfg, prices) + _slurm_items(cfg, prices) + _eks_items(cfg, prices)


def _egress_items(cfg: StackConfig, prices: PlatformPrices) -> tuple[FixedItem, ...]:
    from gpuforge.core.addressing import INTERFACE_SERVICES

    items: list[FixedItem] = []
    if cfg.nat_gateway:
        # hourly only: the per-GB processing charge depends on traffic (bootstrap downloads, images)
        items.append(FixedItem("NAT gateway", 1, "gateway",
                               prices.nat_gateway_usd_per_hour.get(cfg.region)))
    if cfg.interface_endpoints:
        per = prices.interface_endpoint_usd_per_hour.get(cfg.region)
        n = len(INTERFACE_SERVICES)  # one AZ: the stack's
        items.append(FixedItem("interface endpoints (1 AZ)", n, "endpoints", None if per is None else per * n))
    return tuple(items)


def _slurm_items(cfg: StackConfig, prices: PlatformPrices) -> tuple[FixedItem, ...]:
    """The head node runs on demand whatever the GPU nodes are bought as (components/slurmhead.py).
    With accounting in MariaDB on the head (the default) it is the larger type, and the database
    has a gp3 volume of its own (core/slurmhead_sizes.py) that outlives the head: it is billed
    while it exists, stack or no stack. An existing database is billed elsewhere."""
    if cfg.slurm is None:
        return ()
    from gpuforge.core.catalog import load_catalog

    head = prices.instance(cfg.slurm.head_instance_type, cfg.region)
    per_gb = load_catalog().storage.usd_per_gb_month
    acct = cfg.slurm.accounting
    why = ""
    if acct is not None:  # what runs on the head, and where the accounting database is billed
        elsewhere = f" (slurmctld, slurmdbd; database at {acct.host}, billed there)"
        why = " (slurmctld, slurmdbd, MariaDB)" if acct.embedded else elsewhere
    root = cfg.slurm.head_root_gib
    items = [
        FixedItem(f"Slurm head {cfg.slurm.head_instance_type}{why}", 1, "nodes", head),
        FixedItem("storage Slurm head root gp3", root, "GiB", root * per_gb["gp3"] / HOURS_PER_MONTH),
    ]
    if acct is not None and acct.volume is not None:
        v = acct.volume
        items.append(FixedItem(f"storage Slurm accounting database {v.type} (kept on delete)", v.size_gib, "GiB",
                               v.size_gib * per_gb[v.type] / HOURS_PER_MONTH))  # fmt: skip
    return tuple(items)


def _eks_items(cfg: StackConfig, prices: PlatformPrices) -> tuple[FixedItem, ...]:
    if cfg.kubernetes is None or cfg.kubernetes.mode != "eks":
        return ()
    from gpuforge.core.catalog import load_catalog
    from gpuforge.core.kubernetes.settings import defaults  # data only, no Pulumi

    system = defaults()["system_nodes"]
    count, type_name, root_gib = int(system["count"]), str(system["instance_type"]), int(system["root_volume_gib"])
    node = prices.instance(type_name, cfg.region)
    gp3 = load_catalog().storage.usd_per_gb_month["gp3"]
    # A version past its end of standard support bills the extended-support rate (defaults.yaml
    # eks_versions, judged on the day config was read: KubernetesSettings.support).
    extended = cfg.kubernetes.support == "extended"
    control_plane = prices.eks(cfg.region)
    if extended and control_plane is not None:
        control_plane = prices.eks_extended_usd_per_cluster_hour
    return (
        FixedItem("EKS control plane (extended support)" if extended else "EKS control plane", 1, "cluster",
                  control_plane),
        FixedItem(f"system nodes {type_name}", count, "nodes", None if node is None else node * count),
        FixedItem("storage system root gp3", root_gib * count, "GiB", root_gib * count * gp3 / HOURS_PER_MONTH),
    )


@dataclass(frozen=True)
class StackCost:
    """One stack's cost: per node and in total, per hour, for each purchase option."""

    stack: str
    profile: str
    instance_type: str
    region: str
    node_count: int
    gpus_per_node: int
    role: str  # training | inference (from the profile's bootstrap recipe)
    compute_per_node: dict[str, float | None]  # option -> USD per node-hour; None: no price known
    storage_per_node: float  # USD per node-hour, the same for every option
    max_nodes: int | None = None  # autoscaling ceiling; node_count is then the group's minimum
    fixed: tuple[FixedItem, ...] = ()  # EKS control plane, system nodes: the same under every option

    @property
    def fixed_hourly(self) -> float | None:
        return sum_or_none(f.usd_per_hour for f in self.fixed)

    def per_node_hourly(self, option: str) -> float | None:
        compute = self.compute_per_node[option]
        return None if compute is None else compute + self.storage_per_node

    def hourly(self, option: str, nodes: int | None = None) -> float | None:
        """The stack's total per hour: its GPU nodes (at `nodes`, default node_count) plus the fixed items."""
        per_node, fixed = self.per_node_hourly(option), self.fixed_hourly
        if per_node is None or fixed is None:
            return None
        return per_node * (self.node_count if nodes is None else nodes) + fixed

    def thirty_days(self, option: str) -> float | None:
        hourly = self.hourly(option)
        return None if hourly is None else hourly * HOURS_30_DAYS

    def per_gpu_hour(self, option: str) -> float | None:
        """Per GPU-hour of a node (compute and its storage); the fixed items are not spread over GPUs."""
        per_node = self.per_node_hourly(option)
        return None if per_node is None else per_node / self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "profile": self.profile,
            "instance_type": self.instance_type,
            "region": self.region,
            "nodes": self.node_count,
            "gpus": self.node_count * self.gpus_per_node,
            "role": self.role,
            "autoscaling_max_nodes": self.max_nodes,
            "storage_usd_per_node_hour": _r(self.storage_per_node),
            "fixed_usd_per_hour": _r(self.fixed_hourly),
            "fixed": [
                {"item": f.item, "quantity": f.quantity, "unit": f.unit, "usd_per_hour": _r(f.usd_per_hour)}
                for f in self.fixed
            ],
            "options": {
                option: {
                    "compute_usd_per_node_hour": _r(self.compute_per_node[option]),
                    "usd_per_node_hour": _r(self.per_node_hourly(option)),
                    "usd_per_hour": _r(self.hourly(option)),
                    "usd_per_30_days": _r(self.thirty_days(option), 2),
                    "usd_per_gpu_hour": _r(self.per_gpu_hour(option)),
                    "usd_per_hour_at_max": _r(self.hourly(option, self.max_nodes)) if self.max_nodes else None,
                }
                for option in OPTIONS
            },
        }


def stack_cost(cfg: StackConfig, node_count: int | None = None, data: PurchaseData | None = None) -> StackCost:
    """Cost of `cfg` at its node count (or `node_count`, e.g. an autoscaling maximum)."""
    data = data or load_purchase_data()
    from gpuforge.core.catalog import load_catalog

    compute = compute_prices(cfg.instance, cfg.region, data)
    scaling = cfg.fleet.autoscaling
    storage_gb_month = _storage_gb_month(cfg.root_volume_gib, cfg.profile, load_catalog().storage.usd_per_gb_month)
    return StackCost(
        stack=cfg.stack,
        profile=cfg.profile.name,
        instance_type=cfg.instance.name,
        region=cfg.region,
        # an autoscaled stack is costed at its minimum (what runs with an empty queue)
        node_count=node_count if node_count is not None else (scaling.min_size if scaling else cfg.node_count),
        max_nodes=scaling.max_size if scaling else None,
        gpus_per_node=cfg.instance.gpu_count,
        role="training" if cfg.profile.bootstrap.recipe in TRAINING_RECIPES else "inference",
        compute_per_node=compute,
        storage_per_node=storage_gb_month / HOURS_PER_MONTH,
        fixed=platform_items(cfg),
    )


def compute_prices(instance: InstanceType, region: str, data: PurchaseData) -> dict[str, float | None]:
    """USD per node-hour under each option: the catalog's on-demand and spot, and the commitments."""
    offering = instance.offering(region)
    od = offering.on_demand_usd_per_hour if offering else None
    compute: dict[str, float | None] = {"on_demand": od, "spot": offering.spot_usd_per_hour if offering else None}
    for key in ("1y", "3y"):
        compute[key] = None if od is None else od * (1 - data.commitments[key].discount)
    return compute


def _storage_gb_month(root_gib: int, profile: Profile, prices: dict[str, float]) -> float:
    total = root_gib * prices["gp3"]
    dv = profile.storage.data_volume
    if dv is not None:
        total += dv.size_gib * prices[dv.type]
    return total


def shape_cost(profile: Profile, instance: InstanceType, region: str, node_count: int,
               data: PurchaseData | None = None) -> StackCost:
    """A catalog shape (type x nodes) costed as `stack_cost` costs a stack of the profile, with the
    profile's root and data volumes; a stack's fixed items (EKS, Slurm head, NAT) are left out, as
    they are the same whichever shape runs the GPUs (`catalog suggest --results` compares shapes)."""
    from gpuforge.core.catalog import load_catalog

    data = data or load_purchase_data()
    storage = _storage_gb_month(profile.storage.root_volume_gib, profile, load_catalog().storage.usd_per_gb_month)
    return StackCost(
        stack=f"{node_count}x {instance.name}", profile=profile.name, instance_type=instance.name, region=region,
        node_count=node_count, gpus_per_node=instance.gpu_count,
        role="training" if profile.bootstrap.recipe in TRAINING_RECIPES else "inference",
        compute_per_node=compute_prices(instance, region, data), storage_per_node=storage / HOURS_PER_MONTH,
    )


@dataclass(frozen=True)
class Hybrid:
    """The seeds' hybrid deployment over a set of stacks: training on spot, inference reserved."""

    choices: tuple[tuple[str, str], ...]  # (stack, option)
    on_demand_hourly: float | None
    hybrid_hourly: float | None
    claimed_saving: float
    source: str

    @property
    def saving(self) -> float | None:
        if self.on_demand_hourly is None or self.hybrid_hourly is None or self.on_demand_hourly == 0:
            return None
        return 1 - self.hybrid_hourly / self.on_demand_hourly

    def to_dict(self) -> dict[str, Any]:
        saving = self.saving
        return {
            "choices": {stack: option for stack, option in self.choices},
            "on_demand_usd_per_hour": _r(self.on_demand_hourly),
            "hybrid_usd_per_hour": _r(self.hybrid_hourly),
            "on_demand_usd_per_30_days": _r(_times(self.on_demand_hourly, HOURS_30_DAYS), 2),
            "hybrid_usd_per_30_days": _r(_times(self.hybrid_hourly, HOURS_30_DAYS), 2),
            "saving": _r(saving),
            "seed_claim": f"more than {self.claimed_saving:.0%} saved",
            "meets_seed_claim": None if saving is None else saving > self.claimed_saving,
            "source": self.source,
        }


def hybrid(costs: Sequence[StackCost], data: PurchaseData | None = None) -> Hybrid:
    data = data or load_purchase_data()
    choices = tuple((c.stack, data.hybrid_training if c.role == "training" else data.hybrid_inference) for c in costs)
    od = sum_or_none(c.hourly("on_demand") for c in costs)
    hy = sum_or_none(c.hourly(option) for c, (_, option) in zip(costs, choices, strict=True))
    return Hybrid(choices, od, hy, data.hybrid_claimed_saving, data.hybrid_source)


def sum_or_none(values: Iterable[float | None]) -> float | None:
    total = 0.0
    for value in values:
        if value is None:
            return None  # one unknown price makes the total unknown, never silently smaller
        total += value
    return total


def _times(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
