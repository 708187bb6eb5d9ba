"""`gpuforge cost`: hourly and 30-day cost of stacks under each purchase option, from the catalog."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpuforge.commands.options import complete_stacks, project_dir_option
from gpuforge.common.errors import InputError
from gpuforge.common.table import (
    FORMATS,
    Column,
    Rows,
    SuggestingChoice,
    default_format,
    print_table,
    terminal_width,
)
from gpuforge.common.table import console as rich_console
from gpuforge.core.config import parse_stack_config
from gpuforge.core.costplan import (
    OPTION_LABELS,
    OPTIONS,
    Hybrid,
    StackCost,
    hybrid,
    load_purchase_data,
    price_option,
    stack_cost,
    sum_or_none,
)
from gpuforge.core.kubernetes.settings import extended_support_warning
from gpuforge.stackfile import load_stack_config, stack_name


@click.command("cost")
@click.option("--stack", "-s", "stacks", multiple=True, shell_complete=complete_stacks,
              help="Stack name (or its file's path); repeat for several. With --jobs: the Slurm stack whose node price "
                   "applies.")
@click.option("--jobs", is_flag=True,
              help="What each Slurm job cost since --since, per job, user and team, from the cluster's accounting (sacct).")
@click.option("--since", default=None, metavar="DATE", help="With --jobs: jobs that ran since DATE (YYYY-MM-DD[THH:MM[:SS]]).")
@click.option("--pricing", type=click.Path(path_type=Path, readable=False), default=None,
              help="With --jobs and no --stack: the node price file (default: /etc/gpuforge/slurm-pricing.json "
                   "on the head node).")
@click.option("--head", default=None, metavar="HOST",
              help="With --jobs: run sacct on this head node over SSH (a name in --inventory, or an address); default: here.")
@click.option("--inventory", type=click.Path(path_type=Path, readable=False), default=None,
              help="With --head: the inventory whose ssh settings (user, key, known_hosts, jump host) reach the head.")
@click.option("--slurm-conf", default=None, metavar="PATH", help="With --jobs: SLURM_CONF for sacct (default: Slurm's own).")
@click.option("--format", "fmt", type=SuggestingChoice((*FORMATS, "csv")), default=None,
              help="table (default on a terminal), plain (default when piped), json, or csv (--jobs only).",
              callback=lambda _c, _p, value: value or default_format())
@project_dir_option
def command(stacks: tuple[str, ...], jobs: bool, since: str | None, pricing: Path | None, head: str | None,
            inventory: Path | None, slurm_conf: str | None, fmt: str, project_dir: Path) -> None:  # fmt: skip
    """Cost of one or more stacks: on-demand, spot, 1- and 3-year commitments; or, with --jobs,
    what each Slurm job cost.

    Compute and storage, per node and in total, per hour and per 30 days, and per GPU-hour;
    then a hybrid deployment over the stacks given (training on spot, inference on a 1-year
    commitment) with its saving against all on-demand. The option each stack is configured to
    buy (gpuforge:purchaseOption) is marked.

    With --jobs: every job that ran since --since, with its user, team (Slurm account), GPU type
    and count, elapsed time, GPU-hours and cost, and totals per user and team. A job pays
    max(CPU, memory, GPU fraction of its nodes) x nodes x elapsed hours x the node price at the
    stack's purchase option (exclusive jobs pay whole nodes). Exits 1 when accounting cannot
    be read; no jobs is said as such, never as $0.

    \b
    Examples:
      gpuforge cost --stack cv-training
      gpuforge cost -s cv-training -s nlp-inference -s risk-sim --format json | jq .hybrid
      gpuforge cost --jobs --since 2026-12-01 --stack cv-training --head cv-training-head --inventory inv.json
      gpuforge cost --jobs --since 2026-12-01 --format csv     # on the head node
    """
    if jobs:
        _jobs(stacks, since, pricing, head, inventory, slurm_conf, fmt, project_dir)
        return
    for flag, value in (("--since", since), ("--pricing", pricing), ("--head", head), ("--inventory", inventory),
                        ("--slurm-conf", slurm_conf)):  # fmt: skip
        if value is not None:
            raise InputError(f"{flag} is for --jobs", f"add --jobs, or drop {flag}")
    if fmt == "csv":
        raise InputError("--format csv is for --jobs", "use table, plain or json")
    if not stacks:
        raise InputError("--stack is required", "name a stack: gpuforge cost --stack cv-training")
    project_dir = project_dir.resolve()
    costs = []
    used: dict[str, str] = {}
    for stack in dict.fromkeys(stack_name(project_dir, s) for s in stacks):  # keep order, drop repeats
        raw, _ = load_stack_config(project_dir, stack)
        cfg = parse_stack_config(raw, stack)
        if cfg.kubernetes is not None and (warning := extended_support_warning(cfg.kubernetes)) is not None:
            click.echo(f"warning: {warning}", err=True)  # stderr: the report on stdout stays machine-readable
        costs.append(stack_cost(cfg))
        used[cfg.stack] = price_option(cfg.fleet.purchase_option) or cfg.fleet.purchase_option  # billed at; a block: none
    mix = hybrid(costs)
    if fmt == "json":
        click.echo(json.dumps(report(costs, mix, used), indent=2))
    elif fmt == "plain":
        _print_plain(costs, mix, used)
    else:
        _print_table(costs, mix, used)


def report(costs: list[StackCost], mix: Hybrid, used: dict[str, str] | None = None) -> dict[str, object]:
    data = load_purchase_data()
    totals = {
        option: {
            "usd_per_hour": sum_or_none(c.hourly(option) for c in costs),
            "usd_per_30_days": sum_or_none(c.thirty_days(option) for c in costs),
        }
        for option in OPTIONS
    }
    return {
        "currency": "USD",
        "stacks": [c.to_dict() | ({"purchase_option": used[c.stack]} if used else {}) for c in costs],
        "total": {o: {k: None if v is None else round(v, 4) for k, v in t.items()} for o, t in totals.items()},
        "hybrid": mix.to_dict(),
        "assumptions": {key: {"discount": c.discount, "source": c.source} for key, c in data.commitments.items()},
        "notes": NOTES,
    }


NOTES = [
    "on-demand and spot prices: catalog snapshot (core/catalog/meta.yaml); spot moves hourly",
    "1- and 3-year figures take 40% and 60% off the on-demand price (the usual range for reserved instances "
    "and savings plans; an assumption, not an AWS quote)",
    "storage (EBS root and data volumes) costs the same under every option; S3 is billed by usage, not estimated",
    "EKS stacks: control plane and on-demand system nodes (catalog/platform_prices.yaml, list prices not re-checked "
    "offline) cost the same under every option and are in the totals, not in node-h or GPU-h",
    "30 days = 720 hours",
]


def _rows(c: StackCost, used: str) -> Rows:
    rows = Rows(
        f"{c.stack}: {c.node_count}× {c.instance_type} in {c.region} ({c.node_count * c.gpus_per_node} GPUs, {c.role})",
        [Column("option"), *(Column(h, justify="right") for h in _MONEY_HEADS), Column("stack uses")],
        caption="USD; node-h = per node-hour, GPU-h = per GPU-hour (storage included)",
    )
    for option in OPTIONS:
        rows.add(
            OPTION_LABELS[option],
            _money(c.compute_per_node[option], 4),
            _money(c.storage_per_node, 4),
            _money(c.per_node_hourly(option), 4),
            _money(c.hourly(option)),
            _money(c.thirty_days(option)),
            _money(c.per_gpu_hour(option), 4),
            "yes" if option == used else "-",
        )
    return rows


_MONEY_HEADS = ("compute/node-h", "storage/node-h", "node-h", "total/h", "total/30 d", "GPU-h")


def _print_plain(costs: list[StackCost], mix: Hybrid, used: dict[str, str]) -> None:
    """One record per stack and option, with the stack's name in every line (grep-able)."""
    click.echo("# " + "\t".join(("stack", "option", *_MONEY_HEADS, "stack uses")))
    for c in costs:
        for row in _rows(c, used[c.stack]).rows:
            click.echo("\t".join((c.stack, *row)))
        for f in c.fixed:
            click.echo(f"# {c.stack} fixed, every option: {f.item} ({f.quantity:g} {f.unit}) {_money(f.usd_per_hour, 4)} $/h")
    click.echo(f"# {_hybrid_line(mix)}")


def _hybrid_line(mix: Hybrid) -> str:
    d = mix.to_dict()
    saving = mix.saving
    return (
        f"hybrid, training on spot and inference on a 1-year commitment "
        f"({', '.join(f'{s} -> {OPTION_LABELS[o]}' for s, o in mix.choices)}): "
        f"on-demand {_money(mix.on_demand_hourly)} $/h ({_money(d['on_demand_usd_per_30_days'])} $/30 d), "
        f"hybrid {_money(mix.hybrid_hourly)} $/h ({_money(d['hybrid_usd_per_30_days'])} $/30 d), "
        f"saving {'n/a' if saving is None else f'{saving:.1%}'} (target: more than {mix.claimed_saving:.0%})"
    )


def _print_table(costs: list[StackCost], mix: Hybrid, used: dict[str, str]) -> None:

    console = rich_console(width=terminal_width())
    for c in costs:
        print_table(_rows(c, used[c.stack]))
        if c.fixed:  # EKS: the same under every option, included in total/h and total/30 d
            console.print("  fixed, every option: " + "; ".join(
                f"{f.item} ({f.quantity:g} {f.unit}) {_money(f.usd_per_hour, 4)} $/h" for f in c.fixed
            ))
        if c.max_nodes:
            at_max = c.to_dict()["options"]
            console.print(
                f"  autoscaling: costed at the minimum of {c.node_count} nodes; at the maximum of {c.max_nodes}: "
                f"{_money(at_max['on_demand']['usd_per_hour_at_max'])} $/h on-demand, "
                f"{_money(at_max['spot']['usd_per_hour_at_max'])} $/h spot"
            )
    console.print(_hybrid_line(mix), highlight=False)
    for note in NOTES:
        console.print(f"[dim]- {note}[/]")


def _money(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _jobs(stacks: tuple[str, ...], since: str | None, pricing: Path | None, head: str | None, inventory: Path | None,
          slurm_conf: str | None, fmt: str, project_dir: Path) -> None:  # fmt: skip
    from gpuforge.commands import cost_jobs
    from gpuforge.core.jobcost import pricing_for

    if since is None:
        raise InputError("--jobs needs --since DATE", "e.g. --since 2026-12-01")
    cost_jobs.check_since(since)
    if len(stacks) > 1:
        raise InputError("--jobs prices one Slurm cluster: give one --stack", "repeat the command per stack")
    if stacks and pricing is not None:
        raise InputError("--stack and --pricing both give the node price", "pass one of them")
    if stacks:
        project_dir = project_dir.resolve()
        name = stack_name(project_dir, stacks[0])
        raw, _ = load_stack_config(project_dir, name)
        cfg = parse_stack_config(raw, name)
        if cfg.slurm is None:
            raise InputError(f"--stack: {cfg.stack} runs no Slurm (gpuforge:scheduler is not slurm)",
                             "name a Slurm stack")  # fmt: skip
        node_price = pricing_for(cfg)
    else:
        node_price = cost_jobs.load_pricing(pricing)
    cost_jobs.run(since, node_price, head, inventory, slurm_conf, fmt)
