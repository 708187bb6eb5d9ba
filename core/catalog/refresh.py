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
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from gpuforge.common.errors import EXIT_CHECKS_FAILED, GpuforgeError, InputError
from gpuforge.core.catalog import CATALOG_DIR, load_catalog

PRICING_REGION = "us-east-1"  # the Pricing API has endpoints in us-east-1 (and few others), not per region
MAX_PAGES = 50  # every paginated call is bounded: a misbehaving endpoint cannot loop us forever
COPIED_FILES = ("gpus.yaml", "regions.yaml", "storage_prices.yaml")
_REGULAR_AZ_ID = re.compile(r"[a-z]+\d-az\d+")  # use1-az4; Local Zones look like usw2-lax1-az1
_GBIT = re.compile(r"(?:(\d+)x\s*)?([\d.]+)\s*Gigabit", re.I)


class RefreshError(GpuforgeError):
    """Nothing could be refreshed, or the result would not load: no file was written."""

    exit_code = EXIT_CHECKS_FAILED


@dataclass(frozen=True)
class Item:
    field: str
    scope: str
    status: str  # refreshed | kept | added | removed
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "scope": self.scope, "status": self.status, "detail": self.detail}


@dataclass
class RefreshReport:
    out_dir: Path
    regions: list[str]
    items: list[Item] = field(default_factory=list)
    written: list[str] = field(default_factory=list)

    def add(self, fld: str, scope: str, status: str, detail: str = "") -> None:
        self.items.append(Item(fld, scope, status, detail))

    def kept(self) -> list[Item]:
        return [i for i in self.items if i.status == "kept"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "out_dir": str(self.out_dir),
            "regions": self.regions,
            "written": self.written,
            "items": [i.to_dict() for i in self.items],
        }


ClientFactory = Callable[[str, str], Any]  # (service, region) -> boto3 client


def _default_clients() -> ClientFactory:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

    session = boto3.Session()
    if session.get_credentials() is None:
        raise InputError(
            "catalog refresh needs AWS credentials and found none",
            "run `aws configure` or `aws sso login`, or set AWS_PROFILE / AWS_ACCESS_KEY_ID",
        )
    # Bounded (issue 13 item 2): one call costs at most 2 x (5 + 20) s, and an endpoint that timed
    # out or refused once is not asked again (its later calls fail at once and their fields are
    # kept), so a stalled endpoint costs one call's bound, not one per region, type and page.
    config = Config(retries={"total_max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=20)
    dead: dict[str, str] = {}

    def make(service: str, region: str) -> Any:
        client = session.client(service, region_name=region, config=config)  # type: ignore[call-overload]
        url = str(client.meta.endpoint_url)

        def before(**_: Any) -> None:
            if url in dead:
                raise EndpointConnectionError(endpoint_url=f"{url} (not asked again: {dead[url]})")

        def after_error(exception: Exception, **_: Any) -> None:
            if isinstance(exception, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
                dead.setdefault(url, str(exception))

        client.meta.events.register("before-call", before)
        client.meta.events.register("after-call-error", after_error)
        return client

    return make


def _why(exc: Exception) -> str:
    """One line for the report: what went wrong with the call, in words a user can act on."""
    from botocore.exceptions import ClientError
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", "?"))
        if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
            return f"{code}: not allowed for these credentials"
        if code.isdigit():
            return f"not served by this endpoint (HTTP {code})"
        return f"{code}: {str(err.get('Message', ''))[:160]}"
    if isinstance(exc, ResponseParserError):
        return "not served by this endpoint (the reply was not an API response)"
    return f"{type(exc).__name__}: {str(exc)[:160]}"


def _api_errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError  # not a BotoCoreError: moto's HTML 500 on EC2 raises it

    return (ClientError, BotoCoreError, ResponseParserError)


def _pages(call: Callable[..., dict[str, Any]], key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    token = None
    for _ in range(MAX_PAGES):
        page = call(**kwargs, **({"NextToken": token} if token else {}))
        yield from page.get(key, [])
        token = page.get("NextToken")
        if not token:
            return


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
    vcpu = (api.get("VCpuInfo") or {}).get("DefaultVCpus")
    if vcpu:
        new["vcpus"] = str(vcpu)
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
    clients = clients or _default_clients()
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
        "regions.yaml": _regions_text(source_dir / "regions.yaml", regions_doc),
        "meta.yaml": _meta_text(source_dir / "meta.yaml", report, now),
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
            for entry in _pages(
                ec2.describe_instance_types, "InstanceTypes", Filters=[{"Name": "instance-type", "Values": missing}]
            ):
                found.setdefault(entry["InstanceType"], entry)
        except _api_errors() as exc:
            errors.append(f"{region}: {_why(exc)}")
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
    prices = _PriceLookup(clients, report)
    for region in regions:
        ec2 = clients("ec2", region)
        zones = _zones(ec2, region, report, regions_doc)
        offered = _offered(ec2, region, names, zones, report)
        spot = _spot(ec2, region, names, zones, report, now)
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


def _zones(ec2: Any, region: str, report: RefreshReport, regions_doc: dict[str, Any]) -> dict[str, str] | None:
    """AZ name -> AZ ID for the region's regular AZs; also refreshes regions.yaml's az_ids."""
    try:
        azs = ec2.describe_availability_zones()["AvailabilityZones"]
    except _api_errors() as exc:
        report.add("az_ids (region)", region, "kept", f"describe_availability_zones: {_why(exc)}")
        return None
    zones = {z["ZoneName"]: z["ZoneId"] for z in azs if z.get("ZoneType", "availability-zone") == "availability-zone"}
    regions_doc["regions"][region]["az_ids"] = sorted(zones.values())
    report.add("az_ids (region)", region, "refreshed", ",".join(sorted(zones.values())))
    report.add("s3express_az_ids", region, "kept", "no API lists S3 Express One Zone AZs; carried over")
    return zones


def _offered(
    ec2: Any, region: str, names: list[str], zones: dict[str, str] | None, report: RefreshReport
) -> dict[str, set[str]] | None:
    try:
        entries = list(
            _pages(
                ec2.describe_instance_type_offerings,
                "InstanceTypeOfferings",
                LocationType="availability-zone-id",
                Filters=[{"Name": "instance-type", "Values": names}],
            )
        )
    except _api_errors() as exc:
        report.add("az_ids", region, "kept", f"describe_instance_type_offerings: {_why(exc)}")
        return None
    regular = set(zones.values()) if zones is not None else None
    out: dict[str, set[str]] = {}
    for e in entries:
        az = e["Location"]
        if (regular is not None and az not in regular) or not _REGULAR_AZ_ID.fullmatch(az):
            continue  # Local and Wavelength Zones are not places a cluster placement group goes
        out.setdefault(e["InstanceType"], set()).add(az)
    report.add("az_ids", region, "refreshed", f"{len(out)} of {len(names)} types offered")
    return out


def _spot(
    ec2: Any, region: str, names: list[str], zones: dict[str, str] | None, report: RefreshReport, now: datetime
) -> dict[str, float] | None:
    if zones is None:
        report.add("spot_usd_per_hour", region, "kept", "AZs unknown, so regular AZs cannot be told from Local Zones")
        return None
    try:
        entries = list(
            _pages(
                ec2.describe_spot_price_history,
                "SpotPriceHistory",
                InstanceTypes=names,
                ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
                StartTime=now,
            )
        )
    except _api_errors() as exc:
        report.add("spot_usd_per_hour", region, "kept", f"describe_spot_price_history: {_why(exc)}")
        return None
    low: dict[str, float] = {}
    for e in entries:
        if e.get("AvailabilityZone") not in zones:
            continue
        price = float(e["SpotPrice"])
        low[e["InstanceType"]] = min(price, low.get(e["InstanceType"], price))
    report.add("spot_usd_per_hour", region, "refreshed", f"lowest regular-AZ price for {len(low)} types")
    return low


class _PriceLookup:
    """On-demand Linux/shared-tenancy prices from the Pricing API; stops at the first refusal."""

    def __init__(self, clients: ClientFactory, report: RefreshReport) -> None:
        self._clients = clients
        self._report = report
        self._client: Any = None
        self._failed: str | None = None
        self._found = 0
        self._missing: list[str] = []

    def on_demand(self, name: str, region: str) -> float | None:
        if self._failed is not None:
            return None
        filters = {
            "instanceType": name,
            "regionCode": region,
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
            "licenseModel": "No License required",
        }
        try:
            if self._client is None:
                self._client = self._clients("pricing", PRICING_REGION)
            reply = self._client.get_products(
                ServiceCode="AmazonEC2",
                MaxResults=10,
                Filters=[{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
            )
        except _api_errors() as exc:
            # One refusal means the API is unusable here; asking 160 more times would only be slow.
            self._failed = f"pricing.get_products: {_why(exc)}"
            return None
        price = _usd_per_hour(reply.get("PriceList", []))
        if price is None:
            self._missing.append(f"{name} {region}")
        else:
            self._found += 1
        return price

    def summarise(self, regions: list[str]) -> None:
        scope = ", ".join(regions)
        if self._failed is not None:
            self._report.add("on_demand_usd_per_hour", scope, "kept", self._failed)
            return
        self._report.add("on_demand_usd_per_hour", scope, "refreshed", f"{self._found} prices")
        for key in self._missing:
            self._report.add("on_demand_usd_per_hour", key, "kept", "no matching product in the Pricing API")


def _usd_per_hour(price_list: list[Any]) -> float | None:
    for item in price_list:
        doc = json.loads(item) if isinstance(item, str) else item
        for term in (doc.get("terms", {}).get("OnDemand") or {}).values():
            for dim in (term.get("priceDimensions") or {}).values():
                usd = (dim.get("pricePerUnit") or {}).get("USD")
                if usd is not None and dim.get("unit", "Hrs") == "Hrs" and float(usd) > 0:
                    return float(usd)
    return None


# --- writing ------------------------------------------------------------------------------------


def _header_comments(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


def _dump_yaml(path: Path, doc: dict[str, Any]) -> str:
    # The header comment says where the data comes from; keep it when the body is rewritten.
    return _header_comments(path) + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100, default_flow_style=None)


def _regions_text(path: Path, doc: dict[str, Any]) -> str:
    # Unchanged AZ lists: keep the file byte for byte (its comments and layout), so a refresh diff shows news only.
    return path.read_text() if yaml.safe_load(path.read_text()) == doc else _dump_yaml(path, doc)


def _meta_text(path: Path, report: RefreshReport, now: datetime) -> str:
    doc = yaml.safe_load(path.read_text())
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    doc["refreshed"] = {
        "at": now.isoformat(timespec="seconds"),
        "regions": report.regions,
        "endpoint": endpoint or "AWS",
        "refreshed": sorted({i.field for i in report.items if i.status in ("refreshed", "added", "removed")}),
        "kept": [i.to_dict() for i in report.kept()],
    }
    return _dump_yaml(path, doc)


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


def write_all_or_none(files: dict[Path, str]) -> None:
    """Write every file or none: stage each next to its target, then swap them in, undoing on failure.

    This is common.results.atomic_write for a set of files: a single atomic_write per file would
    leave a mixed old/new catalog if the third of five writes failed.
    """
    staged: dict[Path, Path] = {}
    backups: dict[Path, Path] = {}
    swapped: list[Path] = []
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            staged[path] = Path(tmp_name)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
        for path in files:
            if path.exists():
                fd, bak = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".bak")
                os.close(fd)
                shutil.copy2(path, bak)
                backups[path] = Path(bak)
        try:
            for path, staged_file in staged.items():
                os.replace(staged_file, path)
                swapped.append(path)
        except BaseException:
            for path in swapped:  # put back what was there before this refresh
                if path in backups:
                    os.replace(backups.pop(path), path)
                else:
                    path.unlink(missing_ok=True)
            raise
    finally:
        for leftover in [*staged.values(), *backups.values()]:
            leftover.unlink(missing_ok=True)
