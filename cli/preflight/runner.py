"""Run every preflight check for a stack, rank its AZ IDs, and (with pin_az) pin the choice.

The configured AZ may be the very thing that is wrong, so it is not allowed to stop the run:
when `parse_stack_config` rejects only the AZ, everything else is validated with a stand-in AZ
and the configured one competes in the ranking like every other AZ ID.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gpuforge.common.errors import ConfigError
from gpuforge.common.results import CheckResult, Level, Report
from gpuforge.core.catalog import Catalog, load_catalog
from gpuforge.core.config import PROJECT, StackConfig, parse_stack_config
from gpuforge.preflight import account, capacity, compute, quota, resources, spot, storage
from gpuforge.preflight.aws import Aws
from gpuforge.preflight.context import Context, Evidence
from gpuforge.preflight.outcome import result
from gpuforge.preflight.ranking import AzRank, rank
from gpuforge.stackfile import load_stack_config, set_config_value

AZ_KEY = f"{PROJECT}:azId"
CHECK_CHOICE = "az.choice"
CHECK_PIN = "az.pin"
CHECK_EVIDENCE = "preflight.evidence"


def resolve(raw: dict[str, str], stack: str, catalog: Catalog) -> tuple[StackConfig, dict[str, str]]:
    """The validated config, and for each AZ ID the catalog/config rejects, the reason.

    Raises ConfigError for every problem that is not the AZ (those are bad input: exit 2).
    """
    region = raw.get("aws:region", "")
    rejected: dict[str, str] = {}
    cfg: StackConfig | None = None
    configured = raw.get(AZ_KEY, "")
    first_error: ConfigError | None = None
    # The configured AZ first, so its own error is the one shown when no stand-in exists.
    candidates = [configured, *(catalog.region(region).az_ids if region in catalog.regions else ())]
    for az in dict.fromkeys(candidates):
        try:
            parsed = parse_stack_config({**raw, AZ_KEY: az}, stack, catalog)
        except ConfigError as exc:
            if exc.key != AZ_KEY:
                raise
            first_error = first_error or exc
            rejected[az] = exc.message.removeprefix(f"{AZ_KEY}: ")
            continue
        cfg = cfg or parsed
    if cfg is None:
        assert first_error is not None  # no candidate parsed, so at least one raised
        raise first_error
    return cfg, rejected


def run_preflight(
    project_dir: Path,
    stack: str,
    *,
    pin_az: bool = False,
    probe_capacity: bool = False,
    aws_factory: Callable[[str], Aws] = Aws,
    progress: Callable[[str], None] | None = None,
) -> Report:
    raw, secrets = load_stack_config(project_dir, stack)
    catalog = load_catalog()
    cfg, rejected = resolve(raw, stack, catalog)
    configured = raw.get(AZ_KEY, "")
    ctx = Context(
        stack=stack, cfg=cfg, configured_az=configured, catalog=catalog, aws=aws_factory(cfg.region),
        evidence=Evidence(az_ids=catalog.region(cfg.region).az_ids), secrets=tuple(secrets),
        probe_capacity=probe_capacity,
    )
    report = Report(kind="preflight")
    say = progress or (lambda _text: None)
    steps: list[tuple[str, Callable[[Context], list[CheckResult]]]] = [
        ("account", account.credentials),
        ("availability zones", compute.zones),
        ("offerings", compute.offerings),
        ("instance facts", compute.instance_facts),
        ("vCPU quotas", quota.run),
        ("capacity reservations", capacity.reservations),
    ]
    if cfg.fleet.purchase_option == "spot":
        steps += [("spot prices", spot.prices), ("spot placement scores", spot.placement_scores)]
    steps += [("S3 Express", storage.availability)]
    image_id: str | None = None

    def ami(c: Context) -> list[CheckResult]:
        nonlocal image_id
        results, image_id = resources.ami(c)
        return results

    steps += [("AMI", ami), ("network", resources.network), ("key pair", resources.key_pair),
              ("NGC parameter", resources.ngc_parameter)]
    for i, (label, step) in enumerate(steps, 1):
        report.add(_timed(ctx, say, f"[{i}/{len(steps)}] {label}", step))

    ranking = _rank(ctx, rejected)
    if probe_capacity:
        candidates = [r.az_id for r in ranking if r.fits is not False]
        report.add(_timed(ctx, say, "capacity probe", lambda c: capacity.probe(c, candidates)))
        ranking = _rank(ctx, rejected)
    chosen = ranking[0] if ranking and ranking[0].fits is not False else None

    if chosen is not None:
        az = chosen.az_id
        report.add(_timed(ctx, say, "launch permission", lambda c: account.launch_permission(c, az, image_id)))
        report.add(_timed(ctx, say, "existing bucket", lambda c: storage.existing_bucket(c, az)))
    pinned = False
    if pin_az:
        pin = _pin(project_dir, stack, configured, chosen)
        pinned = pin.level is Level.PASS and chosen is not None and chosen.az_id != configured
        report.add(pin)
    report.add(_choice(ctx, configured, chosen, ranking, rejected, pinned))
    report.add(_evidence(report.results, cfg.fleet.purchase_option))
    report.context = {
        "stack": stack,
        "region": cfg.region,
        "instance_type": cfg.instance.name,
        "node_count": cfg.node_count,
        "vcpus_needed": ctx.vcpus_needed,
        "az": {
            "configured": configured,
            "chosen": chosen.az_id if chosen else None,
            "pinned": pinned,
            "why": _why(chosen, configured) if chosen else "no AZ ID fits",
            "ranking": [r.to_dict() for r in ranking],
        },
        "secret_keys": list(secrets),
    }
    return report


def _timed(
    ctx: Context, say: Callable[[str], None], label: str, step: Callable[[Context], list[CheckResult]]
) -> list[CheckResult]:
    """One step under its time budget, with a progress line before and after (stderr)."""
    say(f"preflight {label} ...")
    start = time.monotonic()
    with ctx.aws.budget():
        results = step(ctx)
    worst = max((r.level for r in results), key=_SEVERITY.index, default=Level.PASS)
    say(f"preflight {label}: {worst.value} ({time.monotonic() - start:.1f} s)")
    return results


_SEVERITY = [Level.PASS, Level.INFO, Level.WARNING, Level.UNKNOWN, Level.ERROR]


def _evidence(results: list[CheckResult], purchase_option: str) -> CheckResult:
    """No evidence is never a pass: without the account, the offerings and the deciding quota
    established, a run cannot call the stack deployable (issue 13 item 3)."""
    quota_check = quota.CHECK_SPOT if purchase_option == "spot" else quota.CHECK_ON_DEMAND
    essential = (account.CHECK_CREDENTIALS, compute.CHECK_OFFERING, quota_check)
    missing = [name for name in essential if not any(r.check == name and r.level is not Level.UNKNOWN for r in results)]
    if missing:
        return result(CHECK_EVIDENCE, Level.ERROR, {"not established": missing}, list(essential),
                      f"could not establish {', '.join(missing)}; without them the stack is not known to be "
                      "deployable (see their messages above)")
    return result(CHECK_EVIDENCE, Level.PASS, list(essential), list(essential),
                  "account, offerings and quota established")


def _rank(ctx: Context, rejected: dict[str, str]) -> list[AzRank]:
    ranking = rank(ctx.evidence, ctx.configured_az, ctx.cfg.node_count)
    # An AZ the catalog rejects would fail `gpuforge preview` and the program's own config check.
    out = []
    for r in ranking:
        if r.az_id in rejected and r.fits is not False:
            out.append(replace(r, fits=False, blockers=(*r.blockers, f"catalog: {rejected[r.az_id]}")))
        else:
            out.append(r)
    order = {True: 0, None: 1, False: 2}
    return sorted(out, key=lambda r: order[r.fits])  # stable: keeps rank()'s order within a class


def _why(chosen: AzRank, configured: str) -> str:
    text = f"{chosen.az_id}: " + (
        "offering, S3 Express One Zone and vCPU quota line up" if chosen.fits else "nothing rules it out"
    )
    if chosen.unknowns:
        text += f" (unconfirmed: {', '.join(chosen.unknowns)})"
    if chosen.reserved:
        text += f"; {chosen.reserved} reserved instances"
    if chosen.az_id == configured:
        text += "; the configured AZ"
    return text


def _choice(
    ctx: Context, configured: str, chosen: AzRank | None, ranking: list[AzRank], rejected: dict[str, str], pinned: bool
) -> CheckResult:
    observed = chosen.az_id if chosen else None
    mine = next((r for r in ranking if r.az_id == configured), None)
    if mine is None:
        why_not = rejected.get(configured, f"{configured!r} is not an available AZ ID of {ctx.region}")
    else:
        why_not = "; ".join(mine.blockers) or ", ".join(mine.unknowns)
    if chosen is None:
        return result(CHECK_CHOICE, Level.ERROR, None, configured,
                      f"no AZ ID of {ctx.region} fits {ctx.cfg.node_count} × {ctx.instance.name} with S3 Express: "
                      + "; ".join(f"{r.az_id}: {', '.join(r.blockers)}" for r in ranking))
    why = _why(chosen, configured)
    if chosen.az_id == configured or pinned:
        level = Level.PASS if chosen.fits else Level.WARNING
        done = f"pinned {chosen.az_id} (was {configured})" if pinned else f"keep {configured}"
        return result(CHECK_CHOICE, level, observed, chosen.az_id, f"{done}: {why}", targets=(chosen.az_id,))
    if mine is not None and mine.fits is True:
        return result(CHECK_CHOICE, Level.WARNING, observed, configured,
                      f"{configured} fits, but {chosen.az_id} ranks higher ({why}); `--pin-az` to move",
                      targets=(chosen.az_id,))
    # The configured AZ known not to fit is an error whatever the alternative's state: `gpuforge
    # preview` refuses an AZ the catalog rejects, and the same facts must give the same verdict.
    known_bad = configured in rejected or (mine is not None and mine.fits is False)
    level = Level.ERROR if chosen.fits or known_bad else Level.WARNING
    return result(CHECK_CHOICE, level, observed, configured,
                  f"configured {configured} does not fit ({why_not}); use {why}; run "
                  f"`gpuforge preflight --stack {ctx.stack} --pin-az` to pin it (storage moves with it)",
                  targets=(chosen.az_id,))


def _pin(project_dir: Path, stack: str, configured: str, chosen: AzRank | None) -> CheckResult:
    if chosen is None or chosen.fits is not True:
        why = "no AZ ID fits" if chosen is None else f"{chosen.az_id} is unconfirmed ({', '.join(chosen.unknowns)})"
        return result(CHECK_PIN, Level.ERROR, configured, None, f"not pinned: {why}")
    if chosen.az_id == configured:
        return result(CHECK_PIN, Level.PASS, configured, chosen.az_id, f"{configured} is already pinned")
    path = set_config_value(project_dir, stack, AZ_KEY, chosen.az_id)
    return result(CHECK_PIN, Level.PASS, chosen.az_id, chosen.az_id,
                  f"wrote {AZ_KEY}: {chosen.az_id} to {path.name} (was {configured}); compute, volumes and the "
                  "directory bucket follow it", targets=(chosen.az_id,))
