"""Run a validation: tier-0 gates on every node, higher tiers, then pair tests, then localisation.

Order matters (validation-anchors.md §7.4): a node that is unreachable or fails a tier-0 gate
takes no part in anything later, so a 7-of-8-GPU node fails fast with its name and never shows
up as a "slow link". Every raw output goes to the evidence directory as it arrives.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpuforge.results import CheckResult, Level, Report, atomic_write
from validate import collective, localise
from validate.checks import Expectations, NodeCheck, ParseError
from validate.inventory import Inventory, Node
from validate.network import iperf, ping, schedule
from validate.transport import CommandResult, Job, Outcome, Transport, run_many

GATE_TIER = 0
_BAD = (Level.ERROR, Level.UNKNOWN)


class Progress(Protocol):
    def stage(self, name: str, total: int) -> None: ...

    def advance(self, note: str = "") -> None: ...


class _Quiet:
    def stage(self, name: str, total: int) -> None:
        return None

    def advance(self, note: str = "") -> None:
        return None


@dataclass
class RunOptions:
    network: bool = True
    schedule: str = "ring"  # ring: constant rounds + confirmation | full: every pair (tournament)
    iperf: iperf.IperfSettings = field(default_factory=iperf.IperfSettings)
    ping: ping.PingSettings = field(default_factory=ping.PingSettings)
    max_workers: int = 32
    evidence_dir: Path | None = None
    nccl_pairs: bool = False  # pairwise multi-node all_reduce_perf (needs validate.nccl and MPI on the nodes)
    nccl_plan: collective.PairPlan = field(default_factory=collective.PairPlan)


@dataclass
class NodeState:
    state: str  # ok | failed_gates | unreachable | auth_failed | timeout | host_key_rejected
    detail: str = ""


@dataclass
class RunResult:
    report: Report
    states: dict[str, NodeState]
    verdict: localise.Verdict | None
    matrix: dict[str, dict[str, float | None]]
    rounds: list[list[tuple[str, str]]]


class Runner:
    def __init__(
        self,
        inventory: Inventory,
        transport: Transport,
        checks: Sequence[NodeCheck[Any]],
        expectations: Callable[[Node], Expectations],
        *,
        options: RunOptions | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.inv = inventory
        self.transport = transport
        self.checks = list(checks)
        self.expect = {n.name: expectations(n) for n in inventory.nodes}
        self.opt = options or RunOptions()
        self.progress = progress or _Quiet()
        self.report = Report("validate")
        self.states: dict[str, NodeState] = {n.name: NodeState("ok") for n in inventory.nodes}
        self.degraded: dict[str, int] = {}  # node -> the tier (>= 1) it failed: no later tier, no collective
        self._seq = 0

    # -- helpers

    def _active(self) -> list[Node]:
        return [n for n in self.inv.nodes if self.states[n.name].state == "ok"]

    def _evidence(self, where: str, name: str, res: CommandResult) -> None:
        if self.opt.evidence_dir is None:
            return
        self._seq += 1
        safe = re.sub(r"[^A-Za-z0-9_.@-]+", "_", name)
        header = {
            "node": res.node,
            "command": res.command,
            "outcome": res.outcome.value,
            "exit_code": res.exit_code,
            "duration_s": round(res.duration_s, 3),
            "detail": res.detail,
        }
        text = json.dumps(header) + "\n--- stdout ---\n" + res.stdout + "\n--- stderr ---\n" + res.stderr
        atomic_write(self.opt.evidence_dir / "evidence" / where / f"{self._seq:04d}-{safe}.txt", text)

    def _run(self, stage: str, jobs: list[Job]) -> list[CommandResult]:
        self.progress.stage(stage, len(jobs))

        def done(job: Job, res: CommandResult) -> None:
            self.progress.advance(f"{job.node.name}: {res.outcome.value}")

        return run_many(self.transport, jobs, self.opt.max_workers, done)

    def _lost(self, res: CommandResult) -> bool:
        """A transport failure takes the node out of the run; it is reported once, not as a check."""
        if res.stage == "command":
            return False
        if self.states[res.node].state == "ok":
            self.states[res.node] = NodeState(res.outcome.value, res.detail)
            observed = {"outcome": res.outcome.value, "after_s": round(res.duration_s, 2)}
            self.report.add(CheckResult("node.reachable", Level.ERROR, (res.node,), observed, "ok", res.detail))
        return True

    # -- stages

    def run(self) -> RunResult:
        start = time.monotonic()
        self._connect()
        for tier in sorted({c.tier for c in self.checks}):
            self._tier(tier, [c for c in self.checks if c.tier == tier])
        verdict: localise.Verdict | None = None
        mat: dict[str, dict[str, float | None]] = {}
        rounds: list[list[tuple[str, str]]] = []
        if self.opt.network:
            verdict, mat, rounds = self._network()
        nccl_verdict = self._nccl_pairs() if self.opt.nccl_pairs else None
        self.report.context.update(
            {
                "nodes": {k: {"state": v.state, "detail": v.detail} for k, v in self.states.items()},
                "transport": self.transport.kind,
                "wall_s": round(time.monotonic() - start, 2),
            }
        )
        if self.degraded:
            self.report.context["degraded"] = self.degraded
        if nccl_verdict is not None:
            self.report.context["nccl_localisation"] = nccl_verdict.to_dict()
        if verdict is not None:
            self.report.context["localisation"] = verdict.to_dict()
            self.report.context["matrix_gbps"] = mat
            self.report.context["rounds"] = [[list(p) for p in r] for r in rounds]
        return RunResult(self.report, self.states, verdict, mat, rounds)

    def _connect(self) -> None:
        """Reach every node first, in parallel; each failure is reported once, with its outcome."""
        jobs = [Job(n, "true", 10.0) for n in self.inv.nodes]
        for res in self._run("connect", jobs):
            if not self._lost(res):
                self.report.add(CheckResult("node.reachable", Level.PASS, (res.node,), "ok", "ok", "ssh ok"))

    def _tier(self, tier: int, checks: list[NodeCheck[Any]]) -> None:
        active = [n for n in self._active() if n.name not in self.degraded]
        skipped = [n for n in self.inv.nodes if n not in active]
        jobs = [Job(n, c.command(), c.timeout_s, c) for n in active for c in checks]
        results = self._run(f"tier {tier}", jobs)
        failed: set[str] = set()
        measured: dict[str, dict[str, Any]] = {}
        for job, res in zip(jobs, results, strict=True):
            check: NodeCheck[Any] = job.tag
            self._evidence(res.node, check.name, res)
            if self._lost(res):
                continue
            out, measurement = self._judge(check, res)
            self.report.add(out)
            if measurement is not None:
                measured.setdefault(check.name, {})[res.node] = measurement
            if any(r.level in _BAD for r in out):
                failed.add(res.node)
        for check in checks:
            if skipped:
                names = tuple(n.name for n in skipped)
                why = "not run: node unreachable, gated out, or failed a lower tier"
                self.report.add(CheckResult(check.name, Level.UNKNOWN, names, None, None, why))
        for name, per_node in measured.items():
            self.report.add(_cluster_results(name, per_node))
        for name in sorted(failed):
            if self.states[name].state != "ok":
                continue
            if tier == GATE_TIER:
                self.states[name] = NodeState("failed_gates", "a tier-0 check failed; no pair or collective test")
            else:
                self.degraded.setdefault(name, tier)

    def _judge(self, check: NodeCheck[Any], res: CommandResult) -> tuple[list[CheckResult], Any]:
        """Results for one node's output, and the measurement (for cluster-wide comparisons)."""
        node = res.node
        if res.outcome is Outcome.TIMEOUT:
            return [CheckResult(check.name, Level.ERROR, (node,), None, None, f"timed out: {res.detail}")], None
        if res.exit_code != 0 and not res.stdout.strip():
            tail = res.stderr.strip().splitlines()[-1:] or [""]
            msg = f"exit {res.exit_code}, no output: {tail[0]}"
            return [CheckResult(check.name, Level.UNKNOWN, (node,), None, None, msg)], None
        try:
            measurement = check.parse(res.stdout)
        except ParseError as exc:
            msg = f"could not parse output: {exc}"
            return [CheckResult(check.name, Level.UNKNOWN, (node,), None, None, msg)], None
        return check.evaluate(node, measurement, self.expect[node]), measurement

    # -- network

    def _network(self) -> tuple[localise.Verdict, dict[str, dict[str, float | None]], list[list[tuple[str, str]]]]:
        active = self._active()
        names = [n.name for n in active]
        expected, source = self._expected_link(active)
        plan = schedule.tournament(names) if self.opt.schedule == "full" else schedule.ring(names)
        values: list[localise.PairValue] = []
        rounds: list[list[tuple[str, str]]] = []
        for rnd in plan:
            values += self._round(len(rounds), rnd, expected, source)
            rounds.append(rnd)
        verdict = localise.classify(values, expected)
        if self.opt.schedule != "full" and (verdict.slow_nodes or verdict.suspects):
            # Confirm: pair each suspect with a node it has not met, so two slow links that
            # happen to share a node are not mistaken for a slow node.
            tested = {frozenset((p.a, p.b)) for p in values}
            suspects = verdict.slow_nodes + verdict.suspects
            extra = schedule.confirm_round(suspects, names, tested, avoid=set(suspects))
            if extra:
                values += self._round(len(rounds), extra, expected, source)
                rounds.append(extra)
                verdict = localise.classify(values, expected)
        if verdict.slow_links:
            verdict = self._retest(verdict, values, rounds, expected, source)
        if len(active) < 2:
            verdict = localise.Verdict("no-data", message=f"{len(active)} healthy node(s): no pair to test")
        mat = localise.matrix([n.name for n in self.inv.nodes], values)
        if len(active) >= 2 or len(self.inv.nodes) >= 2:
            self.report.add(localise.results(verdict, mat))
        return verdict, mat, rounds

    def _retest(
        self,
        verdict: localise.Verdict,
        values: list[localise.PairValue],
        rounds: list[list[tuple[str, str]]],
        expected: float | None,
        source: str | None,
    ) -> localise.Verdict:
        """Measure each lone low pair once more: a link that reaches speed on the retest is
        intermittent (a warning, kept in the evidence), not slow. One round, disjoint pairs only."""
        busy: set[str] = set()
        rnd = []
        for a, b in verdict.slow_links:
            if a not in busy and b not in busy:
                rnd.append((a, b))
                busy.update((a, b))
        again = {(p.a, p.b): p for p in self._round(len(rounds), rnd, expected, source)}
        rounds.append(rnd)
        first = {(p.a, p.b): p for p in values}
        retested = localise.classify([again.get((p.a, p.b), p) for p in values], expected)
        for key, p2 in again.items():
            p1 = first[key]
            if key in retested.low_pairs:
                continue
            label = (iperf.pair_label(*key),)
            # The retest stands for the pair: drop the first run's failure, say that it happened.
            self.report.results = [
                r for r in self.report.results if not (r.check == iperf.NAME and r.targets == label and r.level is Level.ERROR)
            ]
            self.report.add(
                CheckResult(
                    "network.iperf3.intermittent",
                    Level.WARNING,
                    label,
                    {"first_gbps": round(p1.worst, 4), "retest_gbps": round(p2.worst, 4)},
                    None,
                    "low on the first run, at speed on the retest: intermittent (evidence kept)",
                )
            )
        values[:] = [again.get((p.a, p.b), p) for p in values]
        return retested

    def _expected_link(self, nodes: list[Node]) -> tuple[float | None, str | None]:
        speeds = [(self.expect[n.name].link_gbps, self.expect[n.name].sources.get("link_gbps")) for n in nodes]
        known = [(s, src) for s, src in speeds if s is not None]
        if not known:
            return None, None
        return min(known, key=lambda x: x[0])  # a pair runs at its slower end's speed

    def _round(
        self, no: int, pairs: list[tuple[str, str]], expected: float | None, source: str | None
    ) -> list[localise.PairValue]:
        node = {n.name: n for n in self.inv.nodes}
        st = self.opt.iperf
        mtu = self._expected_mtu()
        where = f"network/round-{no:02d}"
        # ping first, on an idle link, so RTT is not measured through a full queue
        pjobs = [
            Job(node[a], ping.command(node[b].data_address, self.opt.ping, mtu), self.opt.ping.run_bound_s(), (a, b))
            for a, b in pairs
        ]
        for job, res in zip(pjobs, self._run(f"round {no + 1}: ping", pjobs), strict=True):
            a, b = job.tag
            self._evidence(where, f"{a}-{b}.ping", res)
            if self._lost(res):
                continue
            try:
                self.report.add(ping.evaluate(a, b, ping.parse(res.stdout), self._p99_limit(), mtu))
            except ParseError as exc:
                self.report.add(CheckResult(ping.NAME, Level.UNKNOWN, (iperf.pair_label(a, b),), None, None, str(exc)))
        ports = {p: st.port(no, i, len(pairs)) for i, p in enumerate(pairs)}
        sjobs = [Job(node[b], iperf.server_command(node[b].data_address, ports[(a, b)], st), 10.0, (a, b)) for a, b in pairs]
        started = []
        for job, res in zip(sjobs, self._run(f"round {no + 1}: iperf3 servers", sjobs), strict=True):
            a, b = job.tag
            self._evidence(where, f"{a}-{b}.server", res)
            if self._lost(res):
                continue
            if res.ok:
                started.append((a, b))
            else:
                msg = f"iperf3 server on {b} did not start: {(res.stderr or res.detail).strip()[:200]}"
                self.report.add(CheckResult(iperf.NAME, Level.UNKNOWN, (iperf.pair_label(a, b),), None, None, msg))
        cjobs = [
            Job(node[a], iperf.client_command(node[b].data_address, ports[(a, b)], st), st.run_bound_s(), (a, b))
            for a, b in started
            if self.states[a].state == "ok"
        ]
        values = []
        for job, res in zip(cjobs, self._run(f"round {no + 1}: iperf3", cjobs), strict=True):
            a, b = job.tag
            self._evidence(where, f"{a}-{b}.iperf3", res)
            if self._lost(res):
                continue
            label = (iperf.pair_label(a, b),)
            if res.outcome is Outcome.TIMEOUT:
                self.report.add(CheckResult(iperf.NAME, Level.ERROR, label, None, None, f"timed out: {res.detail}"))
                continue
            try:
                m = iperf.parse(res.stdout)
            except ParseError as exc:
                self.report.add(CheckResult(iperf.NAME, Level.UNKNOWN, label, None, None, f"could not parse: {exc}"))
                continue
            self.report.add(iperf.evaluate(a, b, m, expected, source))
            if m.error is None:
                rev = m.reverse_bps / 1e9 if m.reverse_bps is not None else None
                values.append(localise.PairValue(a, b, m.forward_bps / 1e9, rev))
                if m.version:
                    self.report.context.setdefault("versions", {}).setdefault("iperf3", {})[a] = m.version
        return values

    def _nccl_pairs(self) -> localise.Verdict | None:
        """all_reduce_perf on ring pairs of nodes that passed every tier; localised like iperf3."""
        nodes = [n for n in self._active() if n.name not in self.degraded]
        if len(nodes) < 2:
            return None
        by_name = {n.name: n for n in nodes}
        values: list[localise.PairValue] = []
        for no, rnd in enumerate(schedule.ring([n.name for n in nodes])):
            jobs = []
            for a, b in rnd:
                hosts = (by_name[a].data_address, by_name[b].data_address)
                cmd, bound = collective.command(hosts, self.expect[a], self.opt.nccl_plan)
                jobs.append(Job(by_name[a], cmd, bound, (a, b)))
            for job, res in zip(jobs, self._run(f"nccl round {no + 1}", jobs), strict=True):
                a, b = job.tag
                self._evidence(f"nccl/round-{no:02d}", f"{a}-{b}", res)
                if self._lost(res):
                    continue
                if res.outcome is Outcome.TIMEOUT:
                    label = (iperf.pair_label(a, b),)
                    self.report.add(CheckResult(collective.NAME, Level.ERROR, label, None, None, res.detail))
                    continue
                out, busbw = collective.judge(a, b, res.stdout, self.expect[a])
                self.report.add(out)
                if busbw is not None:
                    values.append(localise.PairValue(a, b, busbw))
        head = self.expect[nodes[0].name]
        expected = head.extra.get("nccl_inter_2node_busbw_gbps")
        frac = head.extra.get("nccl_pass_fraction")
        verdict = localise.classify(
            values,
            float(expected) if expected is not None else None,
            float(frac) if frac is not None else None,
            unit="GB/s",
        )
        mat = localise.matrix([n.name for n in nodes], values)
        self.report.add(localise.results(verdict, mat, name="nccl.localise", unit="GB/s"))
        return verdict

    def _expected_mtu(self) -> int | None:
        found = [int(e.extra["mtu"]) for e in self.expect.values() if e.extra.get("mtu") is not None]
        return min(found) if found else None

    def _p99_limit(self) -> float | None:
        found = [float(e.extra["ping_p99_ms"]) for e in self.expect.values() if e.extra.get("ping_p99_ms") is not None]
        return min(found) if found else None


# Checks whose per-node measurements are also compared across the cluster (driver, VBIOS...).
_CLUSTER = {"gpu.inventory": ("validate.gpu.inventory", "cluster_consistency")}


def _cluster_results(check: str, per_node: dict[str, Any]) -> list[CheckResult]:
    entry = _CLUSTER.get(check)
    if entry is None or len(per_node) < 2:
        return []
    import importlib  # the GPU checks are part B's modules; load them only when they produced data

    fn = getattr(importlib.import_module(entry[0]), entry[1])
    out: list[CheckResult] = fn(per_node)
    return out
