"""`gpuforge preview`: what `pulumi up --stack NAME` would create, and what it would cost."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from gpuforge.commands.options import complete_stacks, project_dir_option
from gpuforge.common.errors import EXIT_CHECKS_FAILED
from gpuforge.common.table import Column, Rows, emit, format_option, print_table, terminal_width
from gpuforge.common.table import console as rich_console
from gpuforge.preview import DISCLAIMER, PreviewResult, resource_options, run_preview, tree_rows
from gpuforge.stackfile import stack_name


@click.command("preview")
@click.option("--stack", "-s", required=True, shell_complete=complete_stacks,
              help="Stack name (stacks/Pulumi.<stack>.yaml), or that file's path.")
@format_option
@project_dir_option
@click.option(
    "--policies/--no-policies",
    default=True,
    show_default=True,
    help="Check the graph against the guardrail policy pack (policy/); violations exit 1.",
)
def command(stack: str, fmt: str, project_dir: Path, policies: bool) -> None:
    """Offline preview of a stack, with no Pulumi CLI, plugins or AWS credentials.

    Loads the stack's config as Pulumi would (Pulumi.yaml defaults, then the stack file),
    validates it, runs __main__.py under the Pulumi SDK's mock engine and prints the resource
    tree, the exports, the guardrail policies that ran and a cost estimate from the catalog.
    --format plain prints one resource per line (type, name, parent).

    \b
    Examples:
      gpuforge preview --stack cv-training
      gpuforge preview --stack risk-sim --format json | jq '.cost.hourly'
    """
    stack = stack_name(project_dir, stack)
    result = run_preview(project_dir.resolve(), stack, policies=policies)
    if fmt == "json":
        click.echo(result.to_json())
    elif fmt == "plain":
        _print_plain(result)
    else:
        _print_table(result)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if result.violations:
        _report_violations(result)
        sys.exit(EXIT_CHECKS_FAILED)


def _report_violations(result: PreviewResult, per_policy: int = 5) -> None:
    by_policy: dict[str, list[str]] = {}
    for v in result.violations:
        by_policy.setdefault(v.policy, []).append(v.message)
    click.echo(f"policy violations ({len(result.violations)}), `pulumi up` with --policy-pack policy would refuse:", err=True)
    for policy, messages in by_policy.items():
        for message in messages[:per_policy]:
            click.echo(f"  {policy}: {message}", err=True)
        if len(messages) > per_policy:
            click.echo(f"  {policy}: ... and {len(messages) - per_policy} more (--format json lists all)", err=True)


def _outputs_rows(result: PreviewResult) -> tuple[Rows, dict[str, Any] | None]:
    outputs = dict(result.to_dict()["outputs"])  # secrets (the kubeconfig) redacted, as in JSON
    inventory = outputs.pop("inventory", None)
    out = Rows("outputs", [Column("output"), Column("value")])
    for key in sorted(outputs):
        out.add(key, json.dumps(outputs[key]) if not isinstance(outputs[key], str) else outputs[key])
    return out, inventory if isinstance(inventory, dict) else None


def _inventory_rows(inventory: dict[str, Any]) -> Rows:
    cols = ("name", "instance_type", "az_id", "private_ip", "public_ip")
    inv = Rows("inventory", [Column(c) for c in cols])
    for node in inventory.get("nodes", []):
        inv.add(*(node.get(c) for c in cols))
    return inv


def _no_nodes_note(stack: str) -> str:
    # EKS node groups create their instances after deploy: nothing to list at preview time.
    return (f"no nodes are known before deploy (EKS node groups launch them); once deployed, "
            f"`gpuforge validate --discover {stack}` finds them by tag")


def _cost_rows(result: PreviewResult) -> Rows:
    cost = result.cost.to_dict()
    ct = Rows("cost estimate (USD, from the catalog)", [
        Column("item"), Column("quantity", justify="right"), Column("on-demand $/h", justify="right"),
        Column("spot $/h", justify="right")])
    for line in cost["lines"]:
        ct.add(
            line["item"],
            f"{line['quantity']:g} {line['unit']}",
            _money(line["on_demand_usd_per_hour"]),
            _money(line["spot_usd_per_hour"]) if line["spot_usd_per_hour"] is not None else "(same)",
        )
    ct.add("total per hour", "", _money(cost["hourly"]["on_demand"]), _money(cost["hourly"]["spot"]))
    ct.add("total per 30 days", "", _money(cost["thirty_days"]["on_demand"]), _money(cost["thirty_days"]["spot"]))
    return ct


def _mirror_rows(result: PreviewResult) -> Rows | None:
    mirror = result.config.mirror.to_dict()
    if not mirror:
        return None
    table = Rows("bootstrap mirror (gpuforge:mirror): pins and digests unchanged", [Column("upstream"), Column("installs from")])
    for name, where in mirror.items():
        table.add(name, where)
    return table


_NO_MIRROR = "bootstrap downloads from the vendors' sites (no gpuforge:mirror)"


def _print_table(result: PreviewResult) -> None:
    from gpuforge.common.plain import escape

    console = rich_console(width=terminal_width())
    cfg = result.config
    console.print(f"[bold]gpuforge preview[/] stack [cyan]{escape(cfg.stack)}[/] profile [cyan]{cfg.profile.name}[/]",
                  highlight=False)  # fmt: skip
    console.print(f"[dim]{escape(DISCLAIMER)}[/]\n", highlight=False)
    rows = [(d, short_type(t), n) for d, t, n in tree_rows(result)]
    width = max(len("  " * d + t) for d, t, _ in rows)
    for depth, typ, name in rows:
        label = ("  " * depth + typ).ljust(width)
        console.print(f"+ {escape(label)}  [bold]{escape(name)}[/]", soft_wrap=True, highlight=False)
    console.print(f"\n{_counts(result)}\n", highlight=False)

    out, inventory = _outputs_rows(result)
    print_table(out)
    if inventory is not None:
        print_table(_inventory_rows(inventory))
        if not inventory.get("nodes"):
            console.print(f"[dim]{escape(_no_nodes_note(cfg.stack))}[/]", highlight=False)
    _print_policies(console, result)
    mirror = _mirror_rows(result)
    if mirror is None:
        console.print(_NO_MIRROR, highlight=False)
    else:
        print_table(mirror)
    print_table(_cost_rows(result))
    for note in result.cost.to_dict()["notes"]:
        console.print(f"[dim]- {escape(note)}[/]", highlight=False)
    for note in cfg.profile.shape.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)


def _counts(result: PreviewResult) -> str:
    custom = sum(r.custom for r in result.run.resources)
    return f"{custom} resources, {len(result.run.resources) - custom} components/stack"


def _print_policies(console: Any, result: PreviewResult) -> None:
    """Which guardrails ran and how they went, as `pulumi preview --policy-pack` reports them."""
    if not result.policies_checked:
        console.print("\n[dim]Policies: not checked (--no-policies)[/]")
        return
    failed = {v.policy for v in result.violations}
    mark = "[red]✗[/]" if failed else "[green]✓[/]"
    console.print(f"\nPolicies:\n    {mark} gpuforge-guardrails (local: policy)")
    for name in result.policy_names:
        n = sum(v.policy == name for v in result.violations)
        console.print(f"        {'[red]✗[/]' if n else '[green]✓[/]'} {name}" + (f": {n} violation(s)" if n else ""),
                      highlight=False)  # fmt: skip
    console.print()


def _print_plain(result: PreviewResult) -> None:
    """Everything the table shows, as plain records (what `make preview > log` keeps): the
    resources (type, name, parent), then the outputs, the inventory, the mirror and the cost as
    tab-separated sections with a `#` header each; policies and notes as `#` lines."""
    cfg = result.config
    click.echo(f"# gpuforge preview stack {cfg.stack} profile {cfg.profile.name}")
    click.echo(f"# {DISCLAIMER}")
    names = {r.urn: r.name for r in result.run.resources}
    click.echo("# type\tname\tparent")
    for r in sorted(result.run.resources, key=lambda r: r.urn):
        click.echo(f"{r.type}\t{r.name}\t{names.get(r.parent or '', '-')}")
    for r in sorted(result.run.resources, key=lambda r: r.urn):
        if opts := resource_options(r):  # what a delete, a replacement or the first create does differently
            click.echo(f"# options {r.name}: " + " ".join(k if v is True else f"{k}={v}" for k, v in opts.items()))
    click.echo(f"# {_counts(result)}")
    out, inventory = _outputs_rows(result)
    emit(out, "plain")
    if inventory is not None:
        emit(_inventory_rows(inventory), "plain")
        if not inventory.get("nodes"):
            click.echo(f"# {_no_nodes_note(cfg.stack)}")
    if not result.policies_checked:
        click.echo("# policies: not checked (--no-policies)")
    for name in result.policy_names:
        n = sum(v.policy == name for v in result.violations)
        click.echo(f"# policy {name}: {'pass' if not n else f'{n} violation(s)'}")
    mirror = _mirror_rows(result)
    if mirror is None:
        click.echo(f"# {_NO_MIRROR}")
    else:
        for name, where in cfg.mirror.to_dict().items():
            click.echo(f"# bootstrap mirror: {name} from {where}")
    emit(_cost_rows(result), "plain")
    cost = result.cost.to_dict()
    click.echo(f"# cost: {_money(cost['hourly']['on_demand'])} $/h on-demand, {_money(cost['hourly']['spot'])} $/h spot")
    for note in cost["notes"]:
        click.echo(f"# - {note}")
    for note in cfg.profile.shape.notes:
        click.echo(f"# note: {note}")


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def short_type(token: str) -> str:
    """The form `pulumi preview` prints: aws:ec2/vpc:Vpc -> aws:ec2:Vpc (JSON keeps the full token)."""
    parts = token.split(":")
    if len(parts) == 3 and "/" in parts[1]:
        return f"{parts[0]}:{parts[1].split('/')[0]}:{parts[2]}"
    return token
