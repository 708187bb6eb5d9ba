"""Capacity: reservations (ODCRs and Capacity Blocks) for the type, and an opt-in capacity probe.

A dry run cannot find InsufficientInstanceCapacity (AWS checks only permissions on DryRun), so
the probe does what the provisioning anchors suggest (§7 gap 3): create a targeted On-Demand
Capacity Reservation for the stack's node count in an AZ and cancel it at once. It succeeds only
if the capacity exists now, and it is billed for the seconds it lives, hence opt-in.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuforge.common.results import CheckResult, Level
from gpuforge.preflight.aws import Unavailable
from gpuforge.preflight.context import Context
from gpuforge.preflight.outcome import result, unknown

CHECK_RESERVATIONS = "capacity.reservations"
CHECK_PROBE = "capacity.probe"
PROBE_MAX_AZS = 3  # bounded: each probe is a billed reservation for a moment
NO_CAPACITY_CODES = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity"})


def reservations(ctx: Context) -> list[CheckResult]:
    answer = ctx.aws.call(
        "ec2", "describe_capacity_reservations",
        Filters=[{"Name": "instance-type", "Values": [ctx.instance.name]}, {"Name": "state", "Values": ["active"]}],
    )
    expected = {"instances": ctx.cfg.node_count}
    if isinstance(answer, Unavailable):
        return [unknown(CHECK_RESERVATIONS, answer, expected)]
    free: dict[str, int] = {}
    targeted: list[str] = []
    name_to_id = {v: k for k, v in ctx.evidence.zone_names.items()}
    for cr in answer.get("CapacityReservations", []):
        az = cr.get("AvailabilityZoneId") or name_to_id.get(cr.get("AvailabilityZone", ""))
        if not az:
            continue
        free[az] = free.get(az, 0) + int(cr.get("AvailableInstanceCount", 0))
        if cr.get("InstanceMatchCriteria") == "targeted":
            targeted.append(cr.get("CapacityReservationId", "?"))
    ctx.evidence.reserved = free
    return [evaluate_reservations(ctx.instance.name, ctx.cfg.node_count, free, targeted)]


def evaluate_reservations(name: str, nodes: int, free: dict[str, int], targeted: Iterable[str]) -> CheckResult:
    expected = {"instances": nodes}
    if not free:
        return result(CHECK_RESERVATIONS, Level.INFO, {}, expected,
                      f"no active reservation or Capacity Block for {name}: on-demand capacity is not guaranteed")
    covering = sorted(az for az, n in free.items() if n >= nodes)
    note = (f"; targeted reservations ({', '.join(sorted(targeted))}) are used only by launches that name them"
            if targeted else "")
    if covering:
        return result(CHECK_RESERVATIONS, Level.PASS, free, expected,
                      f"reserved capacity for {nodes} × {name} in {', '.join(covering)}{note}",
                      targets=tuple(covering))
    return result(CHECK_RESERVATIONS, Level.INFO, free, expected,
                  f"reservations for {name} exist but none has {nodes} free instances in one AZ{note}")


def probe(ctx: Context, order: list[str]) -> list[CheckResult]:
    """Probe AZs in ranked order until one has capacity; ICE AZs are recorded for re-ranking."""
    out: list[CheckResult] = []
    for az in order[:PROBE_MAX_AZS]:
        r = _probe_one(ctx, az)
        out.append(r)
        if r.level is Level.PASS:
            break
    return out


def _probe_one(ctx: Context, az: str) -> CheckResult:
    n, name = ctx.cfg.node_count, ctx.instance.name
    zone = ctx.evidence.zone_names.get(az)
    expected = f"{n} × {name} available now"
    if zone is None:
        return result(CHECK_PROBE, Level.UNKNOWN, None, expected, f"no AZ name known for {az}", targets=(az,))
    answer = ctx.aws.call(
        "ec2", "create_capacity_reservation", InstanceType=name, InstancePlatform="Linux/UNIX",
        AvailabilityZone=zone, InstanceCount=n, EndDateType="unlimited", InstanceMatchCriteria="targeted",
        TagSpecifications=[{"ResourceType": "capacity-reservation",
                            "Tags": [{"Key": "gpuforge:probe", "Value": ctx.stack}]}],
    )
    if isinstance(answer, Unavailable):
        if answer.code in NO_CAPACITY_CODES:
            ctx.evidence.no_capacity.add(az)
            return result(CHECK_PROBE, Level.ERROR, answer.code, expected,
                          f"no capacity for {n} × {name} in {az} now ({answer.reason})", targets=(az,))
        return unknown(CHECK_PROBE, answer, expected, targets=(az,))
    cr_id = answer.get("CapacityReservation", {}).get("CapacityReservationId")
    cancelled = ctx.aws.call("ec2", "cancel_capacity_reservation", CapacityReservationId=cr_id)
    if isinstance(cancelled, Unavailable) or not cancelled.get("Return", False):
        why = cancelled.describe() if isinstance(cancelled, Unavailable) else "Return was false"
        return result(CHECK_PROBE, Level.ERROR, cr_id, expected,
                      f"capacity exists in {az}, but cancelling probe reservation {cr_id} failed ({why}); it bills "
                      f"until cancelled: aws ec2 cancel-capacity-reservation --capacity-reservation-id {cr_id}",
                      targets=(az,))
    return result(CHECK_PROBE, Level.PASS, cr_id, expected,
                  f"reserved and released {n} × {name} in {az} ({cr_id}): capacity is there now", targets=(az,))
