"""vCPU quotas: does the account's quota for the instance class cover the stack, with a spare node?

The quota counts vCPUs of running instances of the whole class (every P type together), so the
headroom is quota − vCPUs already running in that class − what the stack needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpuforge.common.results import CheckResult, Level
from gpuforge.preflight.aws import Unavailable
from gpuforge.preflight.context import Context
from gpuforge.preflight.outcome import result, unknown

QUOTAS_FILE = Path(__file__).resolve().parent / "quotas.yaml"
CHECK_ON_DEMAND = "quota.on-demand-vcpus"
CHECK_SPOT = "quota.spot-vcpus"


@dataclass(frozen=True)
class QuotaClass:
    name: str
    label: str
    on_demand: str
    spot: str


@cache
def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(QUOTAS_FILE.read_text())
    return doc


def quota_class(instance_type: str) -> QuotaClass | None:
    m = re.match(r"([a-z]+)\d", instance_type)
    spec = _doc()["classes"].get(m.group(1)) if m else None
    if m is None or spec is None:
        return None
    return QuotaClass(m.group(1), spec["label"], spec["on_demand"], spec["spot"])


def spare_nodes() -> int:
    return int(_doc()["spare_nodes"])


def _limit(ctx: Context, code: str) -> float | Unavailable:
    answer = ctx.aws.call("service-quotas", "get_service_quota", ServiceCode="ec2", QuotaCode=code)
    if isinstance(answer, Unavailable):
        return answer
    return float(answer["Quota"]["Value"])


def _vcpus_in_use(ctx: Context, qc: QuotaClass, spot: bool) -> int | Unavailable:
    """vCPUs of running/pending instances of the class, on-demand or spot."""
    answer = ctx.aws.call(
        "ec2", "describe_instances",
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}],
    )
    if isinstance(answer, Unavailable):
        return answer
    counts: dict[str, int] = {}
    for res in answer.get("Reservations", []):
        for inst in res.get("Instances", []):
            if (inst.get("InstanceLifecycle") == "spot") != spot:
                continue
            c = quota_class(inst["InstanceType"])
            if c is not None and c.on_demand == qc.on_demand:
                counts[inst["InstanceType"]] = counts.get(inst["InstanceType"], 0) + 1
    total = 0
    unknown_types = [t for t in counts if t not in ctx.catalog.instance_types]
    live: dict[str, int] = {}
    if unknown_types:
        facts = ctx.aws.call("ec2", "describe_instance_types", InstanceTypes=unknown_types)
        if isinstance(facts, Unavailable):
            return facts
        live = {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in facts.get("InstanceTypes", [])}
    for name, n in counts.items():
        vcpus = ctx.catalog.instance_types[name].vcpus if name in ctx.catalog.instance_types else live.get(name)
        if vcpus is None:
            return Unavailable("ec2:DescribeInstanceTypes", "error", f"no vCPU count for running type {name}")
        total += n * vcpus
    return total


def evaluate(
    check: str, *, code: str, label: str, region: str, limit: float, in_use: int, needed: int, spare: int
) -> CheckResult:
    free = limit - in_use
    expected = {"needed": needed, "spare": spare}
    observed = {"quota": limit, "in_use": in_use, "free": free, "headroom": free - needed}
    request = (
        f"request at least {int(in_use + needed + spare)}: aws service-quotas request-service-quota-increase "
        f"--service-code ec2 --quota-code {code} --desired-value {int(in_use + needed + spare)} --region {region}"
    )
    if free < needed:
        return result(check, Level.ERROR, observed, expected,
                      f"{label} quota {code} is {limit:g} vCPUs with {in_use} in use; the stack needs {needed}; "
                      + request)
    if free - needed < spare:
        return result(check, Level.WARNING, observed, expected,
                      f"{label} quota {code} fits the stack ({needed} of {free:g} free vCPUs) but leaves no room to "
                      f"replace a node; {request}")
    return result(check, Level.PASS, observed, expected,
                  f"{label} quota {code}: {needed} of {free:g} free vCPUs needed, {free - needed:g} to spare")


def run(ctx: Context) -> list[CheckResult]:
    qc = quota_class(ctx.instance.name)
    if qc is None:
        return [result(CHECK_ON_DEMAND, Level.UNKNOWN, None, None,
                       f"no vCPU quota class known for {ctx.instance.name} (see {QUOTAS_FILE.name})")]
    needed = ctx.vcpus_needed
    spare = spare_nodes() * ctx.instance.vcpus
    out: list[CheckResult] = []
    # The stack's purchase option picks the quota that decides; the other is reported for planning.
    # Instances in capacity reservations and blocks are on-demand instances for quota purposes.
    spot_stack = ctx.cfg.fleet.purchase_option == "spot"
    for check, code, spot in ((CHECK_ON_DEMAND, qc.on_demand, False), (CHECK_SPOT, qc.spot, True)):
        limit = _limit(ctx, code)
        expected = {"needed": needed, "spare": spare, "quota_code": code}
        if isinstance(limit, Unavailable):
            out.append(unknown(check, limit, expected))
            continue
        in_use = _vcpus_in_use(ctx, qc, spot)
        if isinstance(in_use, Unavailable):
            out.append(unknown(check, in_use, expected))
            continue
        r = evaluate(check, code=code, label=qc.label, region=ctx.region, limit=limit, in_use=in_use,
                     needed=needed, spare=spare)
        deciding = spot == spot_stack
        if not deciding and r.level is not Level.PASS:
            used = "spot" if spot else "on-demand"
            r = result(check, Level.INFO, r.observed, r.expected, f"{used} (not used by this stack): {r.message}")
        if deciding:
            ctx.evidence.quota_ok = r.level is not Level.ERROR
        out.append(r)
    return out
