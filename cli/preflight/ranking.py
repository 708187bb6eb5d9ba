"""Rank a region's AZ IDs for a stack, from the evidence the checks gathered (pure).

An AZ fits when compute is offered there, S3 Express One Zone is there (the co-located bucket
moves with compute), quota covers the request, an existing subnet (if configured) is there,
and no capacity probe failed there. Unknown evidence never counts as a fit: such an AZ is
"unconfirmed" and ranks below every confirmed one.
Among equals: a reservation that covers the request, then more reserved instances, then the
configured AZ (do not move a stack without a reason), then the cheaper spot price, then the ID.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.preflight.context import Evidence


@dataclass(frozen=True)
class AzRank:
    az_id: str
    fits: bool | None  # True: every criterion confirmed; None: none failed, some unknown; False: one failed
    blockers: tuple[str, ...]
    unknowns: tuple[str, ...]
    reserved: int

    def to_dict(self) -> dict[str, object]:
        return {
            "az_id": self.az_id,
            "fits": self.fits,
            "blockers": list(self.blockers),
            "unknowns": list(self.unknowns),
            "reserved": self.reserved,
        }


def assess(az: str, ev: Evidence) -> AzRank:
    blockers: list[str] = []
    unknowns: list[str] = []

    def criterion(ok: bool | None, fail: str, unknown: str) -> None:
        if ok is None:
            unknowns.append(unknown)
        elif not ok:
            blockers.append(fail)

    criterion(None if ev.offered is None else az in ev.offered, "instance type not offered", "offering unknown")
    criterion(None if ev.s3express is None else az in ev.s3express, "no S3 Express One Zone", "S3 Express unknown")
    criterion(ev.quota_ok, "vCPU quota too low (region-wide)", "quota unknown")
    if ev.subnet_az is not None and ev.subnet_az != az:
        blockers.append(f"configured subnet is in {ev.subnet_az}")
    if az in ev.no_capacity:
        blockers.append("capacity probe: InsufficientInstanceCapacity")
    reserved = (ev.reserved or {}).get(az, 0)
    fits = False if blockers else (None if unknowns else True)
    return AzRank(az, fits, tuple(blockers), tuple(unknowns), reserved)


def rank(ev: Evidence, configured_az: str, node_count: int) -> list[AzRank]:
    order = {True: 0, None: 1, False: 2}

    def key(r: AzRank) -> tuple[object, ...]:
        price = ev.spot_price.get(r.az_id, float("inf"))
        return (order[r.fits], r.reserved < node_count, -r.reserved, r.az_id != configured_az, price, r.az_id)

    return sorted((assess(az, ev) for az in ev.az_ids), key=key)
