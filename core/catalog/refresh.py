"""`gpuforge catalog refresh`: rebuild the catalog files from the AWS APIs, keeping what they lack.

Sources, per field:
- instance facts (GPU count and memory, vCPU, RAM, baseline network, network cards, EFA,
  instance store): `ec2.describe_instance_types`;
- AZ IDs per region: `ec2.describe_instance_type_offerings` by `availability-zone-id`, and the
  region's regular AZ IDs from `describe_availability_zones` (Local/Wavelength Zones left out);
- on-demand USD/hour: the Pricing API (`get_products`, served from us-east-1 only);
- spot USD/hour: `describe_spot_price_history`, the lowest current price over regular AZs.
The GPU label (A100 vs A100-80GB), the family, the GPU interconnect and GPUDirect RDMA support
are facts no API gives: they are carried over from the existing catalog. Where an API is not
served, denied or unreachable, the old value is kept and the report names the field and why.

Files are written all or none: every file is rendered, parsed back with the catalog loader,
staged next to its target, and only then swapped in (with a rollback if a swap fails).

This module merges and checks: what the APIs answered into the catalog's rows, bounded against
the previous snapshot. The AWS calls are in aws_reads.py, the writing in writer.py, and the report
all three add to in refresh_report.py.
"""

from __future__ import annotations

import csv
import io
import re
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from gpuforge.common.errors import EXIT_CHECKS_FAILED, GpuforgeError
from gpuforge.core.catalog import CATALOG_DIR, load_catalog
from gpuforge.core.catalog import aws_reads as aws
from gpuforge.core.catalog.aws_reads import ClientFactory
from gpuforge.core.catalog.refresh_report import RefreshReport
from gpuforge.core.catalog.writer import meta_text, regions_text, write_all_or_none

COPIED_FILES = ("gpus.yaml", "regions.yaml", "storage_prices.yaml")
_GBIT = re.compile(r"(?:(\d+)x\s*)?([\d.]+)\s*Gigabit", re.I)


class RefreshError(GpuforgeError):
    """Nothing could be refreshed, or the result would not load: no file was written."""

    exit_code = EXIT_CHECKS_FAILED


# --- instance facts -----------------------------------------------------------------------------


def _baseline_gbps(net: dict[str, Any]) -> float | None:
    # The headline figure ("4x 100 Gigabit", "400 Gigabit") is the baseline when it is not "Up to":
    # per-card figures can be per-card peaks that do not add up to it (moto's g6e.48xlarge: 4x400).
    text = str(net.get("NetworkPerformance", ""))
    m = _GBIT.search(text)
    if m and not text.lower().startswith("up to"):
        return float(m.group(1) or 1) * float(m.group(2))
    # Burstable sizes ("Up to 25 Gigabit"): the cards carry the baseline (g4dn.xlarge: 5).
    cards = net.get("NetworkCards") or []
    base = [c.get("BaselineBandwidthInGbps") for c in cards]
    if cards and all(b is not None for b in base):
        return float(sum(base))
    return None


def _default_card(net: dict[str, Any]) -> dict[str, Any] | None:
    """The card that carries the primary interface (DefaultNetworkCardIndex, 0 when absent),
    when the API gives both its baseline and peak bandwidth."""
    index = net.get("DefaultNetworkCardIndex", 0)
    for card in net.get("NetworkCards") or []:
        if card.get("NetworkCardIndex", 0) == index:
            ok = all(isinstance(card.get(k), (int, float)) for k in ("BaselineBandwidthInGbps", "PeakBandwidthInGbps"))
            return card if ok else None
    return None


def _facts(api: dict[str, Any], old: dict[str, str], gpu_family: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """New CSV values for one type from its describe_instance_types entry; (field, why) for those kept."""
    new: dict[str, str] = {}
    kept: list[tuple[str, str]] = []
    gpus = (api.get("GpuInfo") or {}).get("Gpus") or []
    if not gpus:
        kept.append(("gpu_count/gpu_memory_gib", "the API reports no GPU for this type"))
    else:
        names = {g.get("Name") for g in gpus}
        if names != {gpu_family}:
            kept.append(("gpu_model", f"the API names the GPU {sorted(map(str, names))}, the catalog {gpu_family}"))
        new["gpu_count"] = str(sum(int(g.get("Count", 0)) for g in gpus))
        mib = (gpus[0].get("MemoryInfo") or {}).get("SizeInMiB")
        if mib:
            new["gpu_memory_gib"] = f"{mib / 1024:.2f}"
    vcpu_info = api.get("VCpuInfo") or {}
    vcpu = vcpu_info.get("DefaultVCpus")
    if vcpu:
        new["vcpus"] = str(vcpu)
    for column, key in (("cores", "DefaultCores"), ("threads_per_core", "DefaultThreadsPerCore")):
        if vcpu_info.get(key) and column in old:
            new[column] = str(vcpu_info[key])
    mem = (api.get("MemoryInfo") or {}).get("SizeInMiB")
    if mem:
        new["memory_gib"] = _fmt(mem / 1024)
    net = api.get("NetworkInfo") or {}
    gbps = _baseline_gbps(net)
    if gbps is None:
        kept.append(("network_gbps", f"no baseline in the API ({net.get('NetworkPerformance', 'none')!r})"))
    else:
        new["network_gbps"] = _fmt(gbps)
    if net.get("MaximumNetworkCards"):
        new["network_cards"] = str(net["MaximumNetworkCards"])
    card = _default_card(net)
    if card is None:
        kept.append(("card_baseline_gbps/card_peak_gbps", "the API lists no default network card"))
    else:
        new["card_baseline_gbps"] = _fmt(float(card["BaselineBandwidthInGbps"]))
        new["card_peak_gbps"] = _fmt(float(card["PeakBandwidthInGbps"]))
    if isinstance(net.get("EnaSrdSupported"), bool):
        new["ena_express"] = "true" if net["EnaSrdSupported"] else "false"
    else:
        kept.append(("ena_express", "the API does not say whether ENA Express (EnaSrdSupported) is supported"))
    efa = (net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0) if net.get("EfaSupported") else 0
    new["efa_interfaces"] = str(efa)
    disks = (api.get("InstanceStorageInfo") or {}).get("Disks") or []
    if api.get("InstanceStorageSupported") and disks:
        new["nvme_count"] = str(sum(int(d.get("Count", 0)) for d in disks))
        new["nvme_gb_each"] = str(max(int(d.get("SizeInGB", 0)) for d in disks))
    elif api.get("InstanceStorageSupported") is False:
        new["nvme_count"], new["nvme_gb_each"] = "0", "0"
    return new, kept


def _fmt(value: float) -> str:
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


# --- the refresh --------------------------------------------------------------------------------


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _write_csv(header: list[str], rows: list[dict[str, str]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def refresh_catalog(
    regions: list[str],
    out_dir: Path,
    source_dir: Path = CATALOG_DIR,
    clients: ClientFactory | None = None,
    now: datetime | None = None,
) -> RefreshReport:
    """Refresh the catalog in `source_dir` for `regions` and write it to `out_dir` (all files or none)."""
    clients = clients or aws.default_clients()
    now = now or datetime.now(timezone.utc)
    old = load_catalog(source_dir)
    report = RefreshReport(out_dir=Path(out_dir), regions=list(regions))
    type_header, type_rows = _read_csv(source_dir / "instance_types.csv")
    off_header, off_rows = _read_csv(source_dir / "offerings.csv")
    names = [r["instance_type"] for r in type_rows]

    _refresh_types(type_rows, regions, clients, report, {n: old.gpus[old.instance(n).gpu_model].family for n in names})
    regions_doc = yaml.safe_load((source_dir / "regions.yaml").read_text())
    off_rows = _refresh_offerings(off_rows, names, regions, clients, report, regions_doc, now)

    if not any(i.status in ("refreshed", "added", "removed") for i in report.items):
        reasons = "; ".join(sorted({f"{i.field}: {i.detail}" for i in report.kept()}))[:600]
        raise RefreshError(
            f"catalog refresh: no API answered, nothing was written ({reasons})",
            "check the credentials' permissions (ec2:Describe*, pricing:GetProducts) and the network",
        )

    texts = {
        "instance_types.csv": _write_csv(type_header, type_rows),
        "offerings.csv": _write_csv(off_header, off_rows),
        "regions.yaml": regions_text(source_dir / "regions.yaml", regions_doc),
        "meta.yaml": meta_text(source_dir / "meta.yaml", report, now),
    }
    for name in COPIED_FILES:
        texts.setdefault(name, (source_dir / name).read_text())
    _check_loads(texts)
    write_all_or_none({Path(out_dir) / name: text for name, text in texts.items()})
    report.written = sorted(texts)
    return report


def _refresh_types(
    rows: list[dict[str, str]], regions: list[str], clients: ClientFactory, report: RefreshReport, families: dict[str, str]
) -> None:
    found: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    for region in regions:  # a type missing in one region (p5e in eu-west-1) may be described in another
        missing = [r["instance_type"] for r in rows if r["instance_type"] not in found]
        if not missing:
            break
        try:
            ec2 = clients("ec2", region)
            for entry in aws.pages(
                ec2.describe_instance_types, "InstanceTypes", Filters=[{"Name": "instance-type", "Values": missing}]
            ):
                found.setdefault(entry["InstanceType"], entry)
        except aws.api_errors() as exc:
            errors.append(f"{region}: {aws.why(exc)}")
    if not found:
        report.add("instance facts", "all types", "kept", "describe_instance_types: " + "; ".join(errors))
        return
    for row in rows:
        name = row["instance_type"]
        if name not in found:
            report.add("instance facts", name, "kept", "describe_instance_types did not return this type")
            continue
        new, kept = _facts(found[name], row, families[name])
        changed = [f"{k} {row[k]} -> {v}" for k, v in new.items() if not _same(row[k], v)]
        row.update(new)
        report.add("instance facts", name, "refreshed", "; ".join(changed) or "unchanged")
        for fld, why in kept:
            report.add(fld, name, "kept", why)
    report.add(
        "interconnect, gpudirect_rdma, gpu_model",
        "all types",
        "kept",
        "no AWS API reports these; carried over from the existing catalog",
    )


def _refresh_offerings(
    rows: list[dict[str, str]],
    names: list[str],
    regions: list[str],
    clients: ClientFactory,
    report: RefreshReport,
    regions_doc: dict[str, Any],
    now: datetime,
) -> list[dict[str, str]]:
    by_key = {(r["instance_type"], r["region"]): r for r in rows}
    prices = aws.PriceLookup(clients, report)
    for region in regions:
        ec2 = clients("ec2", region)
        zones = aws.region_zones(ec2, region, report, regions_doc)
        offered = aws.offered_az_ids(ec2, region, names, zones, report)
        spot = aws.lowest_spot_prices(ec2, region, names, zones, report, now)
        for name in names:
            key = (name, region)
            row = by_key.get(key)
            if offered is not None and name not in offered:
                if row is not None:
                    del by_key[key]
                    report.add("offering", f"{name} {region}", "removed", "not offered in any AZ of the region")
                continue
            if row is None:
                if offered is None:
                    continue  # unknown whether it is offered: add nothing
                row = by_key[key] = {
                    "instance_type": name,
                    "region": region,
                    "on_demand_usd_per_hour": "",
                    "spot_usd_per_hour": "",
                    "az_ids": "",
                }
                report.add("offering", f"{name} {region}", "added", "newly offered in the region")
            if offered is not None:
                row["az_ids"] = ";".join(sorted(offered[name]))
            od = prices.on_demand(name, region)
            if od is not None and _plausible("on_demand_usd_per_hour", row, od, report):
                row["on_demand_usd_per_hour"] = _fmt(od)
            if spot is not None:
                price = spot.get(name)
                if price is None or _plausible("spot_usd_per_hour", row, price, report):
                    _set_spot(row, price, report)
    prices.summarise(regions)
    return list(by_key.values())


# Sanity bounds against the previous snapshot (issue 13 item 5): an emulator answered a spot
# price of 0.00001 $/h for a p4de.24xlarge and the old refresh wrote it. Real prices move, but
# not by 5x between snapshots, no GPU instance costs under a cent an hour, and no spot price is
# 95% off on-demand; a figure outside these bounds keeps the previous value and says so.
MAX_CHANGE = 5.0
MIN_USD_PER_HOUR = 0.01
MIN_SPOT_FRACTION = 0.05


def _plausible(fld: str, row: dict[str, str], new: float, report: RefreshReport) -> bool:
    scope = f"{row['instance_type']} {row['region']}"
    old = float(row[fld]) if row.get(fld) else None
    od = float(row["on_demand_usd_per_hour"]) if row.get("on_demand_usd_per_hour") else None
    why = None
    if new < MIN_USD_PER_HOUR:
        why = f"{new} $/h is below {MIN_USD_PER_HOUR} $/h"
    elif old is not None and not old / MAX_CHANGE <= new <= old * MAX_CHANGE:
        why = f"{new} $/h is more than {MAX_CHANGE:g}x away from the previous {old} $/h"
    elif fld == "spot_usd_per_hour" and od is not None and new < od * MIN_SPOT_FRACTION:
        why = f"spot {new} $/h is less than {MIN_SPOT_FRACTION:.0%} of on-demand {od} $/h"
    if why is None:
        return True
    report.add(fld, scope, "implausible", f"{why}: kept {row.get(fld) or 'no value'}")
    return False


def _set_spot(row: dict[str, str], price: float | None, report: RefreshReport) -> None:
    od = float(row["on_demand_usd_per_hour"]) if row["on_demand_usd_per_hour"] else None
    if price is not None and od is not None and price >= od:
        # A spot price at or above on-demand is no discount (aws-gpu-specs.md §6): record no spot price.
        report.add(
            "spot_usd_per_hour",
            f"{row['instance_type']} {row['region']}",
            "refreshed",
            f"lowest spot {price} >= on-demand {od}: left empty",
        )
        price = None
    row["spot_usd_per_hour"] = "" if price is None else _fmt(price)


def _check_loads(texts: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gpuforge-catalog-") as tmp:
        for name, text in texts.items():
            (Path(tmp) / name).write_text(text)
        try:
            load_catalog(Path(tmp))
        except (KeyError, ValueError, TypeError, yaml.YAMLError) as exc:
            raise RefreshError(
                f"catalog refresh: the refreshed catalog would not load ({exc}); nothing was written",
                "report this with the output of `--format json`",
            ) from None
