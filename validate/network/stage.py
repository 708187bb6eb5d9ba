"""The network stage of a run: ping and iperf3 over rounds of disjoint pairs, then localisation.

Split from the runner to keep files small; it uses the runner's transport, evidence and node
states (`self.r`), and adds its results to the runner's report.

Order: the iperf3 version on every node (it decides how many processes a pair needs); the ring
(or full) schedule; for a suspect node, a confirmation round with a fresh partner; then a retest
of every low pair no slow node explains, keeping each pair's best run (a busy controller or node
only ever lowers a throughput figure, so the best of a few runs is the faithful one, and a pair
that is low on every run is low). Every pair is judged once, at the end, against the ceiling of the TCP model (model.py).
"""

from __future__ import annotations

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate import localise
from gpuforge.validate.checks import ParseError
from gpuforge.validate.inventory import Node
from gpuforge.validate.network import iperf, model, ping, schedule, tcp_test
from gpuforge.validate.stagehost import StageHost
from gpuforge.validate.transport import Job, Outcome

Pair = tuple[str, str]
VERSION_CMD = "LC_ALL=C iperf3 --version 2>&1 | head -n 1"


class NetworkStage:
    def __init__(self, runner: StageHost) -> None:
        self.r = runner
        self.versions: dict[str, tuple[int, int] | None] = {}
        self.runs: dict[Pair, list[tcp_test.PairRun]] = {}
        self.ceilings: dict[Pair, model.Ceiling] = {}
        self.failed: dict[Pair, CheckResult] = {}  # pairs with no usable run: their last failure
        self.attempts: dict[Pair, int] = {}
        self.rounds: list[list[Pair]] = []

    # -- the stage

    def run(self) -> tuple[localise.Verdict, dict[str, dict[str, float | None]], list[list[tuple[str, str]]]]:
        active = self.r.active()
        names = [n.name for n in active]
        self._probe_versions(active)
        plan = schedule.tournament(names) if self.r.opt.schedule == "full" else schedule.ring(names)
        for rnd in plan:
            self._round(rnd)
        verdict = self._classify()
        if self.r.opt.schedule != "full" and (verdict.slow_nodes or verdict.suspects):
            # Confirm: pair each suspect with a node it has not met, so two slow links that
            # happen to share a node are not mistaken for a slow node (and a node that was only
            # unlucky once meets a third peer).
            tested = {frozenset(p) for p in self.runs} | {frozenset(p) for p in self.failed}
            suspects = verdict.slow_nodes + verdict.suspects
            extra = schedule.confirm_round(suspects, names, tested, avoid=set(suspects))
            if extra:
                self._round(extra)
                verdict = self._classify()
        verdict = self._retest(verdict)
        self._report_pairs()
        if len(active) < 2:
            verdict = localise.Verdict("no-data", message=f"{len(active)} healthy node(s): no pair to test")
        mat = localise.matrix([n.name for n in self.r.inv.nodes], self._values(include_cpu_bound=True))
        if len(active) >= 2 or len(self.r.inv.nodes) >= 2:
            self.r.report.add(localise.results(verdict, mat))
        self._context(verdict)
        return verdict, mat, self.rounds

    # -- planning

    def _probe_versions(self, active: list[Node]) -> None:
        """`iperf3 --version` on every node: a single-threaded iperf3 needs a process per flow."""
        jobs = [Job(n, VERSION_CMD, 10.0, n.name) for n in active]
        for job, res in zip(jobs, self.r.run_jobs("network: iperf3 version", jobs), strict=True):
            self.r.evidence("network", f"{job.tag}.iperf3-version", res)
            if self.r.lost(res):
                continue
            self.versions[job.tag] = model.parse_version(res.stdout)
            if res.stdout.strip():
                self.r.report.context.setdefault("versions", {}).setdefault("iperf3", {})[job.tag] = res.stdout.strip()

    def _pair_model(self, a: str, b: str) -> tuple[model.Plan, model.Ceiling]:
        facts = model.combine(model.facts(self.r.expect[a]), model.facts(self.r.expect[b]))
        p = model.plan(facts, (self.versions.get(a), self.versions.get(b)), self.r.opt.iperf.streams)
        c = model.ceiling(facts, p)
        self.ceilings[(a, b)] = c
        return p, c

    # -- measuring

    def _round(self, pairs: list[Pair], with_ping: bool = True) -> None:
        """One round of disjoint pairs: ping (not on a retest), then the TCP test, every pair at once."""
        no = len(self.rounds)
        self.rounds.append(pairs)
        node = {n.name: n for n in self.r.inv.nodes}
        st = self.r.opt.iperf
        mtu = self._expected_mtu()
        where = f"network/round-{no:02d}"
        pairs = [(a, b) for a, b in pairs if self.r.states[a].state == "ok" and self.r.states[b].state == "ok"]
        # ping first, on an idle link, so RTT is not measured through a full queue
        pjobs = [
            Job(node[a], ping.command(node[b].data_address, self.r.opt.ping, mtu), self.r.opt.ping.run_bound_s(), (a, b))
            for a, b in pairs
            if with_ping
        ]
        for job, res in zip(pjobs, self.r.run_pairs(f"round {no + 1}: ping", pjobs), strict=True):
            a, b = job.tag
            self.r.evidence(where, f"{a}-{b}.ping", res)
            if self.r.lost(res):
                continue
            try:
                self.r.report.add(ping.evaluate(a, b, ping.parse(res.stdout), self._p99_limit(), mtu))
            except ParseError as exc:
                self.r.report.add(CheckResult(ping.NAME, Level.UNKNOWN, (iperf.pair_label(a, b),), None, None, str(exc)))
        plans = {p: self._pair_model(*p)[0] for p in pairs}
        runs = len(tcp_test.phases(st))
        ports: dict[Pair, list[int]] = {}
        slot = 0
        width = sum(runs * pl.processes for pl in plans.values())
        for p in pairs:  # a port per process per run (tcp_test.server_command says why)
            ports[p] = [st.port(no, slot + j, width) for j in range(runs * plans[p].processes)]
            slot += runs * plans[p].processes
        sjobs = [
            Job(node[b], tcp_test.server_command(node[b].data_address, ports[(a, b)], st, runs), 10.0, (a, b))
            for a, b in pairs
            if self.r.states[a].state == "ok" and self.r.states[b].state == "ok"
        ]
        started = []
        for job, res in zip(sjobs, self.r.run_pairs(f"round {no + 1}: iperf3 servers", sjobs), strict=True):
            a, b = job.tag
            self.r.evidence(where, f"{a}-{b}.server", res)
            if self.r.lost(res):
                continue
            if res.ok:
                started.append((a, b))
            else:
                msg = f"iperf3 server on {b} did not start: {(res.stderr or res.detail).strip()[:200]}"
                self._fail((a, b), CheckResult(iperf.NAME, Level.UNKNOWN, (iperf.pair_label(a, b),), None, None, msg))
        cjobs = [
            Job(
                node[a],
                tcp_test.client_command(node[b].data_address, ports[(a, b)], plans[(a, b)].flows_per_process, st),
                runs * st.run_bound_s(),
                (a, b),
            )
            for a, b in started
            if self.r.states[a].state == "ok"
        ]
        for job, res in zip(cjobs, self.r.run_pairs(f"round {no + 1}: iperf3", cjobs), strict=True):
            a, b = job.tag
            self.r.evidence(where, f"{a}-{b}.iperf3", res)
            if self.r.lost(res):
                continue
            label = (iperf.pair_label(a, b),)
            if res.outcome is Outcome.TIMEOUT:
                self._fail((a, b), CheckResult(iperf.NAME, Level.ERROR, label, None, None, f"timed out: {res.detail}"))
                continue
            try:
                run = tcp_test.parse(res.stdout)
            except ParseError as exc:
                self._fail((a, b), CheckResult(iperf.NAME, Level.UNKNOWN, label, None, None, f"could not parse: {exc}"))
                continue
            self.runs.setdefault((a, b), []).append(run)
            self.attempts[(a, b)] = self.attempts.get((a, b), 0) + 1

    def _fail(self, pair: Pair, result: CheckResult) -> None:
        self.failed[pair] = result
        self.attempts[pair] = self.attempts.get(pair, 0) + 1

    def _retest(self, verdict: localise.Verdict) -> localise.Verdict:
        """Measure again, up to `retests` times, in rounds of disjoint pairs, each low pair that no
        slow node explains and each pair with no usable run yet (an iperf3 error, a timeout, a
        server that did not start: a busy host looks like that too); each pair keeps its best run.
        A slow node's pairs are not retested: it has shown itself low with three different peers."""
        for _ in range(max(0, self.r.opt.retests)):
            slow = set(verdict.slow_nodes)
            unmeasured = [p for p in self.attempts if not any(r.error is None for r in self.runs.get(p, []))]
            again = [
                p
                for p in dict.fromkeys([*verdict.low_pairs, *unmeasured])
                if p[0] not in slow and p[1] not in slow and self.attempts.get(p, 0) <= self.r.opt.retests
                and self.r.states[p[0]].state == "ok" and self.r.states[p[1]].state == "ok"
            ]
            if not again:
                break
            for rnd in _disjoint_rounds(again):
                self._round(rnd, with_ping=False)
            verdict = self._classify()
        return verdict

    # -- judging

    def _values(self, include_cpu_bound: bool = False) -> list[localise.PairValue]:
        out = []
        for (a, b), runs in self.runs.items():
            ok = [r for r in runs if r.error is None]
            if not ok:
                continue
            best = max(ok, key=tcp_test.worst_gbps)
            if tcp_test.cpu_bound(best) and not include_cpu_bound:
                continue  # a CPU-bound figure says nothing about the link; reported as such
            rev = best.reverse_bps / 1e9 if best.reverse_bps is not None else None
            out.append(localise.PairValue(a, b, best.forward_bps / 1e9, rev))
        return out

    def _judged_ceiling(self) -> model.Ceiling | None:
        """The lowest floor among the pairs: what the whole fabric is judged against."""
        known = [c for c in self.ceilings.values() if c.floor_gbps is not None]
        return min(known, key=lambda c: c.floor_gbps or 0.0) if known else None

    def _classify(self) -> localise.Verdict:
        c = self._judged_ceiling()
        if c is None:
            return localise.classify(self._values(), None)
        return localise.classify(self._values(), c.gbps, c.floor_fraction)

    def _report_pairs(self) -> None:
        for pair in sorted(set(self.runs) | set(self.failed)):
            runs = self.runs.get(pair, [])
            if not runs:
                self.r.report.add(self.failed[pair])
                continue
            res = tcp_test.evaluate(*pair, runs, self.ceilings[pair])
            self.r.report.add(res)
            first = runs[0]
            if len(runs) > 1 and res.level is Level.PASS:
                ok = [tcp_test.worst_gbps(r) for r in runs if r.error is None]
                seen: dict[str, object] = {"runs": len(runs), "best_gbps": round(max(ok), 4)}
                if first.error is None:
                    seen["first_gbps"] = round(tcp_test.worst_gbps(first), 4)
                else:
                    seen["first_error"] = first.error
                self.r.report.add(
                    CheckResult(
                        "network.iperf3.intermittent",
                        Level.WARNING,
                        (iperf.pair_label(*pair),),
                        seen,
                        None,
                        "low or failed on the first run, at speed on a retest: intermittent or a busy host "
                        "(evidence kept)",
                    )
                )

    def _context(self, verdict: localise.Verdict) -> None:
        c = self._judged_ceiling()
        ctx: dict[str, object] = {"nccl": model.nccl_note()}
        if c is not None:
            ctx.update(
                {
                    "ceiling_gbps": c.gbps,
                    "floor_gbps": c.floor_gbps,
                    "kind": c.kind,
                    "reason": c.reason,
                    "sources": list(c.sources),
                }
            )
        self.r.report.context["tcp_model"] = ctx

    def _expected_mtu(self) -> int | None:
        found = [int(e.extra["mtu"]) for e in self.r.expect.values() if e.extra.get("mtu") is not None]
        return min(found) if found else None

    def _p99_limit(self) -> float | None:
        found = [float(e.extra["ping_p99_ms"]) for e in self.r.expect.values() if e.extra.get("ping_p99_ms") is not None]
        return min(found) if found else None


def _disjoint_rounds(pairs: list[Pair]) -> list[list[Pair]]:
    """Greedy: as few rounds as it takes so that no node is in two pairs of one round."""
    rounds: list[tuple[set[str], list[Pair]]] = []
    for a, b in pairs:
        for busy, rnd in rounds:
            if a not in busy and b not in busy:
                busy.update((a, b))
                rnd.append((a, b))
                break
        else:
            rounds.append(({a, b}, [(a, b)]))
    return [rnd for _, rnd in rounds]
