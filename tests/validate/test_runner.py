"""Runner logic without hosts: tier gating, unreachable nodes, pairwise NCCL and its localisation.

A fake transport answers each command from a table; NCCL output is the real capture F1
(2x p4de, validation-anchors.md §5), and for the slow node a copy with its busbw columns halved
(derived from F1 on purpose, to exercise localisation; never used as a parser fixture).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

import pytest

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck, ParseError
from gpuforge.validate.inventory import Inventory, Node
from gpuforge.validate.runner import Runner
from gpuforge.validate.stagehost import RunOptions
from gpuforge.validate.transport import CommandResult, Outcome

F1 = (Path(__file__).with_name("fixtures") / "nccl_f1_p4de_2node_srun.txt").read_text()
_ROW = re.compile(r"^(0:\s+\d+\s+\d+\s+\S+\s+\S+\s+-?\d+\s+\S+\s+\S+\s+)(\S+)(\s+\S+\s+\S+\s+\S+\s+)(\S+)(.*)$")


def _halved(text: str) -> str:
    def half(m: re.Match[str]) -> str:
        return f"{m[1]}{float(m[2]) / 2:.2f}{m[3]}{float(m[4]) / 2:.2f}{m[5]}"

    return "\n".join(_ROW.sub(half, line) for line in text.splitlines()) + "\n"


class Echo(NodeCheck[str]):
    """Tiny check: the node prints a word; `bad` fails."""

    name: ClassVar[str] = "t.echo"
    tier: ClassVar[int] = 0

    def __init__(self, name: str, tier: int) -> None:
        self.name, self.tier = name, tier  # type: ignore[misc]

    def command(self) -> str:
        return f"check {self.name}"

    def parse(self, stdout: str) -> str:
        word = stdout.strip()
        if not word:
            raise ParseError("empty")
        return word

    def evaluate(self, node: str, measurement: str, expect: Expectations) -> list[CheckResult]:
        level = Level.ERROR if measurement == "bad" else Level.PASS
        return [CheckResult(self.name, level, (node,), measurement, "good", measurement)]


class FakeTransport:
    kind = "fake"

    def __init__(self, answers: dict[tuple[str, str], str], down: frozenset[str] = frozenset(), slow: str = "") -> None:
        self.answers, self.down, self.slow = answers, down, slow
        self.calls: list[tuple[str, str]] = []

    def run(self, node: Node, command: str, timeout_s: float) -> CommandResult:
        self.calls.append((node.name, command))
        if node.name in self.down:
            return CommandResult(node.name, command, Outcome.UNREACHABLE, None, "", "", 0.0, "no route", "connect")
        if "all_reduce_perf" in command:
            hosts = re.findall(r"10\.0\.0\.(\d+) slots", command)
            slow = self.slow and self.slow[-1] in hosts
            return CommandResult(node.name, command, Outcome.OK, 0, _halved(F1) if slow else F1, "", 0.1)
        out = self.answers.get((node.name, command), self.answers.get(("*", command), "good"))
        return CommandResult(node.name, command, Outcome.OK, 0, out, "", 0.01)

    def close(self) -> None:
        return None


def _inv(n: int) -> Inventory:
    nodes = [{"name": f"node{i}", "host": f"10.0.0.{i}"} for i in range(1, n + 1)]
    return Inventory.model_validate({"profile": "cv-training", "nodes": nodes})


def _expect() -> Expectations:
    pytest.importorskip("gpuforge.validate.thresholds")
    from gpuforge.validate.thresholds import build_expectations

    return build_expectations("cv-training", None, {})


CHECKS = [Echo("t.gate", 0), Echo("t.perf", 1), Echo("t.deep", 2)]


def test_a_failed_tier_stops_later_tiers_and_collectives() -> None:
    fake = FakeTransport({("node2", "check t.gate"): "bad", ("node3", "check t.perf"): "bad"})
    opts = RunOptions(network=False, nccl_pairs=True)
    res = Runner(_inv(5), fake, CHECKS, lambda n: _expect(), options=opts).run()
    assert res.states["node2"].state == "failed_gates" and res.states["node3"].state == "ok"
    ran = {(n, c) for n, c in fake.calls}
    assert ("node2", "check t.perf") not in ran and ("node3", "check t.deep") not in ran
    assert ("node4", "check t.deep") in ran
    nccl_hosts = {h for n, c in fake.calls if "all_reduce_perf" in c for h in re.findall(r"10\.0\.0\.(\d+) slots", c)}
    assert nccl_hosts == {"1", "4", "5"}  # neither the gated node2 nor node3, which failed tier 1
    assert res.report.context["degraded"] == {"node3": 1}
    skipped = [r for r in res.report.results if r.check == "t.deep" and r.level is Level.UNKNOWN]
    assert skipped and set(skipped[0].targets) == {"node2", "node3"}


def test_unreachable_node_is_reported_once_and_the_rest_run() -> None:
    fake = FakeTransport({}, down=frozenset({"node3"}))
    res = Runner(_inv(4), fake, CHECKS, lambda n: Expectations(), options=RunOptions(network=False)).run()
    errors = [r for r in res.report.results if r.level is Level.ERROR]
    assert [(r.check, r.targets) for r in errors] == [("node.reachable", ("node3",))]
    assert res.states["node3"].state == "unreachable"
    assert sum(1 for r in res.report.results if r.check == "t.deep" and r.level is Level.PASS) == 3


def test_nccl_pairs_pass_on_real_f1_and_name_a_slow_node() -> None:
    opts = RunOptions(network=False, nccl_pairs=True)
    healthy = Runner(_inv(6), FakeTransport({}), CHECKS, lambda n: _expect(), options=opts).run()
    assert healthy.report.context["nccl_localisation"]["kind"] == "healthy"
    assert {r.level for r in healthy.report.results if r.check == "nccl.busbw.inter"} == {Level.PASS}
    slow = Runner(_inv(6), FakeTransport({}, slow="node5"), CHECKS, lambda n: _expect(), options=opts).run()
    loc = slow.report.context["nccl_localisation"]
    assert (loc["kind"], loc["slow_nodes"]) == ("node", ["node5"])
    assert slow.report.exit_code() == 1


class SameEverywhere(Echo):
    """Like Echo, and names the node whose word differs from the majority (the compare hook)."""

    def compare(self, per_node: dict[str, str]) -> list[CheckResult]:
        words = sorted(per_node.values())
        majority = max(set(words), key=words.count)
        odd = tuple(sorted(n for n, w in per_node.items() if w != majority))
        level = Level.ERROR if odd else Level.PASS
        return [CheckResult(f"{self.name}.same", level, odd, majority, majority, "odd one out")]


def test_the_runner_compares_measurements_across_nodes() -> None:
    fake = FakeTransport({("node3", "check t.word"): "other"})
    checks, opts = [SameEverywhere("t.word", 1)], RunOptions(network=False)
    res = Runner(_inv(4), fake, checks, lambda n: Expectations(), options=opts).run()
    (same,) = [r for r in res.report.results if r.check == "t.word.same"]
    assert (same.level, same.targets) == (Level.ERROR, ("node3",))
    # one node has nothing to compare with: no cluster-wide result at all
    alone = Runner(_inv(1), FakeTransport({}), checks, lambda n: Expectations(), options=opts).run()
    assert not [r for r in alone.report.results if r.check == "t.word.same"]
