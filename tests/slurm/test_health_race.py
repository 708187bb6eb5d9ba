"""The health check's drain under concurrency (issue 19): slurmctld asks every node at once
(Slurm 22.05 ping_nodes.c run_health_check), the nodes share only the controller, and two nodes
that read sinfo before either drains must not both drain past the bound.

Two levels:
- `steps` (validate/health.py) against a model of the controller, over every interleaving of
  the nodes' controller calls, with the controller's clock in whole seconds as Slurm stamps
  reasons (node_mgr.c update_node `reason_time = now`): ties in the same second, and one second
  per call;
- `gpuforge health-check` itself: test_health_race_cli.py; on the real daemons,
  test_slurm_testbed.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.health import READ, REASON_PREFIX, SETTLE, Decision, steps, view_before
from gpuforge.validate.slurm import NodeStatus


def _bad(node: str, check: str = "gpu.count") -> list[CheckResult]:
    return [CheckResult(check, Level.ERROR, (node,), 1, 8, "1 GPUs visible, expected 8")]


class Controller:
    """slurmctld as far as the health check sees it: node states, reasons stamped in whole
    seconds of its own clock, each call atomic (slurmctld's node lock)."""

    def __init__(self, names: list[str], drained: dict[str, tuple[str, int]] | None = None) -> None:
        self.now = 1000
        self.state: dict[str, NodeStatus] = {n: NodeStatus(n, "idle", "none") for n in names}
        for n, (reason, t) in (drained or {}).items():
            self.state[n] = NodeStatus(n, "drained", reason, t)

    def read(self) -> dict[str, NodeStatus]:
        return dict(self.state)

    def apply(self, node: str, d: Decision) -> None:
        if d.action == "drain":
            self.state[node] = NodeStatus(node, "drained", d.reason, self.now)
        elif d.action in ("resume", "undo"):
            self.state[node] = NodeStatus(node, "idle", "none")

    def ours(self) -> list[str]:
        return sorted(n for n, s in self.state.items() if s.drained and s.reason.startswith(REASON_PREFIX))


class Run:
    """One node's `steps`, paused before each controller call."""

    def __init__(self, node: str, results: list[CheckResult], pct: int) -> None:
        self.node = node
        self.gen = steps(node, results, max_drained_percent=pct)
        self.pending: str | Decision | None = next(self.gen)
        self.settled_after: int | None = None  # the controller second of our drain, once we wait
        self.final: Decision | None = None

    def _send(self, reply: dict[str, NodeStatus] | None) -> None:
        try:
            self.pending = self.gen.send(reply)
        except StopIteration as stop:
            self.pending, self.final = None, stop.value

    def local(self, ctl: Controller) -> None:
        """Steps that touch nothing shared: a decision that changes no state, the wait."""
        while self.pending is not None:
            p = self.pending
            if p == SETTLE:
                self.settled_after = ctl.now
                self._send(None)
            elif isinstance(p, Decision) and p.action in ("none", "held"):
                self._send(None)
            else:
                return

    def call(self, ctl: Controller, tick: bool) -> None:
        """The next controller call; a read after our wait comes more than a second later."""
        p = self.pending
        if p == READ:
            if self.settled_after is not None:
                ctl.now = max(ctl.now, self.settled_after + 1)
            self._send(ctl.read())
        else:
            assert isinstance(p, Decision)
            ctl.apply(self.node, p)
            self._send(None)
        if tick:
            ctl.now += 1


def schedules(counts: list[int]) -> Iterator[list[int]]:
    """Every interleaving of len(counts) sequences of counts[i] calls."""
    if not any(counts):
        yield []
        return
    for i, c in enumerate(counts):
        if c:
            rest = [*counts[:i], c - 1, *counts[i + 1:]]
            for tail in schedules(rest):
                yield [i, *tail]


def _play(names: list[str], failing: dict[str, list[CheckResult]], pct: int, order: list[int], tick: bool,
          drained: dict[str, tuple[str, int]] | None = None) -> tuple[Controller, list[Run]]:  # fmt: skip
    ctl = Controller(names, drained)
    runs = [Run(n, failing.get(n, []), pct) for n in names if n in failing]
    for r in runs:
        r.local(ctl)
    for i in order:
        r = runs[i]
        if r.pending is None:
            continue  # this node finished in fewer calls (no undo): its slot is a no-op
        r.call(ctl, tick)
        r.local(ctl)
    for r in runs:  # whatever is left, in order
        while r.pending is not None:
            r.call(ctl, tick)
            r.local(ctl)
    return ctl, runs


# a node's calls: read, drain, read again, undo (at most four)
CALLS = 4


@pytest.mark.parametrize("tick", [False, True], ids=["same-second", "a-second-per-call"])
def test_three_nodes_failing_at_once_under_a_bound_of_one_drain_exactly_one(tick: bool) -> None:
    names = ["n1", "n2", "n3"]
    failing = {n: _bad(n) for n in names}
    seen = 0
    for order in schedules([CALLS] * 3):
        ctl, runs = _play(names, failing, 50, order, tick)  # max(1, floor(3 x 50 %)) = 1
        assert len(ctl.ours()) == 1, (order, ctl.state)
        kept = ctl.ours()[0]
        actions = {r.node: r.final.action for r in runs if r.final}
        assert actions[kept] == "drain" and all(a in ("undo", "held") for n, a in actions.items() if n != kept), actions
        seen += 1
    assert seen == 34650  # 12! / (4!)^3: every interleaving was played


def test_the_every_node_rule_holds_under_concurrency_too() -> None:
    """Bound 100 %: the bound alone would drain all three; the last one is a finding, not a drain."""
    names = ["n1", "n2", "n3"]
    failing = {n: _bad(n) for n in names}
    for order in schedules([CALLS] * 3):
        ctl, _ = _play(names, failing, 100, order, tick=False)
        assert len(ctl.ours()) == 2, (order, ctl.state)


def test_a_drain_already_there_keeps_its_place_and_a_free_slot_is_filled() -> None:
    """Four nodes at 50 %: two may be drained. n4 was drained earlier; of n1..n3 failing at once,
    exactly one more is drained, whatever the interleaving; a different check counts the same."""
    names = ["n1", "n2", "n3", "n4"]
    failing = {n: _bad(n, "gpu.xid") for n in ("n1", "n2", "n3")}
    earlier = {"n4": (f"{REASON_PREFIX} gpu.count: 1 GPUs visible, expected 8", 900)}
    for order in schedules([CALLS] * 3):
        ctl, _ = _play(names, failing, 50, order, tick=False, drained=earlier)
        assert "n4" in ctl.ours() and len(ctl.ours()) == 2, (order, ctl.state)


def test_nodes_that_fail_one_after_another_are_not_undone() -> None:
    """No concurrency: one node drained, its check resolved alone; the next failing node alone
    sees the bound (held, no drain at all)."""
    ctl, runs = _play(["n1", "n2", "n3"], {"n1": _bad("n1"), "n2": _bad("n2")}, 50, [0] * CALLS + [1] * CALLS, tick=True)
    assert ctl.ours() == ["n1"]
    assert [r.final.action for r in runs if r.final] == ["drain", "held"]


def test_the_order_is_reason_time_then_name_and_an_unknown_time_counts_first() -> None:
    bad = f"{REASON_PREFIX} gpu.count: x"
    status = {
        "a": NodeStatus("a", "drained", bad, 1001),
        "b": NodeStatus("b", "drained", bad, 1000),
        "c": NodeStatus("c", "drained", bad, 1001),
        "d": NodeStatus("d", "drained", bad, None),
        "e": NodeStatus("e", "drained", "admin: fan", 2000),
    }
    view = view_before("c", status)
    assert {n for n, s in view.items() if s.drained} == {"a", "b", "d", "e"}  # c itself is not yet drained
    view = view_before("a", status)
    assert {n for n, s in view.items() if s.drained} == {"b", "d", "e"}  # c: same second, later name
    # our own drain with no time known: every other drain counts first
    status["a"] = NodeStatus("a", "drained", bad, None)
    assert {n for n, s in view_before("a", status).items() if s.drained} == {"b", "c", "d", "e"}
