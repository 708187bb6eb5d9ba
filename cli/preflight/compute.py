"""Compute: the region's AZ IDs, where the instance type is offered, and whether the catalog's
facts about the type still match what EC2 says (a stale catalog skews quotas and thresholds)."""

from __future__ import annotations

from typing import Any

from gpuforge.common.results import CheckResult, Level
from gpuforge.preflight.aws import Unavailable
from gpuforge.preflight.context import Context
from gpuforge.preflight.outcome import result, unknown

CHECK_ZONES = "ec2.availability-zones"
CHECK_OFFERING = "ec2.offering"
CHECK_CONSISTENT = "ec2.offering-by-name"
CHECK_FACTS = "ec2.instance-type"
REFRESH = "run `gpuforge catalog refresh` to update the catalog"


def zones(ctx: Context) -> list[CheckResult]:
    """Live AZ IDs of the region (the ranking's candidates) and this account's name for each."""
    catalog_ids = ctx.catalog.region(ctx.region).az_ids
    answer = ctx.aws.call("ec2", "describe_availability_zones")
    if isinstance(answer, Unavailable):
        return [unknown(CHECK_ZONES, answer, list(catalog_ids))]  # candidates stay the catalog's
    live = {
        z["ZoneId"]: z["ZoneName"]
        for z in answer.get("AvailabilityZones", [])
        if z.get("ZoneType", "availability-zone") == "availability-zone" and z.get("State") == "available"
    }
    ctx.evidence.zone_names = live
    ctx.evidence.az_ids = tuple(sorted(live))
    if not live:
        return [result(CHECK_ZONES, Level.ERROR, [], list(catalog_ids), f"no available AZ in {ctx.region}")]
    extra, missing = sorted(set(live) - set(catalog_ids)), sorted(set(catalog_ids) - set(live))
    level = Level.PASS if not missing else Level.WARNING
    note = f"; not available now: {', '.join(missing)}" if missing else ""
    note += f"; not in the catalog: {', '.join(extra)}" if extra else ""
    return [result(CHECK_ZONES, level, sorted(live), list(catalog_ids),
                   f"{len(live)} AZ IDs available in {ctx.region}{note}")]


def _offered(ctx: Context, location_type: str) -> set[str] | Unavailable:
    answer = ctx.aws.call(
        "ec2", "describe_instance_type_offerings", LocationType=location_type,
        Filters=[{"Name": "instance-type", "Values": [ctx.instance.name]}],
    )
    if isinstance(answer, Unavailable):
        return answer
    # moto ignores paging; real EC2 returns one page for a single type, so NextToken is not followed.
    return {o["Location"] for o in answer.get("InstanceTypeOfferings", [])}


def offerings(ctx: Context) -> list[CheckResult]:
    name = ctx.instance.name
    catalog = ctx.instance.offering(ctx.region)
    catalog_ids = sorted(catalog.az_ids) if catalog else []
    by_id = _offered(ctx, "availability-zone-id")
    if isinstance(by_id, Unavailable):
        return [unknown(CHECK_OFFERING, by_id, catalog_ids)]
    # Only AZ IDs of the region's available zones count (the answer may name zones we filtered out).
    offered = sorted(by_id & set(ctx.evidence.az_ids)) if ctx.evidence.zone_names else sorted(by_id)
    ctx.evidence.offered = set(offered)
    out: list[CheckResult] = []
    stale = f"; the catalog says {', '.join(catalog_ids) or 'none'} ({REFRESH})" if offered != catalog_ids else ""
    if offered:
        out.append(result(CHECK_OFFERING, Level.PASS, offered, catalog_ids,
                          f"{name} is offered in {', '.join(offered)}{stale}", targets=tuple(offered)))
    else:
        out.append(result(CHECK_OFFERING, Level.ERROR, [], catalog_ids,
                          f"{name} is not offered in any AZ of {ctx.region}{stale}; pick another region or type"))
    out.extend(_cross_check_names(ctx, set(offered)))
    return out


def _cross_check_names(ctx: Context, by_id: set[str]) -> list[CheckResult]:
    """The same question asked by AZ name, mapped to IDs through this account's zone map."""
    if not ctx.evidence.zone_names:
        return []
    by_name = _offered(ctx, "availability-zone")
    if isinstance(by_name, Unavailable):
        return [unknown(CHECK_CONSISTENT, by_name, sorted(by_id))]
    name_to_id = {v: k for k, v in ctx.evidence.zone_names.items()}
    mapped = {name_to_id[n] for n in by_name if n in name_to_id}
    if mapped == by_id:
        return [result(CHECK_CONSISTENT, Level.PASS, sorted(mapped), sorted(by_id),
                       "offerings by AZ name agree with offerings by AZ ID")]
    # The choice uses the ID answer (AZ IDs are what the stack pins); the disagreement is worth a look.
    return [result(CHECK_CONSISTENT, Level.WARNING, sorted(mapped), sorted(by_id),
                   "offerings by AZ name (mapped to IDs) disagree with offerings by AZ ID; the AZ choice uses the "
                   "AZ ID answer")]


def _live_facts(it: dict[str, Any]) -> dict[str, Any]:
    gpus = it.get("GpuInfo", {}).get("Gpus", [])
    net = it.get("NetworkInfo", {})
    return {
        "gpu_count": sum(int(g.get("Count", 0)) for g in gpus),
        "gpu_memory_gib": (gpus[0].get("MemoryInfo", {}).get("SizeInMiB", 0) / 1024) if gpus else 0.0,
        "vcpus": int(it.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
        "memory_gib": it.get("MemoryInfo", {}).get("SizeInMiB", 0) / 1024,
        "efa_interfaces": int(net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)) if net.get("EfaSupported") else 0,
        "network_cards": int(net.get("MaximumNetworkCards", 1)),
    }


def instance_facts(ctx: Context) -> list[CheckResult]:
    it = ctx.instance
    answer = ctx.aws.call("ec2", "describe_instance_types", InstanceTypes=[it.name])
    expected = {"gpu_count": it.gpu_count, "gpu_memory_gib": it.gpu_memory_gib, "vcpus": it.vcpus,
                "memory_gib": it.memory_gib, "efa_interfaces": it.efa_interfaces, "network_cards": it.network_cards}
    if isinstance(answer, Unavailable):
        if answer.code == "InvalidInstanceType":
            return [result(CHECK_FACTS, Level.ERROR, None, expected,
                           f"EC2 does not know {it.name} in {ctx.region}; pick another type")]
        return [unknown(CHECK_FACTS, answer, expected)]
    types = answer.get("InstanceTypes", [])
    if not types:
        return [result(CHECK_FACTS, Level.ERROR, None, expected, f"EC2 returned no facts for {it.name}")]
    return [evaluate_facts(it.name, _live_facts(types[0]), expected)]


def evaluate_facts(name: str, live: dict[str, Any], expected: dict[str, Any]) -> CheckResult:
    diffs = [f"{k}: EC2 {live[k]:g}, catalog {expected[k]:g}" for k in expected if abs(live[k] - expected[k]) > 0.01]
    if not diffs:
        return result(CHECK_FACTS, Level.PASS, live, expected, f"EC2's facts for {name} match the catalog")
    # Deploys still work, but quota math and validate thresholds come from the catalog: fix it first.
    message = f"catalog is stale for {name}: {'; '.join(diffs)}; {REFRESH}"
    return result(CHECK_FACTS, Level.WARNING, live, expected, message)
