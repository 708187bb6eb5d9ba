"""The network stage of a run: ping and iperf3 over rounds of disjoint pairs, then localisation.

Split from the runner to keep files small; it uses the runner's transport, evidence and node
states (`self.r`), and adds its results to the runner's report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.results import CheckResult, Level
from validate import localise
from validate.checks import ParseError
from validate.inventory import Node
from validate.network import iperf, ping, schedule
from validate.transport import Job, Outcome

if TYPE_CHECKING:
    from validate.runner import Runner


class NetworkStage:
    def __init__(self, runner: Runner) -> None:
        self.r = runner

    def run(self) -> tuple[localise.Verdict, dict[str, dict[str, float | None]], list[list[tuple[str, str]]]]:
        active = self.r.active()
        names = [n.name for n in active]
        expected, source = self._expected_link(active)
        plan = schedule.tournament(names) if self.r.opt.schedule == "full" else schedule.ring(names)
        values: list[localise.PairValue] = []
        rounds: list[list[tuple[str, str]]] = []
        for rnd in plan:
            values += self._round(len(rounds), rnd, expected, source)
            rounds.append(rnd)
        verdict = localise.classify(values, expected)
        if self.r.opt.schedule != "full" and (verdict.slow_nodes or verdict.suspects):
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
        mat = localise.matrix([n.name for n in self.r.inv.nodes], values)
        if len(active) >= 2 or len(self.r.inv.nodes) >= 2:
            self.r.report.add(localise.results(verdict, mat))
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
            self.r.report.results = [
                r for r in self.r.report.results if not (r.check == iperf.NAME and r.targets == label and r.level is Level.ERROR)
            ]
            self.r.report.add(
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
        speeds = [(self.r.expect[n.name].link_gbps, self.r.expect[n.name].sources.get("link_gbps")) for n in nodes]
        known = [(s, src) for s, src in speeds if s is not None]
        if not known:
            return None, None
        return min(known, key=lambda x: x[0])  # a pair runs at its slower end's speed

    def _round(
        self, no: int, pairs: list[tuple[str, str]], expected: float | None, source: str | None
    ) -> list[localise.PairValue]:
        node = {n.name: n for n in self.r.inv.nodes}
        st = self.r.opt.iperf
        mtu = self._expected_mtu()
        where = f"network/round-{no:02d}"
        # ping first, on an idle link, so RTT is not measured through a full queue
        pjobs = [
            Job(node[a], ping.command(node[b].data_address, self.r.opt.ping, mtu), self.r.opt.ping.run_bound_s(), (a, b))
            for a, b in pairs
        ]
        for job, res in zip(pjobs, self.r.run_jobs(f"round {no + 1}: ping", pjobs), strict=True):
            a, b = job.tag
            self.r.evidence(where, f"{a}-{b}.ping", res)
            if self.r.lost(res):
                continue
            try:
                self.r.report.add(ping.evaluate(a, b, ping.parse(res.stdout), self._p99_limit(), mtu))
            except ParseError as exc:
                self.r.report.add(CheckResult(ping.NAME, Level.UNKNOWN, (iperf.pair_label(a, b),), None, None, str(exc)))
        ports = {p: st.port(no, i, len(pairs)) for i, p in enumerate(pairs)}
        sjobs = [Job(node[b], iperf.server_command(node[b].data_address, ports[(a, b)], st), 10.0, (a, b)) for a, b in pairs]
        started = []
        for job, res in zip(sjobs, self.r.run_jobs(f"round {no + 1}: iperf3 servers", sjobs), strict=True):
            a, b = job.tag
            self.r.evidence(where, f"{a}-{b}.server", res)
            if self.r.lost(res):
                continue
            if res.ok:
                started.append((a, b))
            else:
                msg = f"iperf3 server on {b} did not start: {(res.stderr or res.detail).strip()[:200]}"
                self.r.report.add(CheckResult(iperf.NAME, Level.UNKNOWN, (iperf.pair_label(a, b),), None, None, msg))
        cjobs = [
            Job(node[a], iperf.client_command(node[b].data_address, ports[(a, b)], st), st.run_bound_s(), (a, b))
            for a, b in started
            if self.r.states[a].state == "ok"
        ]
        values = []
        for job, res in zip(cjobs, self.r.run_jobs(f"round {no + 1}: iperf3", cjobs), strict=True):
            a, b = job.tag
            self.r.evidence(where, f"{a}-{b}.iperf3", res)
            if self.r.lost(res):
                continue
            label = (iperf.pair_label(a, b),)
            if res.outcome is Outcome.TIMEOUT:
                self.r.report.add(CheckResult(iperf.NAME, Level.ERROR, label, None, None, f"timed out: {res.detail}"))
                continue
            try:
                m = iperf.parse(res.stdout)
            except ParseError as exc:
                self.r.report.add(CheckResult(iperf.NAME, Level.UNKNOWN, label, None, None, f"could not parse: {exc}"))
                continue
            self.r.report.add(iperf.evaluate(a, b, m, expected, source))
            if m.error is None:
                rev = m.reverse_bps / 1e9 if m.reverse_bps is not None else None
                values.append(localise.PairValue(a, b, m.forward_bps / 1e9, rev))
                if m.version:
                    self.r.report.context.setdefault("versions", {}).setdefault("iperf3", {})[a] = m.version
        return values

    def _expected_mtu(self) -> int | None:
        found = [int(e.extra["mtu"]) for e in self.r.expect.values() if e.extra.get("mtu") is not None]
        return min(found) if found else None

    def _p99_limit(self) -> float | None:
        found = [float(e.extra["ping_p99_ms"]) for e in self.r.expect.values() if e.extra.get("ping_p99_ms") is not None]
        return min(found) if found else None
