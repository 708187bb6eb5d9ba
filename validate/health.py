"""Health checks that act: validate's tier-0/1 node checks run on the node itself as Slurm's
HealthCheckProgram, and the node is drained with the failing check's own reason, or resumed when
it passes again.

Rules (issue 14, issue 19: a rule that acts on any cluster size):
- an `error` result drains the node: reason `gpuforge-health: <check>: <message>`;
- missing evidence never drains: `unknown` results (nvidia-smi lists no GPU rows, a tool is
  missing, output not understood, the command timed out) are logged as a drain held back, and the
  node stays as it is. A node drained by us is not resumed while its evidence is unknown;
- a node drained by gpuforge is resumed when every check passes again; a node drained by
  anyone else (another reason) is never touched;
- a check failing on every node at once is a finding about the check or the fabric, not that
  many broken nodes: when every other node of a cluster of two or more is already drained by the
  health check for the same check, the last one is not drained, and the log says why;
- the bound: at most `max(1, floor(nodes x max_drained_percent / 100))` nodes drained by the
  health check at once. At least one, so a one-node cluster's node with a failed GPU is drained
  (floor alone is 0 for one to three nodes at 25 %); past it, one broken check (a driver update
  that changes nvidia-smi's output, say) is likelier than that many broken nodes, and a check
  must not empty the partition. It says so instead, naming the bound.
Every transition (and every decision not to act) is one JSON line in the log.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck
from gpuforge.validate.inventory import Node
from gpuforge.validate.slurm import NodeStatus, SlurmControl, SlurmError
from gpuforge.validate.transport import LocalTransport, Outcome, Transport

REASON_PREFIX = "gpuforge-health:"  # bootstrap/slurm.py HEALTH_DRAIN_PREFIX: the only drains it resumes
MAX_REASON = 200  # scontrol keeps the reason whole; sinfo shows the start, so the check's name comes first
HEALTH_TIERS = (0, 1)


@dataclass(frozen=True)
class Decision:
    action: str  # drain | resume | none | held (a drain the bound or unknown evidence held back)
    reason: str
    results: tuple[CheckResult, ...]

    @property
    def exit_code(self) -> int:
        """0: the node is healthy (or resumed); 1: it failed or its evidence is unknown."""
        return 0 if self.action in ("resume", "none") and not _bad(self.results) else 1


def _bad(results: Sequence[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.level in (Level.ERROR, Level.UNKNOWN)]


def health_checks(checks: Sequence[NodeCheck[Any]]) -> list[NodeCheck[Any]]:
    """The tier-0/1 checks: cheap, read-only, no GPU work (no compute or NCCL benchmark)."""
    return [c for c in checks if c.tier in HEALTH_TIERS]


def run_checks(node: str, checks: Sequence[NodeCheck[Any]], expect: Expectations,
               transport: Transport | None = None) -> list[CheckResult]:
    """Each check's command on this node (tiers in order; a failed tier 0 skips tier 1)."""
    transport = transport or LocalTransport()
    target = Node(name=node, host="localhost")
    results: list[CheckResult] = []
    for tier in sorted({c.tier for c in checks}):
        if tier > min(HEALTH_TIERS) and any(r.level is Level.ERROR for r in results):
            break  # the gate failed: its reason is the one to drain with
        for check in (c for c in checks if c.tier == tier):
            res = transport.run(target, check.command(), check.timeout_s)
            if res.outcome is not Outcome.OK:
                why = f"{res.outcome.value}: {res.detail}"
                results.append(CheckResult(check.name, Level.UNKNOWN, (node,), None, None, why))
            elif res.exit_code != 0 and not res.stdout.strip():
                tail = (res.stderr.strip().splitlines() or [""])[-1]
                msg = f"exit {res.exit_code}, no output: {tail}"
                results.append(CheckResult(check.name, Level.UNKNOWN, (node,), None, None, msg))
            else:
                results.extend(check.judge(node, res.stdout, expect)[0])
    return results


def _reason(failed: Sequence[CheckResult]) -> str:
    first = failed[0]
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    unknown = "unknown evidence: " if first.level is Level.UNKNOWN else ""
    text = f"{REASON_PREFIX} {unknown}{first.check}: {first.message}{more}"
    # scontrol takes the reason as one argument; keep it on one line and bounded.
    return " ".join(text.split())[:MAX_REASON]


def _drained_for(reason: str) -> str | None:
    """The check a gpuforge drain reason names (`gpuforge-health: [unknown evidence: ]<check>: ...`)."""
    if not reason.startswith(REASON_PREFIX):
        return None
    rest = reason[len(REASON_PREFIX):].strip().removeprefix("unknown evidence:").strip()
    return rest.split(":", 1)[0].strip() or None


def allowed_drains(total: int, max_drained_percent: int) -> int:
    """How many nodes the health check may hold drained at once: at least one, so any cluster,
    one node included, can lose a broken node; otherwise the percentage, rounded down."""
    return max(1, math.floor(total * max_drained_percent / 100)) if total else 0


def decide(
    node: str,
    results: Sequence[CheckResult],
    status: dict[str, NodeStatus],
    *,
    max_drained_percent: int,
) -> Decision:
    """Pure: what to do with `node` given its results and every node's Slurm state."""
    res = tuple(results)
    errors = [r for r in res if r.level is Level.ERROR]
    unknown = [r for r in res if r.level is Level.UNKNOWN]
    me = status.get(node)
    ours = me is not None and me.drained and me.reason.startswith(REASON_PREFIX)
    if not errors:
        if unknown:
            names = ", ".join(sorted({r.check for r in unknown}))
            kept = f"; stays drained ({me.reason})" if me is not None and me.drained else ""
            return Decision("held", f"not draining {node}: evidence unknown for {names}, and missing evidence "
                                    f"never drains{kept}", res)  # fmt: skip
        if ours:
            return Decision("resume", f"every health check passes again (was: {me.reason})", res)  # type: ignore[union-attr]
        return Decision("none", "healthy", res)
    reason = _reason(errors)
    if me is not None and me.drained:
        # Already drained: by us (keep it so, one reason), or by someone else (never ours to change).
        return Decision("none", f"already drained ({me.reason})", res)
    total = len(status)
    failing = {r.check for r in errors}
    others = [s for n, s in status.items() if n != node]
    same = [s.name for s in others if s.drained and _drained_for(s.reason) in failing]
    if total >= 2 and others and len(same) == len(others):
        checks = ", ".join(sorted(failing))
        return Decision(
            "held",
            f"not draining {node} ({reason}): {checks} fails on every node of the cluster ({total}); that is a "
            "finding about the check or the fabric, not a reason to drain them all",
            res,
        )
    already = sum(1 for s in status.values() if s.drained and s.reason.startswith(REASON_PREFIX))
    allowed = allowed_drains(total, max_drained_percent)
    if already + 1 > allowed:
        return Decision(
            "held",
            f"not draining {node} ({reason}): {already} of {total} node(s) already drained by the health check and "
            f"the bound is {max_drained_percent}% (at least one: {allowed} node(s)); a broken check is likelier "
            "than that many broken nodes, look at the check",
            res,
        )
    return Decision("drain", reason, res)


def act(node: str, decision: Decision, control: SlurmControl, log: Callable[[dict[str, Any]], None]) -> None:
    """Apply the decision through scontrol and log it (every transition and every held drain)."""
    entry: dict[str, Any] = {
        "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "node": node,
        "action": decision.action,
        "reason": decision.reason,
        "failing": [{"check": r.check, "level": r.level.value, "message": r.message} for r in _bad(decision.results)],
    }
    try:
        if decision.action == "drain":
            control.drain(node, decision.reason)
        elif decision.action == "resume":
            control.resume(node)
    except SlurmError as exc:
        entry["error"] = str(exc)
        log(entry)
        raise
    if decision.action != "none" or _bad(decision.results):
        log(entry)


def file_logger(path: Path | None, echo: Callable[[str], None]) -> Callable[[dict[str, Any]], None]:
    """One JSON line per entry, appended to `path` (when given) and echoed."""

    def write(entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True)
        echo(line)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as f:
                f.write(line + "\n")

    return write
