"""Health checks that act: validate's tier-0/1 node checks run on the node itself as Slurm's
HealthCheckProgram, and the node is drained with the failing check's own reason, or resumed when
it passes again.

Rules (issue 14, issue 19: a rule that acts on any cluster size):
- an `error` result drains the node: reason `gpuforge-health: <check>: <message>`;
- missing evidence never drains: `unknown` results (nvidia-smi lists no GPU rows, a tool is
  missing, output not understood, the command timed out) are logged as a drain held back, and the
  node stays as it is. A node drained by us is not resumed while the evidence of the check its
  drain names is unknown;
- a node drained by gpuforge is resumed when the check its drain names passes again and no check
  fails (unknown evidence of other checks did not drain it and does not keep it drained); a node
  drained by anyone else (another reason) is never touched;
- a check failing on every node at once is a finding about the check or the fabric, not that
  many broken nodes: when every other node of a cluster of two or more is already drained by the
  health check for the same check, the last one is not drained, and the log says why;
- the bound: at most `max(1, floor(nodes x max_drained_percent / 100))` nodes drained by the
  health check at once. At least one, so a one-node cluster's node with a failed GPU is drained
  (floor alone is 0 for one to three nodes at 25 %); past it, one broken check (a driver update
  that changes nvidia-smi's output, say) is likelier than that many broken nodes, and a check
  must not empty the partition. It says so instead, naming the bound.
Every transition (and every decision not to act) is one JSON line in the log.

Concurrency (issue 19): slurmctld asks every node for its health check at once (Slurm 22.05
src/slurmctld/ping_nodes.c run_health_check: one REQUEST_HEALTH_CHECK agent to all nodes), and
the nodes share nothing but the controller. Two nodes that both read sinfo before either drains
would both drain past the bound. So a drain is confirmed against the controller (`steps`):
drain, wait SETTLE_S, read sinfo again, and decide once more as if the health-check drains had
been made one at a time in the order of (reason time, node name); a node that the rules would
not have drained in that order resumes its own drain ("undo"). The outcome is that of the
sequential run in that order, because slurmctld stamps each reason with its own clock
(node_mgr.c update_node, under the node write lock) and the second read reaches slurmctld more
than a second after our drain: every drain stamped at or before ours (whole seconds) was made
before that read and is in it, and any drain not in it is stamped later and ranks after ours.
So what a node sees ahead of itself is complete and final, and the nodes agree on the order.
For at most SETTLE_S plus a read, more nodes than the bound may be drained; a drain stops new
jobs only, so that window costs scheduling, never a running job. It assumes slurmctld's clock
does not step back during those seconds.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck
from gpuforge.validate.inventory import Node
from gpuforge.validate.slurm import NodeStatus, SlurmError
from gpuforge.validate.transport import LocalTransport, Outcome, Transport

REASON_PREFIX = "gpuforge-health:"  # bootstrap/slurm.py HEALTH_DRAIN_PREFIX: the only drains it resumes
MAX_REASON = 200  # scontrol keeps the reason whole; sinfo shows the start, so the check's name comes first
HEALTH_TIERS = (0, 1)
# After our own drain, how long to wait before reading sinfo again: more than the one second of
# Slurm's reason timestamps, so every drain stamped at or before ours has been made (see above).
SETTLE_S = 2.0
READ, SETTLE = "read", "settle"  # what `steps` asks of its driver besides acting on a Decision


class Controller(Protocol):
    """The node states the health check reads and changes (validate/slurm.py SlurmControl)."""

    def nodes(self) -> dict[str, NodeStatus]: ...
    def drain(self, node: str, reason: str) -> None: ...
    def resume(self, node: str) -> None: ...


@dataclass(frozen=True)
class Decision:
    # drain | resume | none | held (a drain the bound or unknown evidence held back) |
    # undo (our own drain resumed: in the controller's order the rules would not have made it)
    action: str
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
    ours = me if me is not None and me.drained and me.reason.startswith(REASON_PREFIX) else None  # drained by us
    if not errors:
        named = _drained_for(ours.reason) if ours is not None else None
        if ours is not None and named is not None and any(r.check == named for r in res) and named not in {
            r.check for r in unknown
        }:
            # The check it was drained for passes again and nothing fails. Evidence that is unknown
            # now was no reason to drain, so it is no reason to keep the drain either.
            rest = f"; evidence unknown for {', '.join(sorted({r.check for r in unknown}))}" if unknown else ""
            return Decision("resume", f"{named} passes again and no check fails (was: {ours.reason}){rest}", res)
        if unknown:
            names = ", ".join(sorted({r.check for r in unknown}))
            kept = f"; stays drained ({me.reason})" if me is not None and me.drained else ""
            return Decision("held", f"not draining {node}: evidence unknown for {names}, and missing evidence "
                                    f"never drains{kept}", res)  # fmt: skip
        if ours is not None:
            return Decision("resume", f"every health check passes again (was: {ours.reason})", res)
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


def _ours(s: NodeStatus) -> bool:
    return s.drained and s.reason.startswith(REASON_PREFIX)


def view_before(node: str, status: dict[str, NodeStatus]) -> dict[str, NodeStatus]:
    """The cluster as a one-at-a-time run would have shown it to `node` just before its drain:
    `node` not yet drained, and every health-check drain ordered after its own (reason time, then
    name) not yet made. A drain whose time sinfo cannot say counts as made before ours; if ours
    has no time, every other one does: a wrong order can only hold a drain back, never add one."""
    me = status[node]
    mine = (me.reason_time if me.reason_time is not None else math.inf, node)
    view: dict[str, NodeStatus] = {}
    for name, s in status.items():
        later = _ours(s) and (s.reason_time if s.reason_time is not None else -math.inf, name) > mine
        view[name] = NodeStatus(name, "idle", "none") if name == node or later else s  # idle: not drained
    return view


def steps(node: str, results: Sequence[CheckResult], *, max_drained_percent: int
          ) -> Generator[str | Decision, dict[str, NodeStatus] | None, Decision]:  # fmt: skip
    """The health check against a shared controller: yields READ (send back every node's
    status), SETTLE (wait SETTLE_S) or a Decision to act on; returns the final decision."""
    status = yield READ
    assert status is not None
    first = decide(node, results, status, max_drained_percent=max_drained_percent)
    yield first
    if first.action != "drain":
        return first
    yield SETTLE
    after = yield READ
    assert after is not None
    me = after.get(node)
    if me is None or not me.drained or me.reason != first.reason:
        return first  # changed since (resumed, or drained by someone else): not ours to confirm or undo
    view = view_before(node, after)
    again = decide(node, results, view, max_drained_percent=max_drained_percent)
    if again.action == "drain":
        return first
    ahead = sorted(n for n, v in view.items() if _ours(v))
    undo = Decision("undo", f"{again.reason}; this node's own drain resumed: the drains of {', '.join(ahead) or 'none'} "
                            "came first in the controller's order (reason time, then name)", tuple(results))  # fmt: skip
    yield undo
    return undo


def run_steps(node: str, results: Sequence[CheckResult], control: Controller,
              log: Callable[[dict[str, Any]], None], *, max_drained_percent: int,
              settle_s: float = SETTLE_S, sleep: Callable[[float], None] = time.sleep) -> Decision:  # fmt: skip
    """`steps` against the controller through sinfo/scontrol: what the HealthCheckProgram does."""
    gen = steps(node, results, max_drained_percent=max_drained_percent)
    reply: dict[str, NodeStatus] | None = None
    while True:
        try:
            step = gen.send(reply)
        except StopIteration as stop:
            final: Decision = stop.value
            return final
        reply = None
        if step == READ:
            reply = control.nodes()
        elif step == SETTLE:
            sleep(settle_s)
        elif isinstance(step, Decision):
            act(node, step, control, log)


def act(node: str, decision: Decision, control: Controller, log: Callable[[dict[str, Any]], None]) -> None:
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
        elif decision.action in ("resume", "undo"):
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
