"""Spot stacks only: recent spot prices and spot placement scores per AZ ID.

Prices break ties in the AZ ranking (cheaper first); a score says how likely the whole request
is to be filled in one AZ (1-10). Both are advice: neither blocks a deploy.
"""

from __future__ import annotations

from datetime import datetime, timezone

from gpuforge.common.results import CheckResult, Level
from gpuforge.preflight.aws import Unavailable
from gpuforge.preflight.context import Context
from gpuforge.preflight.outcome import result, unknown

CHECK_PRICE = "spot.price"
CHECK_SCORE = "spot.placement-score"


def prices(ctx: Context) -> list[CheckResult]:
    name = ctx.instance.name
    answer = ctx.aws.call(
        "ec2", "describe_spot_price_history", InstanceTypes=[name], ProductDescriptions=["Linux/UNIX"],
        StartTime=datetime.now(timezone.utc), MaxResults=100,
    )
    cap = ctx.cfg.fleet.spot_max_price
    if isinstance(answer, Unavailable):
        return [unknown(CHECK_PRICE, answer, cap)]
    name_to_id = {v: k for k, v in ctx.evidence.zone_names.items()}
    latest: dict[str, tuple[datetime, float]] = {}
    for entry in answer.get("SpotPriceHistory", []):
        az = name_to_id.get(entry.get("AvailabilityZone", ""))
        if az is None:
            continue
        when, price = entry["Timestamp"], float(entry["SpotPrice"])
        if az not in latest or when > latest[az][0]:
            latest[az] = (when, price)
    ctx.evidence.spot_price = {az: p for az, (_, p) in latest.items()}
    if not latest:
        return [result(CHECK_PRICE, Level.WARNING, {}, cap, f"no spot price history for {name} in {ctx.region}")]
    observed = dict(sorted(ctx.evidence.spot_price.items()))
    cheapest = min(observed, key=lambda az: observed[az])
    return [result(CHECK_PRICE, Level.INFO, observed, cap,
                   f"latest spot USD/hour per AZ ID; cheapest {cheapest} at {observed[cheapest]:g}",
                   targets=tuple(observed))]


def placement_scores(ctx: Context) -> list[CheckResult]:
    answer = ctx.aws.call(
        "ec2", "get_spot_placement_scores", InstanceTypes=[ctx.instance.name], TargetCapacity=ctx.cfg.node_count,
        TargetCapacityUnitType="units", SingleAvailabilityZone=True, RegionNames=[ctx.region],
    )
    if isinstance(answer, Unavailable):
        return [unknown(CHECK_SCORE, answer, "score per AZ ID (1-10)")]
    scores = {s["AvailabilityZoneId"]: int(s["Score"]) for s in answer.get("SpotPlacementScores", [])
              if s.get("AvailabilityZoneId")}
    if not scores:
        return [result(CHECK_SCORE, Level.WARNING, {}, "score per AZ ID (1-10)", "no placement score returned")]
    best = max(scores, key=lambda az: scores[az])
    return [result(CHECK_SCORE, Level.INFO, dict(sorted(scores.items())), "score per AZ ID (1-10)",
                   f"{ctx.cfg.node_count} × {ctx.instance.name} spot in one AZ: best {best} ({scores[best]}/10)",
                   targets=tuple(sorted(scores)))]
