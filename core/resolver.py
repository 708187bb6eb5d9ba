"""From a profile's requirements to ranked AWS shapes (instance type × node count), explained.

`resolve(requirements, region)` enumerates every catalog type offered in the region, sizes each
to the fewest nodes that meet the GPU count, total RAM and `min_nodes`, and says in plain words
what each shape misses (`gaps`) and what it gives beyond the ask (`surpluses`). Shapes sort by
fit (no gaps first, then fewer gaps), then on-demand price. Pure: catalog data in, data out.
This module imports no Pulumi, so `validate` and the CLI can use it without the SDK.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpuforge.core.catalog import Catalog, GpuModel, InstanceType, did_you_mean, load_catalog
from gpuforge.core.config import MAX_NODES  # a shape needing more nodes than a stack may have is not offered
from gpuforge.core.profiles import Requirements

# AWS prices EBS per GB-month and instances per hour; its pricing pages convert with 730 h/month.
HOURS_PER_MONTH = 730

# Which per-GPU peak in gpus.yaml measures "faster" for each precision. int8 has no figure in
# the catalog, so no per-dollar claim is made for int8 profiles (never guess a peak).
_PEAK_FIELD = {"fp64": "fp64_tflops", "fp32": "fp32_tflops", "fp16": "fp16_tensor_tflops"}
_INTERCONNECT_WORDS = {"none": "no GPU interconnect", "pcie": "PCIe only", "nvlink": "NVLink", "nvswitch": "NVSwitch"}


class ResolveError(ValueError):
    """A requirement the resolver cannot work with (e.g. a GPU model the catalog does not know)."""


@dataclass
class Candidate:
    instance_type: str
    node_count: int
    gpu_model: str
    gpus_total: int
    on_demand_usd_per_hour: float | None  # compute for all nodes, plus st1 storage when the profile asks for HDD
    spot_usd_per_hour: float | None
    storage_usd_per_hour: float
    az_ids: tuple[str, ...]
    node_reason: str
    gaps: list[str] = field(default_factory=list)
    surpluses: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    faster_per_dollar: bool = False

    @property
    def fit(self) -> str:
        return "exact" if not self.gaps else "gaps"

    @property
    def label(self) -> str:
        return f"{self.node_count}× {self.instance_type}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "node_count": self.node_count,
            "fit": self.fit,
            "gpu_model": self.gpu_model,
            "gpus_total": self.gpus_total,
            "on_demand_usd_per_hour": _round(self.on_demand_usd_per_hour),
            "spot_usd_per_hour": _round(self.spot_usd_per_hour),
            "storage_usd_per_hour": _round(self.storage_usd_per_hour),
            "az_ids": list(self.az_ids),
            "node_reason": self.node_reason,
            "gaps": self.gaps,
            "surpluses": self.surpluses,
            "notes": self.notes,
            "faster_per_dollar": self.faster_per_dollar,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _num(value: float) -> str:
    return f"{value:g}"


def resolve(req: Requirements, region: str, catalog: Catalog | None = None) -> list[Candidate]:
    """Every deployable shape in `region`, best first. Raises ResolveError on an unknown GPU model."""
    catalog = catalog or load_catalog()
    if req.gpu_model not in catalog.gpus:
        raise ResolveError(f"GPU model {req.gpu_model!r} is not in the catalog{did_you_mean(req.gpu_model, catalog.gpus)}")
    catalog.region(region)  # KeyError with a suggestion for an unknown region
    wanted = catalog.gpus[req.gpu_model]
    out = []
    for it in catalog.instance_types.values():
        cand = _candidate(req, wanted, it, region, catalog)
        if cand is not None:
            out.append(cand)
    _compare_per_dollar(req, wanted, out, catalog)
    out.sort(key=_sort_key)
    _compare_to_best(out)
    return out


def best_exact(req: Requirements, region: str, catalog: Catalog | None = None) -> Candidate | None:
    return next((c for c in resolve(req, region, catalog) if c.fit == "exact"), None)


def _sort_key(c: Candidate) -> tuple[int, int, float, str]:
    price = c.on_demand_usd_per_hour if c.on_demand_usd_per_hour is not None else math.inf
    return (0 if not c.gaps else 1, len(c.gaps), price, c.instance_type)


def _one_domain(req: Requirements) -> bool:
    # A pcie or nvlink requirement asks for GPUs that talk inside one host, not over the network.
    return req.interconnect in ("pcie", "nvlink") and req.gpus > 1


def _node_count(req: Requirements, it: InstanceType) -> tuple[int, str]:
    by_gpus = 1 if _one_domain(req) and it.gpu_count >= req.gpus else math.ceil(req.gpus / it.gpu_count)
    by_ram = math.ceil(req.ram_gib / it.memory_gib) if req.ram_gib else 1
    nodes = max(by_gpus, by_ram, req.min_nodes)
    reasons = []
    if nodes == by_gpus and by_gpus > 1:
        reasons.append(f"{req.gpus} GPUs")
    if nodes == by_ram and by_ram > 1:
        reasons.append(f"{_num(req.ram_gib)} GiB RAM in total")
    if nodes == req.min_nodes and req.min_nodes > 1:
        reasons.append(f"min_nodes {req.min_nodes}")
    return nodes, ", ".join(reasons) or "one node meets the requirements"


def _candidate(req: Requirements, wanted: GpuModel, it: InstanceType, region: str, catalog: Catalog) -> Candidate | None:
    offering = it.offering(region)
    if offering is None:  # not sold in this region: not a shape the user can deploy here
        return None
    nodes, reason = _node_count(req, it)
    if nodes > MAX_NODES:
        return None
    storage = nodes * req.hdd_gb * catalog.storage.usd_per_gb_month["st1"] / HOURS_PER_MONTH if req.hdd_gb else 0.0
    od = None if offering.on_demand_usd_per_hour is None else nodes * offering.on_demand_usd_per_hour + storage
    spot = None if offering.spot_usd_per_hour is None else nodes * offering.spot_usd_per_hour + storage
    c = Candidate(
        instance_type=it.name,
        node_count=nodes,
        gpu_model=it.gpu_model,
        gpus_total=nodes * it.gpu_count,
        on_demand_usd_per_hour=od,
        spot_usd_per_hour=spot,
        storage_usd_per_hour=storage,
        az_ids=offering.az_ids,
        node_reason=reason,
    )
    _check_gpu(req, wanted, it, c, catalog)
    _check_interconnect(req, it, c)
    _check_host(req, it, c)
    if offering.on_demand_usd_per_hour is None:
        c.notes.append(f"{it.name} has no on-demand price in {region} (sold through Capacity Blocks or spot only)")
    if req.hdd_gb:
        c.notes.append(
            f"{req.hdd_gb} GB HDD: AWS instances have no HDD instance store; met by a {req.hdd_gb} GB st1 EBS volume "
            f"per node (${storage:.2f}/h for {nodes} node(s), included in the price)"
        )
    return c


def _check_gpu(req: Requirements, wanted: GpuModel, it: InstanceType, c: Candidate, cat: Catalog) -> None:
    gpu = cat.gpu(it)
    if gpu.family != wanted.family:
        c.gaps.append(f"{it.gpu_model}, not {req.gpu_model}: {it.name} has {it.gpu_count}×{it.gpu_model}")
    if it.gpu_memory_gib < req.gpu_memory_gib:
        c.gaps.append(f"{it.gpu_model} {_num(it.gpu_memory_gib)} GiB < {_num(req.gpu_memory_gib)} GiB per GPU")
    elif gpu.family == wanted.family and it.gpu_memory_gib > req.gpu_memory_gib:
        c.surpluses.append(f"{it.gpu_model} has {_num(it.gpu_memory_gib)} GiB per GPU, {_num(req.gpu_memory_gib)} needed")
    extra = c.gpus_total - req.gpus
    if extra > 0:
        has_exact = any(t.gpu_model == it.gpu_model and t.gpu_count == req.gpus for t in cat.instance_types.values())
        lead = f"no AWS instance has {req.gpus}×{it.gpu_model}; " if not has_exact else ""
        have = f"{it.name} has {it.gpu_count}" if c.node_count == 1 else f"{c.label} have {c.gpus_total}"
        c.surpluses.append(f"{lead}{have} ({extra} more than needed)")


def _check_interconnect(req: Requirements, it: InstanceType, c: Candidate) -> None:
    if not _one_domain(req):
        return
    if it.gpu_count < req.gpus:
        c.gaps.append(
            f"{req.gpus} GPUs needed on one {req.interconnect.upper() if req.interconnect == 'pcie' else 'NVLink'} "
            f"domain; {it.name} has {it.gpu_count} per node, so the GPUs talk over the network between nodes"
        )
    elif req.interconnect == "nvlink" and it.interconnect not in ("nvlink", "nvswitch"):
        c.gaps.append(f"NVLink needed; {it.name} has {_INTERCONNECT_WORDS[it.interconnect]}")
    elif req.interconnect == "nvlink" and it.interconnect == "nvswitch" and it.gpu_count > req.gpus:
        c.notes.append(f"NVSwitch: any {req.gpus} of the {it.gpu_count} GPUs get full all-to-all NVLink bandwidth")


def _check_host(req: Requirements, it: InstanceType, c: Candidate) -> None:
    if req.network_gbps:
        if it.network_gbps < req.network_gbps:
            c.gaps.append(f"{_num(it.network_gbps)} Gbps per node < {_num(req.network_gbps)} Gbps needed")
        elif it.network_gbps > req.network_gbps:
            c.surpluses.append(f"{_num(it.network_gbps)} Gbps per node, {_num(req.network_gbps)} needed")
    if req.nvme_gb:
        if it.nvme_total_gb < req.nvme_gb:
            have = f"{it.nvme_count}×{it.nvme_gb_each} GB" if it.nvme_count else "no instance-store NVMe"
            c.gaps.append(f"{have} per node < {req.nvme_gb} GB NVMe needed")
        elif it.nvme_total_gb > req.nvme_gb:
            c.surpluses.append(f"{it.nvme_count}×{it.nvme_gb_each} GB NVMe per node, {req.nvme_gb} GB needed")
    if req.ram_gib:
        total = c.node_count * it.memory_gib
        if total > req.ram_gib:
            c.surpluses.append(f"{_num(total)} GiB RAM in total, {_num(req.ram_gib)} needed")
    if req.rdma:
        if not it.efa:
            c.gaps.append(f"RDMA needed; {it.name} has no EFA (AWS offers no InfiniBand: EFA is its RDMA fabric)")
        else:
            direct = "with" if it.gpudirect_rdma else "without"
            c.notes.append(f"RDMA over EFA ({it.efa_interfaces} interface(s), {direct} GPUDirect RDMA); no InfiniBand on AWS")


def _compare_to_best(ranked: list[Candidate]) -> None:
    """A shape with gaps that costs less than the best exact fit is a trade-off worth naming."""
    best = next((c for c in ranked if not c.gaps and c.on_demand_usd_per_hour), None)
    if best is None or best.on_demand_usd_per_hour is None:
        return
    for c in ranked:
        if not c.gaps or c.on_demand_usd_per_hour is None or c.on_demand_usd_per_hour >= best.on_demand_usd_per_hour:
            continue
        text = f"{1 - c.on_demand_usd_per_hour / best.on_demand_usd_per_hour:.0%} cheaper on-demand than {best.label}"
        text += " (the best exact fit)"
        if c.spot_usd_per_hour is not None and best.spot_usd_per_hour:
            saving = 1 - c.spot_usd_per_hour / best.spot_usd_per_hour
            text += f", {saving:.0%} cheaper on spot" if saving > 0 else f", {-saving:.0%} dearer on spot"
        c.notes.append(f"{text}, if its gaps are acceptable")


def _peak(gpu: GpuModel, precision: str) -> float | None:
    name = _PEAK_FIELD.get(precision)
    value = getattr(gpu, name) if name else None
    return float(value) if value is not None else None


def _compare_per_dollar(req: Requirements, wanted: GpuModel, cands: list[Candidate], cat: Catalog) -> None:
    """For other GPU models, say when they give more of the profile's precision per dollar.

    The baseline is the cheapest shape with the requested GPU family that has no other gaps, so
    the comparison is against what the user would otherwise buy.
    """
    if req.precision not in _PEAK_FIELD:
        return
    same = [c for c in cands if cat.gpus[c.gpu_model].family == wanted.family and c.on_demand_usd_per_hour]
    if not same:
        return
    base = min(same, key=_sort_key)
    base_peak = _peak(cat.gpus[base.gpu_model], req.precision)
    if base_peak is None or base.on_demand_usd_per_hour is None:
        return
    base_rate = base_peak * base.gpus_total / base.on_demand_usd_per_hour
    unit = req.precision.upper() + (" tensor" if req.precision == "fp16" else "")
    for c in cands:
        gpu = cat.gpus[c.gpu_model]
        peak = _peak(gpu, req.precision)
        if gpu.family == wanted.family or peak is None or not c.on_demand_usd_per_hour:
            continue
        rate = peak * c.gpus_total / c.on_demand_usd_per_hour
        if rate <= base_rate:
            continue
        c.faster_per_dollar = True
        text = (
            f"{c.gpu_model} gives {rate:.1f} {unit} TFLOPS per $/h on-demand vs {base_rate:.1f} for "
            f"{base.label} ({base.gpu_model}): {rate / base_rate:.1f}× per dollar"
        )
        if req.precision == "fp64" and gpu.fp64_tensor_tflops:
            text += f" ({gpu.fp64_tensor_tflops * c.gpus_total / c.on_demand_usd_per_hour:.1f} with FP64 tensor cores)"
        text += _price_words(c, base)
        c.notes.append(text)


def _price_words(c: Candidate, base: Candidate) -> str:
    assert c.on_demand_usd_per_hour is not None and base.on_demand_usd_per_hour is not None
    words = (
        f"; cheaper on-demand (${c.on_demand_usd_per_hour:.2f}/h vs ${base.on_demand_usd_per_hour:.2f}/h)"
        if c.on_demand_usd_per_hour < base.on_demand_usd_per_hour
        else f"; dearer on-demand (${c.on_demand_usd_per_hour:.2f}/h vs ${base.on_demand_usd_per_hour:.2f}/h)"
    )
    if c.spot_usd_per_hour is not None and base.spot_usd_per_hour is not None:
        side = "cheaper" if c.spot_usd_per_hour < base.spot_usd_per_hour else "dearer"
        words += f", {side} on spot (${c.spot_usd_per_hour:.2f}/h vs ${base.spot_usd_per_hour:.2f}/h)"
    return words
