"""`gpuforge validate`: prove a running cluster over SSH (or on this node with --transport local).

Exit 0 when every result is pass/info/warning, 1 when any is error/unknown, 2 for bad input.
The report goes to stdout (table or JSON); live progress goes to stderr; raw outputs, the
report and the versions seen go to the evidence directory (--out). Those outputs are written by
cli/commands/validate_output.py; this module reads the inputs, picks the checks and runs them.
"""

from __future__ import annotations

import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from gpuforge.commands.options import project_dir_option
from gpuforge.commands.validate_output import LiveProgress, render, write_outputs
from gpuforge.common import inputfile
from gpuforge.common.errors import InputError
from gpuforge.common.results import CheckResult, Report, atomic_write
from gpuforge.common.table import format_option
from gpuforge.validate.checks import Expectations, NodeCheck
from gpuforge.validate.inventory import Inventory, Node, load_inventory
from gpuforge.validate.network.iperf import IperfSettings
from gpuforge.validate.runner import Runner
from gpuforge.validate.stagehost import RunOptions
from gpuforge.validate.system import system_checks
from gpuforge.validate.transport import LocalTransport, Timeouts, Transport

NETWORK = "network"


def _load(path: str | None, stack: str | None, region: str | None, ssh_flags: dict[str, str | None]) -> Inventory:
    """--inventory FILE or --discover STACK (exactly one); the --ssh-* flags override its ssh section."""
    if (path is None) == (stack is None):
        raise InputError(
            "pass exactly one of --inventory FILE and --discover STACK",
            "--inventory for a file (or - for stdin), --discover for a stack's running EC2 instances",
        )
    if region is not None and stack is None:
        raise InputError("--region only applies to --discover", "drop --region, or use --discover STACK")
    flags = {k: v for k, v in ssh_flags.items() if v is not None}
    if stack is not None:
        from gpuforge.validate.discover import discover_inventory

        return discover_inventory(stack, region, ssh=flags, progress=lambda line: click.echo(line, err=True))
    assert path is not None
    inv = load_inventory(path)
    if flags:
        inv = inv.model_copy(update={"ssh": inv.ssh.model_copy(update=flags)})
    return inv


def _registry_checks() -> list[NodeCheck[Any]]:
    """Every check the registry names: a packaging slip is an ImportError here, never a shorter list."""
    from gpuforge.validate.registry import node_checks

    return node_checks()


def _select(tokens: list[str] | None, checks: list[NodeCheck[Any]]) -> tuple[list[NodeCheck[Any]], bool]:
    """--checks: names or prefixes (`gpu`, `network`, `nccl.local`); identity always runs."""
    if not tokens:
        return checks, True
    names = [c.name for c in checks] + ["network.iperf3", "network.ping", "nccl.pair", "slurm.accounting"]
    known_prefixes = {n.split(".")[0] for n in names} | set(names)
    for t in tokens:
        if t not in known_prefixes:
            from gpuforge.core.catalog import did_you_mean

            raise InputError(
                f"--checks: unknown check {t!r}{did_you_mean(t, sorted(known_prefixes))}",
                f"choose from: {', '.join(sorted(known_prefixes))}",
            )

    def chosen(name: str) -> bool:
        return name == "system.identity" or any(name == t or name.startswith(t + ".") for t in tokens)

    network = any(t == NETWORK or t.startswith(NETWORK + ".") for t in tokens)
    return [c for c in checks if chosen(c.name) or (network and c.name == "system.network_tools")], network


def _expectations(inv: Inventory, baseline: Path | None) -> Any:
    overrides = inv.expect.stated() if inv.expect else {}
    from gpuforge.validate import thresholds
    base = None
    if baseline is not None:
        try:
            base = thresholds.load_baseline(baseline)
        except thresholds.ThresholdsError as exc:
            raise InputError(f"--baseline: {exc}", "pass a file written by --save-baseline") from None
    cache: dict[str | None, Expectations] = {}

    def build(node: Node) -> Expectations:
        key = node.instance_type
        if key not in cache:
            try:
                exp = thresholds.build_expectations(inv.profile, node.instance_type, overrides)
            except thresholds.ThresholdsError as exc:
                where = "profile" if inv.profile and "profile" in str(exc) else f"nodes[{node.name}].instance_type"
                raise InputError(f"inventory {where}: {exc}", "use a profile or instance type from the catalog") from None
            cache[key] = thresholds.apply_baseline(exp, base) if base is not None else exp
        return cache[key]

    for n in inv.nodes:  # resolve now: bad input is exit 2 before any connection is made
        build(n)
    return build


def _transport(kind: str, inv: Inventory, accept_new: bool, timeouts: Timeouts,
               partition: str | None = None, workers: int = 32) -> Transport:
    if kind == "slurm":
        # srun/sinfo as this machine's Slurm clients find them (SLURM_CONF, the head node's /etc/slurm).
        from gpuforge.validate.slurm import SlurmClient, SlurmTransport, gres_by_node

        if shutil.which("srun") is None:
            # Checked before any node is touched: otherwise the first job's exec fails mid-run.
            raise InputError(
                "--transport slurm: srun is not on PATH",
                "run on the Slurm head node or a login node (where srun works), or use --transport ssh",
            )
        # Each step asks for its node's GPUs (catalog by instance type, else Slurm's Gres=):
        # under ConstrainDevices=yes a step without --gres sees none.
        return SlurmTransport(SlurmClient(partition=partition, gres=gres_by_node(inv.nodes)))
    if kind == "local":
        if len(inv.nodes) != 1:
            raise InputError(
                f"--transport local: the inventory lists {len(inv.nodes)} nodes; local runs on this machine only",
                "list exactly the node you are on, or use --transport ssh",
            )
        return LocalTransport()
    # paramiko imports invoke for ssh_config's `Match exec`, which gpuforge never reads; invoke
    # brings unittest.mock and asyncio, ~0.2 s of CPU before the first result (bench/ssh_profile.py).
    sys.modules.setdefault("invoke", None)  # type: ignore[arg-type]
    from gpuforge.validate.ssh import SshTransport

    # one live connection per node in flight: the pool never holds more than --workers
    return SshTransport(inv.ssh, timeouts, accept_new=accept_new, max_connections=workers)


def _kubernetes_results(kubeconfig: Path, inv: Inventory) -> list[CheckResult]:
    from gpuforge.validate.kubernetes import expect_from_profile, run_kubernetes_checks

    if not inv.profile:
        raise InputError(
            "--kubeconfig needs the inventory's `profile` (it sets the expected GPU shares)",
            "add `profile: nlp-inference` (or another profile) to the inventory",
        )
    try:
        expect = expect_from_profile(inv.profile)
    except KeyError as exc:  # unknown profile or instance type
        raise InputError(f"inventory profile {inv.profile!r}: {exc}", "use a profile from core/profiles/") from None
    return run_kubernetes_checks(str(kubeconfig), expect)


def _save_baseline(path: Path, inv: Inventory, report: Report) -> None:
    if report.failed():
        raise InputError(
            f"--save-baseline {path}: not saved, the run has error/unknown results",
            "fix the cluster (or narrow --checks) and save a baseline from a clean run",
        )
    from gpuforge.validate import thresholds
    types = {n.instance_type for n in inv.nodes}
    thresholds.save_baseline(
        path,
        thresholds.baseline_figures(report.results),
        profile=inv.profile,
        instance_type=types.pop() if len(types) == 1 else None,
    )


@click.command("validate")
@click.option("--inventory", "inventory_path", default=None, help="Inventory YAML/JSON file, or - for stdin.")
@click.option("--discover", "discover_stack", default=None, metavar="STACK",
              help="Find the stack's running instances in EC2 by tag (project=gpuforge, stack=STACK) instead.")  # fmt: skip
@click.option("--region", default=None, help="AWS region for --discover (default: the AWS config's).")
@click.option("--ssh-user", default=None, help="SSH user (overrides the inventory's ssh.user).")
@click.option("--ssh-key", "ssh_key", default=None, help="SSH private key file (overrides ssh.key_file).")
@click.option("--known-hosts", default=None, help="known_hosts file (overrides ssh.known_hosts).")
@click.option("--checks", default=None, help="Comma-separated checks or groups (e.g. gpu,network,nccl.local; "
                                             "slurm.accounting with --transport slurm).")  # fmt: skip
@format_option
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write JUnit XML here.")
@click.option("--html", "html_page", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a self-contained HTML report here: node verdicts, bandwidth heatmap, NCCL busbw, evidence links.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Evidence directory (default: ./gpuforge-evidence/<UTC time>).")  # fmt: skip
@click.option(
    "--save-baseline",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="After a clean run, save its measured figures here as the cluster's baseline.",
)
@click.option(
    "--baseline",
    type=click.Path(path_type=Path, readable=False),
    default=None,
    help="Judge against a saved baseline instead of the profile/catalog thresholds.",
)
@click.option("--accept-new-host-keys", is_flag=True, help="Trust unknown host keys, add them to known_hosts.")
@click.option("--transport", "transport_kind", type=click.Choice(["ssh", "local", "slurm"]), default="ssh", show_default=True,
              help="slurm: each node check as `srun -w NODE`; run it where srun works (the head node). "
                   "Inventory names are Slurm NodeNames.")  # fmt: skip
@click.option("--slurm-partition", default=None, help="Partition for --transport slurm (default: the cluster's default).")
@click.option("--schedule", type=click.Choice(["ring", "full"]), default="ring", show_default=True,
              help="ring: constant rounds to name a slow node; full: every pair (node x node matrix).")  # fmt: skip
@click.option("--iperf-seconds", type=click.FloatRange(1, 60), default=5.0, show_default=True)
@click.option("--connect-timeout", type=click.FloatRange(0.5, 120), default=5.0, show_default=True,
              help="Bound for each of TCP connect, banner, auth and channel open.")  # fmt: skip
@click.option("--workers", type=click.IntRange(1, 512), default=32, show_default=True,
              help="Nodes validated at once; at most this many live SSH connections (fewer under a low ulimit -n).")
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path, readable=False),
    default=None,
    help="Also check the cluster's Kubernetes GPU layer (validate/kubernetes.py) through this kubeconfig.",
)
@project_dir_option
def command(
    inventory_path: str | None,
    discover_stack: str | None,
    region: str | None,
    ssh_user: str | None,
    ssh_key: str | None,
    known_hosts: str | None,
    checks: str | None,
    fmt: str,
    junit: Path | None,
    html_page: Path | None,
    out: Path | None,
    save_baseline: Path | None,
    baseline: Path | None,
    accept_new_host_keys: bool,
    transport_kind: str,
    schedule: str,
    iperf_seconds: float,
    connect_timeout: float,
    workers: int,
    kubeconfig: Path | None = None,
    slurm_partition: str | None = None,
    project_dir: Path | None = None,
) -> None:
    """Prove a running cluster before anyone trains on it, and name the bad node.

    Tier 0 gates every node first (reachable, GPUs present and identical, bootstrap done, EFA
    provider); nodes that fail them take no part in pair tests. Then GPU health, topology and
    compute checks per node, iperf3/ping and NCCL between node pairs on a schedule of disjoint
    pairs, and localisation: a slow node (all its pairs low), a slow link (one pair low) or a
    slow fabric. Thresholds come from the inventory's profile and the catalog, each with its
    source; missing or unparsable evidence is `unknown`, never `pass`.

    \b
    Exit: 0 all passed, 1 a check failed or was unknown, 2 bad input, 130 interrupted (Ctrl-C;
    a report already begun in --out is kept with "interrupted": true in its context).
    \b
    Examples:
      pulumi stack output --json inventory | gpuforge validate --inventory - --ssh-key ~/.ssh/id_ed25519
      gpuforge validate --discover risk-sim --region us-east-1 --junit validate.xml
      gpuforge validate --inventory onprem.yaml --checks network --schedule full
      gpuforge validate --inventory inv.yaml --save-baseline baseline.json   # on a healthy cluster
    """
    inv = _load(inventory_path, discover_stack, region, {"user": ssh_user, "key_file": ssh_key, "known_hosts": known_hosts})
    # Every output is checked before the run: a path that cannot be written must not fail a finished run.
    for flag, page in (("--html", html_page), ("--junit", junit), ("--save-baseline", save_baseline)):
        if page is not None:
            inputfile.check_output_file(page, flag)
    if kubeconfig is not None:
        inputfile.check_path(kubeconfig, inputfile.KUBECONFIG, "--kubeconfig")
    tokens = [t.strip() for t in checks.split(",") if t.strip()] if checks else None
    selected, network = _select(tokens, system_checks(network=True) + _registry_checks())
    if transport_kind != "slurm" and tokens and any(t in ("slurm", "slurm.accounting") for t in tokens):
        # asked for by name, it must run or say why: it asks the controller (sacctmgr, sdiag), not a node
        raise InputError(
            "--checks slurm.accounting: runs only with --transport slurm (it asks the cluster's controller, not a node)",
            "add --transport slurm and run where srun works (the head node), or drop it from --checks",
        )
    network = network and transport_kind == "ssh" and len(inv.nodes) >= 2
    if not network:  # without pair tests a missing iperf3 is no fault of the node
        selected = [c for c in selected if c.name != "system.network_tools"]
    expect = _expectations(inv, baseline)
    t = connect_timeout
    try:
        transport = _transport(transport_kind, inv, accept_new_host_keys, Timeouts(t, t, t, t), slurm_partition, workers)
    except InputError as exc:
        if ssh_key is None:
            raise
        # The key came from the flag, so say the flag (the inventory's ssh.key_file was overridden).
        raise InputError(exc.message.replace("ssh.key_file", "--ssh-key"),
                         exc.hint.replace("ssh.key_file", "--ssh-key") if exc.hint else None) from None
    out = out or Path("gpuforge-evidence") / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    inputfile.check_output_dir(out, "--out")
    nccl_pairs = (
        transport_kind in ("ssh", "slurm")  # slurm: one srun --mpi=pmix allocation per pair
        and len(inv.nodes) >= 2
        and (tokens is None or any(t in ("nccl", "nccl.pair") for t in tokens))
    )
    opts = RunOptions(
        network=network,
        nccl_pairs=nccl_pairs,
        schedule=schedule,
        iperf=IperfSettings(duration_s=iperf_seconds),
        max_workers=workers,
        evidence_dir=out,
    )
    runner: Runner | None = None
    try:
        with LiveProgress() as progress:
            runner = Runner(inv, transport, selected, expect, options=opts, progress=progress)
            result = runner.run()
    except KeyboardInterrupt:
        # Ctrl-C: close the SSH sessions first (workers blocked on them end), then leave either
        # nothing or a report that says it is partial, never one that reads as complete.
        transport.close()
        if runner is not None and out.exists():
            runner.report.context.update({"interrupted": True, "evidence_dir": str(out)})
            atomic_write(out / "report.json", runner.report.to_json() + "\n")
        raise
    finally:
        transport.close()
    if kubeconfig is not None:
        result.report.add(_kubernetes_results(kubeconfig, inv))
    if transport_kind == "slurm" and (tokens is None or any(t in ("slurm", "slurm.accounting") for t in tokens)):
        # the cluster's accounting store (slurmdbd): a cluster-level finding, never a node's
        from gpuforge.validate.accounting import accounting_results

        result.report.add(accounting_results())
    accepted = getattr(transport, "accepted_keys", [])
    if accepted:
        result.report.context["accepted_host_keys"] = accepted
    result.report.context["evidence_dir"] = str(out)
    write_outputs(out, result, accepted)
    if junit is not None:
        result.report.write_junit(junit)
    if html_page is not None:
        from gpuforge.htmlreport import write_html

        write_html(result.report, out, html_page)
        click.echo(f"report: {html_page}", err=True)
    render(result, fmt)
    if save_baseline is not None:
        _save_baseline(save_baseline, inv, result.report)
    click.echo(f"evidence: {out}", err=True)
    raise SystemExit(result.report.exit_code())
