"""What each Slurm job cost: `sacct --parsable2` records priced at the stack's node price.

Pure: no Pulumi, no boto3, no SSH. The node price comes from the same arithmetic as `gpuforge
cost` (gpuforge.core.costplan.stack_cost: compute at the stack's purchase option plus the node's
EBS storage, per node-hour); the head node carries it as a small JSON file (`NodePricing`), so
`gpuforge cost --jobs` on the head needs neither the stack files nor the catalog.

Share rule: a job pays, for each hour it ran, the largest of its CPU, memory and GPU fractions of
its nodes, times its node count (never more than its nodes): one GPU of eight with a quarter of
the CPUs pays a quarter of a node. A job in an exclusive partition (or with --exclusive) is
allocated every CPU of its nodes, so the rule charges it whole nodes. Fractions are of what Slurm
can allocate on a node (slurm.conf CPUs=, RealMemory=, Gres=gpu:N).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# What `gpuforge cost --jobs` asks sacct for; the parser maps columns by this header.
SACCT_FIELDS = (
    "JobID", "JobName", "User", "Account", "Partition", "State", "Reason", "Start", "End", "ElapsedRaw", "NNodes",
    "AllocTRES", "ReqTRES",
)  # fmt: skip
PRICING_FILE = "/etc/gpuforge/slurm-pricing.json"  # on the head node (bootstrap/slurm_head.py)
SHARE_RULE = (
    "a job pays max(CPU, memory, GPU fraction of its nodes) x nodes x elapsed hours x node price; "
    "exclusive jobs are allocated every CPU of their nodes and so pay whole nodes"
)
_MEM_UNITS = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024, "P": 1024.0**3}


class SacctError(ValueError):
    """sacct's output is not what `sacct --parsable2 --format=<SACCT_FIELDS>` prints."""


@dataclass(frozen=True)
class NodePricing:
    """One GPU node of a Slurm stack: its price per node-hour at the stack's purchase option, and
    what Slurm can allocate on it (the denominators of the share rule)."""

    stack: str
    instance_type: str
    region: str
    purchase_option: str  # costplan OPTIONS key: on_demand | spot | 1y | 3y (capacity_block: no catalog price)
    usd_per_node_hour: float | None  # compute + the node's EBS storage; None: no price known
    cpus: int
    memory_mb: int
    gpus: int
    gpu_type: str
    source: str  # where the price comes from

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> NodePricing:
        try:
            price = doc["usd_per_node_hour"]
            return cls(
                stack=str(doc["stack"]), instance_type=str(doc["instance_type"]), region=str(doc["region"]),
                purchase_option=str(doc["purchase_option"]),
                usd_per_node_hour=None if price is None else float(price),
                cpus=int(doc["cpus"]), memory_mb=int(doc["memory_mb"]), gpus=int(doc["gpus"]),
                gpu_type=str(doc["gpu_type"]), source=str(doc["source"]),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a gpuforge Slurm pricing file ({exc!s})") from None

    @classmethod
    def load(cls, path: Path) -> NodePricing:
        """The head node's pricing file, by the one reader's rules (gpuforge.common.inputfile)."""
        from dataclasses import fields

        from gpuforge.common.inputfile import PRICING, read_document, refuse_unknown_keys

        doc: dict[str, Any] = read_document(path, PRICING, "--pricing")
        refuse_unknown_keys(doc, [f.name for f in fields(cls)], f"--pricing {path}")
        return cls.from_dict(doc)


# States of a job that still holds its allocation: End is Unknown and ElapsedRaw counts up to now.
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING"})


@dataclass(frozen=True)
class Job:
    """One job allocation as sacct reports it (-X: the allocation, not its steps)."""

    job_id: str
    name: str
    user: str
    account: str
    partition: str
    state: str
    start: str
    end: str
    elapsed_s: int
    nodes: int
    cpus: int
    memory_mb: float
    gpus: int
    gpu_type: str  # "" when the job asked for GPUs without a type, or for none
    reason: str = "None"  # why it waits (sacct Reason: AssocGrpGRES over a GrpTRES=gres/gpu quota)
    req_gpus: int = 0  # GPUs asked for (ReqTRES), what a pending job waits for

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def final(self) -> bool:
        """The record has its end: ElapsedRaw is the job's whole run, not the time up to now."""
        return self.end not in ("Unknown", "None", "")

    @property
    def end_not_recorded(self) -> bool:
        """Ended (its state says so) but the end is not in accounting yet: after a slurmdbd outage
        the accounting bed showed a job COMPLETED with End=Unknown and a growing ElapsedRaw until
        slurmctld's buffered completion arrived."""
        return not self.final and self.state not in ACTIVE_STATES

    def pending_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "name": self.name, "user": self.user, "team": self.account,
                "partition": self.partition, "gpus_requested": self.req_gpus, "reason": self.reason}  # fmt: skip


@dataclass(frozen=True)
class JobCost:
    job: Job
    node_share: float  # node-equivalents the job paid for while it ran
    gpu_hours: float
    usd: float | None

    def to_dict(self) -> dict[str, Any]:
        j = self.job
        return {
            "job_id": j.job_id, "name": j.name, "user": j.user, "team": j.account, "partition": j.partition,
            "state": j.state, "start": j.start, "end": j.end, "gpu_type": j.gpu_type, "gpus": j.gpus,
            "nodes": j.nodes, "cpus": j.cpus, "memory_mb": round(j.memory_mb, 1), "elapsed_s": j.elapsed_s,
            "node_share": round(self.node_share, 6), "gpu_hours": round(self.gpu_hours, 6),
            "usd": None if self.usd is None else round(self.usd, 6),
            "final": j.final,  # false: elapsed_s (and the price) are up to now, not the whole job
        }  # fmt: skip


@dataclass(frozen=True)
class Total:
    key: str  # user or team name; "all" for the grand total
    jobs: int
    gpu_hours: float
    usd: float | None  # None when any job's price is unknown: never a silently smaller total

    def to_dict(self, kind: str) -> dict[str, Any]:
        return {kind: self.key, "jobs": self.jobs, "gpu_hours": round(self.gpu_hours, 6),
                "usd": None if self.usd is None else round(self.usd, 6)}  # fmt: skip


def sacct_args(since: str) -> list[str]:
    """sacct's arguments: every user's job allocations that ran since `since` (sacct's own
    --starttime syntax: YYYY-MM-DD[THH:MM[:SS]], now-7days, ...), unconverted units."""
    return [
        "sacct", "--allusers", "--allocations", "--parsable2", "--noconvert", f"--starttime={since}", "--endtime=now",
        f"--format={','.join(SACCT_FIELDS)}",
    ]  # fmt: skip


def parse_tres(text: str) -> dict[str, str]:
    """`billing=8,cpu=8,gres/gpu:a100=8,gres/gpu=8,mem=500M,node=1` -> {name: value}."""
    out: dict[str, str] = {}
    for item in filter(None, text.split(",")):
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SacctError(f"AllocTRES item {item!r} is not name=value")
        out[name] = value
    return out


def _mem_mb(value: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)", value)
    if not m:
        raise SacctError(f"AllocTRES mem={value!r} is not a size")
    return float(m.group(1)) * _MEM_UNITS[m.group(2) or "M"]


def _int(field: str, value: str) -> int:
    if not value.isdigit():
        raise SacctError(f"{field}={value!r} is not a whole number")
    return int(value)


def parse_sacct(text: str) -> list[Job]:
    """Jobs from `sacct --parsable2` output with a header line naming at least SACCT_FIELDS.

    Pending jobs come back with no allocation (`pending` is true; they cost nothing yet, and their
    Reason says why they wait). Jobs that ended without ever starting (cancelled while pending)
    are left out: they held nothing. Raises SacctError on anything else that does not parse,
    rather than costing a job at zero."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise SacctError("no output at all (not even the header line)")
    header = lines[0].split("|")
    missing = [f for f in SACCT_FIELDS if f not in header]
    if missing:
        raise SacctError(f"the header line lacks {', '.join(missing)}: {lines[0][:200]!r}")
    col = {name: i for i, name in enumerate(header)}
    jobs: list[Job] = []
    for n, line in enumerate(lines[1:], start=2):
        cells = line.split("|")
        if len(cells) != len(header):
            raise SacctError(f"line {n} has {len(cells)} fields, the header {len(header)}: {line[:200]!r}")
        row = {name: cells[i] for name, i in col.items()}
        try:
            elapsed = _int("ElapsedRaw", row["ElapsedRaw"])
            tres, req = parse_tres(row["AllocTRES"]), parse_tres(row["ReqTRES"])
            if row["State"] != "PENDING" and not tres and elapsed == 0:
                continue  # never started: held nothing
            gpu_types = [k.split(":", 1)[1] for k in tres if k.startswith("gres/gpu:")]
            jobs.append(Job(
                job_id=row["JobID"], name=row["JobName"], user=row["User"], account=row["Account"],
                partition=row["Partition"], state=row["State"], start=row["Start"], end=row["End"],
                elapsed_s=elapsed, nodes=_int("NNodes", row["NNodes"]), cpus=_int("cpu", tres.get("cpu", "0")),
                memory_mb=_mem_mb(tres.get("mem", "0")), gpus=_int("gres/gpu", tres.get("gres/gpu", "0")),
                gpu_type=",".join(sorted(gpu_types)), reason=row["Reason"],
                req_gpus=_int("gres/gpu", req.get("gres/gpu", "0")),
            ))  # fmt: skip
        except SacctError as exc:
            raise SacctError(f"line {n} (job {row['JobID']}): {exc}") from None
    return jobs


def node_share(job: Job, pricing: NodePricing) -> float:
    """Node-equivalents the job holds: max of its CPU, memory and GPU fractions, times its nodes."""
    nodes = max(job.nodes, 1)
    fractions = [job.cpus / (pricing.cpus * nodes), job.memory_mb / (pricing.memory_mb * nodes)]
    if pricing.gpus:
        fractions.append(job.gpus / (pricing.gpus * nodes))
    return min(max(fractions), 1.0) * nodes


def cost_jobs(jobs: Iterable[Job], pricing: NodePricing) -> list[JobCost]:
    out = []
    for job in jobs:
        if job.pending:
            continue  # holds nothing yet
        hours = job.elapsed_s / 3600
        share = node_share(job, pricing)
        usd = None if pricing.usd_per_node_hour is None else share * hours * pricing.usd_per_node_hour
        out.append(JobCost(job, share, job.gpus * hours, usd))
    return out


def totals(costs: Iterable[JobCost], key: str) -> list[Total]:
    """Per `key` ("user" or "team"), sorted by cost (unknown last), then name."""
    groups: dict[str, list[JobCost]] = {}
    for c in costs:
        groups.setdefault(c.job.user if key == "user" else c.job.account, []).append(c)
    out = [_total(name, group) for name, group in groups.items()]
    return sorted(out, key=lambda t: (t.usd is None, -(t.usd or 0.0), t.key))


def _total(name: str, group: list[JobCost]) -> Total:
    usd: float | None = 0.0
    for c in group:
        usd = None if usd is None or c.usd is None else usd + c.usd
    return Total(name, len(group), math.fsum(c.gpu_hours for c in group), usd)


def grand_total(costs: list[JobCost]) -> Total:
    return _total("all", costs)


def pricing_for(cfg: Any) -> NodePricing:
    """The node price of a Slurm stack (`cfg`: a StackConfig with `slurm`), by `gpuforge cost`'s
    arithmetic: compute at gpuforge:purchaseOption plus the node's EBS storage, per node-hour."""
    from gpuforge.core.catalog import load_catalog
    from gpuforge.core.costplan import OPTION_LABELS, price_option, stack_cost

    if cfg.slurm is None:
        raise ValueError(f"stack {cfg.stack} runs no Slurm (gpuforge:scheduler is not slurm)")
    sc = stack_cost(cfg)
    priced_as = price_option(cfg.fleet.purchase_option)  # a capacity block has no catalog price
    option = priced_as or cfg.fleet.purchase_option
    price = None if priced_as is None else sc.per_node_hourly(priced_as)
    taken = load_catalog().meta["snapshot"]["taken"]
    return NodePricing(
        stack=cfg.stack, instance_type=cfg.instance.name, region=cfg.region, purchase_option=option,
        usd_per_node_hour=price, cpus=cfg.slurm.cpus, memory_mb=cfg.slurm.real_memory_mb,
        gpus=cfg.slurm.gpus_per_node, gpu_type=cfg.slurm.gpu_type,
        source=f"gpuforge cost arithmetic (core/costplan.py): catalog snapshot {taken}, "
        f"{OPTION_LABELS.get(option, option)} compute + EBS storage per node-hour",
    )  # fmt: skip
