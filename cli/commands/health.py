"""`gpuforge health-check`: Slurm's HealthCheckProgram (slurm.conf, rendered by bootstrap/slurm.py).

Runs validate's tier-0 node checks on this node and drains it through scontrol with the failing
check's reason, or resumes it when it passes again (rules: validate/health.py). Exit 0 healthy or
resumed, 1 failing (drained, or a drain held back: unknown evidence, the bound, a check failing on
every node), 2 bad input.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import click

from gpuforge.commands.options import project_dir_option
from gpuforge.common import inputfile
from gpuforge.common.errors import InputError
from gpuforge.validate.checks import Expectations, NodeCheck

# /etc/gpuforge/expected.json as bootstrap writes it (bootstrap/plan.py NodePlan.expected;
# tests/cli/test_input_files.py checks these against a rendered node's file).
EXPECTED_KEYS = ("node", "stack", "profile", "expect", "versions")
EXPECTED_EXPECT_KEYS = ("instance_type", "gpu_count", "gpu_name", "nvswitch", "efa_interfaces", "scratch_mount",
                        "data_mount", "mig_layout", "driver_preinstalled")  # fmt: skip


def _read_expected(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = inputfile.read_document(path, inputfile.EXPECTED, "--expected")
    inputfile.refuse_unknown_keys(doc, EXPECTED_KEYS, f"--expected {path}")
    expect = doc.get("expect")
    if expect is not None and not isinstance(expect, dict):
        raise InputError(f"--expected {path}: expect: must be a mapping, not {type(expect).__name__}", inputfile.EXPECTED.example)
    inputfile.refuse_unknown_keys(expect or {}, EXPECTED_EXPECT_KEYS, f"--expected {path}", "expect.")
    return doc


def _expectations(inventory: Path | None, expected: Path | None, node: str) -> Expectations:
    from gpuforge.validate import thresholds

    if (inventory is None) == (expected is None):
        raise InputError("pass exactly one of --inventory FILE and --expected FILE",
                         "--expected /etc/gpuforge/expected.json on gpuforge nodes, --inventory elsewhere")  # fmt: skip
    try:
        if expected is not None:
            doc = _read_expected(expected)
            return thresholds.build_expectations(doc.get("profile"), (doc.get("expect") or {}).get("instance_type"))
        from gpuforge.validate.inventory import load_inventory

        assert inventory is not None
        inv = load_inventory(str(inventory))
        me = next((n for n in inv.nodes if n.name == node), None)
        if me is None:
            raise InputError(f"--node {node}: not in {inventory}", "pass the node's inventory name (its Slurm NodeName)")
        overrides = inv.expect.stated() if inv.expect else {}
        return thresholds.build_expectations(inv.profile, me.instance_type, overrides)
    except thresholds.ThresholdsError as exc:
        raise InputError(f"{expected or inventory}: {exc}", "use a profile or instance type from the catalog") from None


def _check_log_writable(path: Path) -> None:
    """Before any check runs or any node state changes: a log that cannot be written would
    otherwise fail after a drain was already made, with no record of it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a"):
            pass
    except OSError as exc:
        raise InputError(f"--log {path}: cannot write it: {(exc.strerror or str(exc)).lower()}",
                         "pass a path this user may write (the default under /var/log needs root)") from None


def _checks(tokens: str | None) -> list[NodeCheck[Any]]:
    from gpuforge.validate.health import HEALTH_TIERS
    from gpuforge.validate.registry import node_checks

    every = node_checks()
    if not tokens:
        return [c for c in every if c.tier == min(HEALTH_TIERS)]
    wanted = [t.strip() for t in tokens.split(",") if t.strip()]
    chosen = [c for c in every if c.tier in HEALTH_TIERS and any(c.name == t or c.name.startswith(t + ".") for t in wanted)]
    if not chosen:
        names = ", ".join(c.name for c in every if c.tier in HEALTH_TIERS)
        raise InputError(f"--checks {tokens}: no tier-0/1 check matches", f"choose from: {names}")
    return chosen


@click.command("health-check")
@click.option("--node", default=None, help="This node's Slurm NodeName (default: $SLURMD_NODENAME, else the short hostname).")
@click.option("--expected", type=click.Path(path_type=Path, readable=False), default=None,
              help="The node's /etc/gpuforge/expected.json (profile and instance type).")  # fmt: skip
@click.option("--inventory", type=click.Path(path_type=Path, readable=False), default=None,
              help="Or an inventory file listing this node (its expect: section applies).")  # fmt: skip
@click.option("--checks", default=None,
              help="Checks or groups (default: every tier-0 check). Tier-1 ones run GPU work: "
                   "use them with HealthCheckNodeState=IDLE.")  # fmt: skip
@click.option("--max-drained-percent", type=click.IntRange(1, 100), default=25, show_default=True,
              help="Never drain past this share of the cluster (one node always may be drained).")  # fmt: skip
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("/var/log/gpuforge/health-check.log"), show_default=True,
              help="JSON line per transition.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Decide and log, change no node state.")
@project_dir_option
def command(
    node: str | None,
    expected: Path | None,
    inventory: Path | None,
    checks: str | None,
    max_drained_percent: int,
    log_path: Path,
    dry_run: bool,
    project_dir: Path | None = None,
) -> None:
    """Drain this node with the failing check's reason; resume it when the checks pass again."""
    from gpuforge.validate.health import decide, file_logger, health_checks, run_checks, run_steps
    from gpuforge.validate.slurm import SlurmControl, SlurmError

    name = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    expect = _expectations(inventory, expected, name)
    _check_log_writable(log_path)
    selected = health_checks(_checks(checks))
    results = run_checks(name, selected, expect)
    control = SlurmControl()
    log = file_logger(log_path, lambda line: click.echo(line, err=True))
    if dry_run:
        try:
            status = control.nodes()
        except SlurmError as exc:
            log({"node": name, "action": "none", "reason": f"cannot read node states, changed nothing: {exc}"})
            raise SystemExit(1) from None
        decision = decide(name, results, status, max_drained_percent=max_drained_percent)
        log({"node": name, "action": f"{decision.action} (dry run)", "reason": decision.reason})
        raise SystemExit(decision.exit_code)
    try:
        # drain, then confirm it against the controller's order (validate/health.py: concurrency)
        decision = run_steps(name, results, control, log, max_drained_percent=max_drained_percent)
    except SlurmError as exc:
        log({"node": name, "action": "none", "reason": f"a Slurm call failed, stopped there: {exc}"})
        raise SystemExit(1) from None
    raise SystemExit(decision.exit_code)
