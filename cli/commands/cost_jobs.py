"""`gpuforge cost --jobs`: what each Slurm job cost, from the cluster's accounting (sacct).

Runs sacct on the head node (over SSH with --head, or here when this is the head) and prices
every job with gpuforge.core.jobcost. Light on purpose: the base install on the head runs it, so
nothing here imports Pulumi or boto3 (paramiko only for --head).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click

from gpuforge.common.errors import EXIT_CHECKS_FAILED, GpuforgeError, InputError
from gpuforge.common.table import Column, Rows, print_table
from gpuforge.core.jobcost import (
    PRICING_FILE,
    SHARE_RULE,
    Job,
    JobCost,
    NodePricing,
    SacctError,
    Total,
    cost_jobs,
    grand_total,
    parse_sacct,
    sacct_args,
    totals,
)

SINCE = re.compile(r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2})?)?$")
SACCT_TIMEOUT_S = 120


class AccountingUnavailable(GpuforgeError):
    """sacct ran but could not read accounting (slurmdbd down, accounting off): no figures at all."""

    exit_code = EXIT_CHECKS_FAILED


def check_since(since: str) -> str:
    if not SINCE.fullmatch(since):
        raise InputError(f"--since: {since!r} is not a date", "write it as YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]")
    return since


def load_pricing(pricing: Path | None) -> NodePricing:
    path = pricing or Path(PRICING_FILE)
    if pricing is None and not path.is_file():
        raise InputError(
            "--jobs needs the cluster's node price: no --stack, no --pricing, and no " + PRICING_FILE + " here",
            "pass --stack NAME (on the operator's machine) or run it on the Slurm head node",
        )
    try:
        return NodePricing.load(path)
    except ValueError as exc:
        raise InputError(f"--pricing: {exc}", f"use {PRICING_FILE} from the head node") from None


class SlurmRunner:
    """Runs Slurm's client commands here, or on the head node over the inventory's SSH settings."""

    def __init__(self, head: str | None, inventory: Path | None, slurm_conf: str | None) -> None:
        self.head = head
        self.where = head or "here"
        self.env = {"SLURM_CONF": slurm_conf} if slurm_conf else {}
        self._transport: Any = None
        self._node: Any = None
        if head is None:
            if shutil.which("sacct") is None:
                raise InputError("sacct is not on PATH here", "run it on the Slurm head node, or pass --head HOST")
            return
        from gpuforge.validate.inventory import Node, SshConfig, load_inventory
        from gpuforge.validate.ssh import SshTransport

        ssh, host = SshConfig(), head
        if inventory is not None:
            inv = load_inventory(str(inventory))
            ssh = inv.ssh
            host = next((n.host for n in inv.nodes if n.name == head), head)
        self._transport = SshTransport(ssh)
        self._node = Node(name=head, host=host)

    def run(self, args: list[str]) -> tuple[int | None, str, str]:
        if self._transport is None:
            import os

            try:
                res = subprocess.run(args, capture_output=True, text=True, timeout=SACCT_TIMEOUT_S, check=False,
                                     env={**os.environ, **self.env})  # fmt: skip
            except subprocess.TimeoutExpired:
                raise AccountingUnavailable(f"cannot read Slurm accounting: {args[0]} did not answer in {SACCT_TIMEOUT_S} s",
                                            "check slurmdbd on the head node (systemctl status slurmdbd)") from None  # fmt: skip
            return res.returncode, res.stdout, res.stderr
        prefix = ["env", *(f"{k}={v}" for k, v in self.env.items())] if self.env else []
        r = self._transport.run(self._node, " ".join(shlex.quote(a) for a in prefix + args), SACCT_TIMEOUT_S)
        if r.outcome.value != "ok":
            raise AccountingUnavailable(f"cannot read Slurm accounting: {self.head} {r.outcome.value}: {r.detail}",
                                        "check the head node's address and the inventory's ssh settings")  # fmt: skip
        return r.exit_code, r.stdout, r.stderr

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def read_sacct(runner: SlurmRunner, since: str) -> str:
    """sacct's output. Raises AccountingUnavailable when sacct fails."""
    rc, out, err = runner.run(sacct_args(since))
    return _checked(rc, out, err, runner.where)


def pending_reasons(runner: SlurmRunner) -> dict[str, str]:
    """Why each pending job waits, from slurmctld (squeue): accounting keeps no current reason (a
    pending job's sacct Reason reads None). Empty when squeue cannot tell: the reasons are extra."""
    rc, out, _ = runner.run(["squeue", "--noheader", "--all", "--states=PENDING", "--format=%i|%r"])
    if rc != 0:
        return {}
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def _checked(rc: int | None, out: str, err: str, where: str) -> str:
    if rc != 0:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        why = lines[-1].strip() if lines else f"exit {rc}"
        raise AccountingUnavailable(
            f"cannot read Slurm accounting (sacct on {where} exited {rc}): {why}",
            "check that slurmdbd runs on the head node (systemctl status slurmdbd); no cost is reported without it",
        )
    return out


def report(costs: list[JobCost], pending: list[Job], pricing: NodePricing, since: str, where: str) -> dict[str, Any]:
    return {
        "currency": "USD",
        "since": since,
        "accounting_read_on": where,
        "pricing": {k: v for k, v in pricing.__dict__.items()},
        "share_rule": SHARE_RULE,
        "empty": not costs,
        "jobs": [c.to_dict() for c in costs],
        "pending": [j.pending_dict() for j in pending],
        "totals": None if not costs else {
            "users": [t.to_dict("user") for t in totals(costs, "user")],
            "teams": [t.to_dict("team") for t in totals(costs, "team")],
            "all": grand_total(costs).to_dict("scope"),
        },
    }  # fmt: skip


_JOB_HEADS = ("job", "name", "user", "team", "partition", "gpu type", "GPUs", "elapsed", "GPU-h", "node share", "USD")


def _job_row(c: JobCost) -> tuple[str, ...]:
    j = c.job
    return (j.job_id, j.name, j.user, j.account, j.partition, j.gpu_type or "-", str(j.gpus), _hms(j.elapsed_s),
            f"{c.gpu_hours:.4f}", f"{c.node_share:.4f}", _usd(c.usd))  # fmt: skip


def _total_row(kind: str, t: Total) -> tuple[str, ...]:
    return (kind, t.key, str(t.jobs), f"{t.gpu_hours:.4f}", _usd(t.usd))


def _hms(seconds: int) -> str:
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.4f}"


_CSV_HEADS = ("record", "job_id", "name", "user", "team", "partition", "gpu_type", "gpus", "elapsed_s", "gpu_hours",
              "node_share", "usd", "jobs")  # fmt: skip


def _csv(costs: list[JobCost], tots: list[tuple[str, Total]]) -> str:
    """One header; a row per job, then per user, per team and the grand total (record says which)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(_CSV_HEADS)
    for c in costs:
        d = c.to_dict()
        w.writerow(["job", *(d[k] if d[k] is not None else "" for k in _CSV_HEADS[1:12]), 1])
    for kind, t in tots:
        w.writerow([f"total-{kind}", "", "", t.key if kind == "user" else "", t.key if kind == "team" else "", "", "", "",
                    "", round(t.gpu_hours, 6), "", "" if t.usd is None else round(t.usd, 6), t.jobs])  # fmt: skip
    return buf.getvalue()


def empty_line(since: str, where: str) -> str:
    return f"no jobs ran since {since} per Slurm accounting (sacct on {where}): nothing to cost"


def _pending_line(j: Job) -> str:
    return f"pending: job {j.job_id} ({j.name}) of {j.user} in {j.account} waits for {j.req_gpus} GPU(s): {j.reason}"


def _unrecorded_line(j: Job) -> str:
    return (f"not final: job {j.job_id} is {j.state} but its end is not in accounting yet (slurmdbd is catching "
            f"up, e.g. after an outage): priced for the {_hms(j.elapsed_s)} up to now; read again for its final cost")


def emit(costs: list[JobCost], pending: list[Job], pricing: NodePricing, since: str, where: str, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(report(costs, pending, pricing, since, where), indent=2))
        return
    mark = "# " if fmt in ("plain", "csv") else ""
    for j in pending:  # e.g. AssocGrpGRES: over the team's (or the user's) GPU quota
        click.echo(mark + _pending_line(j))
    for c in costs:
        if c.job.end_not_recorded:
            click.echo(mark + _unrecorded_line(c.job))
    if not costs:
        click.echo(mark + empty_line(since, where))
        return
    price = "unknown" if pricing.usd_per_node_hour is None else f"{pricing.usd_per_node_hour:.4f} USD/node-h"
    head = (f"{pricing.stack}: {pricing.instance_type} in {pricing.region}, {pricing.purchase_option}, {price}; "
            f"{SHARE_RULE}")  # fmt: skip
    tots = [("user", t) for t in totals(costs, "user")] + [("team", t) for t in totals(costs, "team")]
    tots.append(("all", grand_total(costs)))
    if fmt == "csv":
        click.echo(_csv(costs, tots), nl=False)
        return
    if fmt == "plain":
        click.echo(f"# {head}")
        click.echo("# " + "\t".join(_JOB_HEADS))
        for c in costs:
            click.echo("\t".join(_job_row(c)))
        click.echo("# " + "\t".join(("total", "name", "jobs", "GPU-h", "USD")))
        for kind, t in tots:
            click.echo("\t".join(("total-" + kind, *_total_row(kind, t)[1:])))
        return
    jobs = Rows(f"jobs since {since}", [Column(h, justify="right" if i >= 6 else "left") for i, h in enumerate(_JOB_HEADS)],
                caption=head)  # fmt: skip
    for c in costs:
        jobs.add(*_job_row(c))
    print_table(jobs)
    sums = Rows("totals", [Column("per"), Column("name"), Column("jobs", justify="right"),
                           Column("GPU-h", justify="right"), Column("USD", justify="right")])  # fmt: skip
    for kind, t in tots:
        sums.add(*_total_row(kind, t))
    print_table(sums)


def run(since: str, pricing: NodePricing, head: str | None, inventory: Path | None, slurm_conf: str | None,
        fmt: str) -> None:  # fmt: skip
    check_since(since)
    runner = SlurmRunner(head, inventory, slurm_conf)
    try:
        text = read_sacct(runner, since)
        try:
            jobs = parse_sacct(text)
        except SacctError as exc:
            raise AccountingUnavailable(f"cannot read Slurm accounting: sacct's output did not parse: {exc}",
                                        "report this with the sacct output attached") from None  # fmt: skip
        reasons = pending_reasons(runner) if any(j.pending for j in jobs) else {}
    finally:
        runner.close()
    pending = [dataclasses.replace(j, reason=reasons.get(j.job_id, j.reason)) for j in jobs if j.pending]
    emit(cost_jobs(jobs, pricing), pending, pricing, since, runner.where, fmt)
