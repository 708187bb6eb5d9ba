"""Run a validation: tier-0 gates on every node, higher tiers, then pair tests, then localisation.

Order matters (validation-anchors.md §7.4): a node that is unreachable or fails a tier-0 gate
takes no part in anything later, so a 7-of-8-GPU node fails fast with its name and never shows
up as a "slow link". Every raw output goes to the evidence directory as it arrives.

The node checks run as one pipeline per node, at most `max_workers` nodes at a time: the node is
reached, each tier's checks run in one session (batch.py), each result is judged, written and
shown as it arrives, a failed tier stops that node's later tiers, and the node is released. No
barrier between nodes: the first results come while other nodes still connect. The report is
assembled in inventory order afterwards, so it reads the same however the nodes raced.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuforge.common.results import CheckResult, Level, Report, atomic_write
from gpuforge.validate import collective, lag, localise
from gpuforge.validate.batch import run_batch
from gpuforge.validate.checks import Expectations, NodeCheck
from gpuforge.validate.inventory import Inventory, Node
from gpuforge.validate.network.stage import NetworkStage
from gpuforge.validate.stagehost import NodeState, Progress, RunOptions
from gpuforge.validate.transport import CommandResult, Job, Outcome, Transport, fan_out, run_many

GATE_TIER = 0
_BAD = (Level.ERROR, Level.UNKNOWN)
_SEVERITY = [Level.PASS, Level.INFO, Level.WARNING, Level.UNKNOWN, Level.ERROR]
_GATED = ("ok", "failed_gates")  # reachable nodes (ok ones may be degraded: failed a tier >= 1)
# What a shell or nvidia-smi print when the driver is not there (exit 127: POSIX "command not
# found"; exit 9 with this text: nvidia-smi installed but the kernel module not loaded).
_NO_SMI = re.compile(r"nvidia-smi: (?:command )?not found|nvidia-smi: No such file")
_NO_MODULE = "couldn't communicate with the NVIDIA driver"
# A controller stall this long (stopped, starved of CPU) is reported as its own finding.
LAG_FINDING_S = 1.0
_REACHED = {
    "ssh": "ssh ok",
    "local": "local: commands run on this machine, not over a network",  # only SSH is evidence SSH works
    "slurm": "slurm: reached through srun",
}


class _Quiet:
    def stage(self, name: str, total: int) -> None:
        return None

    def advance(self, note: str = "") -> None:
        return None


@dataclass
class _NodeRun:
    """One node's part of the node checks, kept by its worker until the report is assembled."""

    reached: CheckResult | None = None  # its node.reachable row
    rows: dict[int, list[CheckResult]] = field(default_factory=dict)  # tier -> its rows, in order
    drivers: dict[int, CheckResult] = field(default_factory=dict)  # tier -> gpu.driver_present row
    measured: dict[str, Any] = field(default_factory=dict)  # check -> measurement
    ran: set[int] = field(default_factory=set)


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
        self._lock = threading.Lock()

    # -- helpers

    def active(self) -> list[Node]:
        return [n for n in self.inv.nodes if self.states[n.name].state == "ok"]

    def evidence(self, where: str, name: str, res: CommandResult) -> None:
        if self.opt.evidence_dir is None:
            return
        with self._lock:
            self._seq += 1
            seq = self._seq
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
        atomic_write(self.opt.evidence_dir / "evidence" / where / f"{seq:04d}-{safe}.txt", text)

    def run_jobs(self, stage: str, jobs: list[Job]) -> list[CommandResult]:
        self.progress.stage(stage, len(jobs))

        def done(job: Job, res: CommandResult) -> None:
            self.progress.advance(f"{job.node.name}: {res.outcome.value}")

        return run_many(self.transport, jobs, self.opt.max_workers, done)

    def run_pairs(self, stage: str, jobs: list[Job]) -> list[CommandResult]:
        """A round of pair jobs: all at once (bounded by max_pairs_at_once), not max_workers at a time."""
        self.progress.stage(stage, len(jobs))

        def done(job: Job, res: CommandResult) -> None:
            self.progress.advance(f"{job.node.name}: {res.outcome.value}")

        width = max(self.opt.max_workers, min(len(jobs), self.opt.max_pairs_at_once))
        widen = getattr(self.transport, "widen", None)  # a pool sized for node checks: room for the round
        if widen is not None:
            widen(width)
        return run_many(self.transport, jobs, width, done)

    def lost(self, res: CommandResult) -> bool:
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
        clock = lag.monitor()
        self._node_checks()
        verdict: localise.Verdict | None = None
        mat: dict[str, dict[str, float | None]] = {}
        rounds: list[list[tuple[str, str]]] = []
        if self.opt.network:
            verdict, mat, rounds = NetworkStage(self).run()
        nccl_verdict = collective.PairStage(self).run() if self.opt.nccl_pairs else None
        self.report.context.update(
            {
                "nodes": {k: {"state": v.state, "detail": v.detail} for k, v in self.states.items()},
                "transport": self.transport.kind,
                "wall_s": round(time.monotonic() - start, 2),
            }
        )
        self._controller(clock.summary(start))
        if self.degraded:
            self.report.context["degraded"] = self.degraded
        if nccl_verdict is not None:
            self.report.context["nccl_localisation"] = nccl_verdict.to_dict()
        if verdict is not None:
            self.report.context["localisation"] = verdict.to_dict()
            self.report.context["matrix_gbps"] = mat
            self.report.context["rounds"] = [[list(p) for p in r] for r in rounds]
        return RunResult(self.report, self.states, verdict, mat, rounds)

    def _controller(self, lagged: lag.LagSummary) -> None:
        """The controller's own lag, as context and, past LAG_FINDING_S, as its own finding. Every
        wait that judged a node left these stalls out, so no node is failed by them."""
        ctx: dict[str, Any] = {"lag": lagged.to_dict()}
        stats = getattr(self.transport, "stats", None)
        if stats is not None:
            keys = ("capacity", "opened", "peak_live", "descriptor_waits", "stall_retries")
            ctx["pool"] = {k: getattr(stats, k) for k in keys if hasattr(stats, k)}
        self.report.context["controller"] = ctx
        if lagged.max_stall_s >= LAG_FINDING_S:
            msg = (f"the controller fell behind: stalled up to {lagged.max_stall_s:.1f} s, {lagged.total_stall_s:.1f} s "
                   f"in all ({lagged.stalls} stalls); no node was judged on time it was not given")  # fmt: skip
            want = f"stalls < {LAG_FINDING_S:g} s"
            self.report.add(CheckResult("controller.lag", Level.WARNING, (), lagged.to_dict(), want, msg))

    # -- the node checks: one pipeline per node

    def _node_checks(self) -> None:
        tiers = sorted({c.tier for c in self.checks})
        self.progress.stage("node checks", len(self.inv.nodes) * max(1, len(self.checks)))
        runs = fan_out(self.inv.nodes, lambda n: self._node(n, tiers), self.opt.max_workers)
        self._assemble(runs, tiers)

    def _node(self, node: Node, tiers: list[int]) -> _NodeRun:
        run = _NodeRun()
        hold = getattr(self.transport, "hold", None)
        with hold(node) if hold is not None else contextlib.nullcontext():
            if not self.checks:
                self._reach(node, run, self._probe(node))
                self.progress.advance(f"{node.name}: {self.states[node.name].state}")
                return run
            for tier in tiers:
                if not self._tier(node, tier, [c for c in self.checks if c.tier == tier], run):
                    break
        left = len(self.checks) - sum(len([c for c in self.checks if c.tier == t]) for t in run.ran)
        for _ in range(left):
            self.progress.advance(f"{node.name}: not run ({self.states[node.name].state})")
        return run

    def _probe(self, node: Node) -> CommandResult:
        """Reach a node that has no checks to run: a connection alone where the transport has one."""
        connect = getattr(self.transport, "connect", None)
        if connect is not None:
            failure: CommandResult | None = connect(node)
            return failure or CommandResult(node.name, "", Outcome.OK, 0, "", "", 0.0)
        return self.transport.run(node, "true", 10.0)

    def _reach(self, node: Node, run: _NodeRun, res: CommandResult) -> bool:
        """The node.reachable row from the node's first result; False when it is out of reach."""
        if run.reached is not None:
            return self._lost(node, run, res)
        if res.stage == "command":
            ok = _REACHED.get(self.transport.kind, f"{self.transport.kind}: reached")
            run.reached = CheckResult("node.reachable", Level.PASS, (node.name,), "ok", "ok", ok)
            return True
        self.states[node.name] = NodeState(res.outcome.value, res.detail)
        observed = {"outcome": res.outcome.value, "after_s": round(res.duration_s, 2)}
        run.reached = CheckResult("node.reachable", Level.ERROR, (node.name,), observed, "ok", res.detail)
        return False

    def _lost(self, node: Node, run: _NodeRun, res: CommandResult) -> bool:
        if res.stage == "command":
            return True
        if self.states[node.name].state == "ok":
            self.states[node.name] = NodeState(res.outcome.value, res.detail)
            observed = {"outcome": res.outcome.value, "after_s": round(res.duration_s, 2)}
            run.rows.setdefault(max(run.ran), []).append(
                CheckResult("node.reachable", Level.ERROR, (node.name,), observed, "ok", res.detail))
        return False

    def _tier(self, node: Node, tier: int, checks: list[NodeCheck[Any]], run: _NodeRun) -> bool:
        """One tier's checks on the node, judged as they arrive; False when the node goes no further."""
        run.ran.add(tier)
        rows = run.rows.setdefault(tier, [])
        failed, lost = False, False
        no_driver: str | None = None

        def arrived(job: Job, res: CommandResult) -> None:
            nonlocal failed, lost, no_driver
            check: NodeCheck[Any] = job.tag
            self.evidence(res.node, check.name, res)
            if lost or not self._reach(node, run, res):
                lost = True
                self.progress.advance(f"{node.name} {check.name}: {res.outcome.value}")
                return
            if (why := _driver_missing(res)) is not None:
                no_driver = no_driver or why
                self.progress.advance(f"{node.name} {check.name}: no driver")
                return
            out, measurement = self._judge(check, res)
            rows.extend(out)
            if measurement is not None:
                run.measured[check.name] = measurement
            bad = any(r.level in _BAD for r in out)
            failed = failed or bad
            worst = max((r.level for r in out), key=_SEVERITY.index, default=Level.INFO)
            self.progress.advance(f"{node.name} {check.name}: {worst.value}")

        run_batch(self.transport, node, [Job(node, c.command(), c.timeout_s, c) for c in checks], arrived)
        if lost:
            return False
        if no_driver is not None:
            want = self.expect[node.name].gpus_per_node
            if want:
                msg = f"{no_driver}: NVIDIA driver missing on a node expected to have {want} GPU(s)"
                run.drivers[tier] = CheckResult("gpu.driver_present", Level.ERROR, (node.name,), no_driver, want, msg)
                failed = True
            else:
                msg = f"{no_driver}: no NVIDIA driver, and no GPU expected here"
                run.drivers[tier] = CheckResult("gpu.driver_present", Level.INFO, (node.name,), no_driver, want, msg)
        if failed:
            if tier == GATE_TIER:
                self.states[node.name] = NodeState("failed_gates", "a tier-0 check failed; no pair or collective test")
            else:
                with self._lock:
                    self.degraded.setdefault(node.name, tier)
            return False
        return True

    def _assemble(self, runs: list[_NodeRun], tiers: list[int]) -> None:
        """The report in inventory order: reachability, then per tier each node's rows, the
        driver rows, the not-run rows and the cluster-wide comparisons."""
        pairs = list(zip(self.inv.nodes, runs, strict=True))
        for _, run in pairs:
            if run.reached is not None:
                self.report.add(run.reached)
        for tier in tiers:
            checks = [c for c in self.checks if c.tier == tier]
            for _, run in pairs:
                self.report.add(run.rows.get(tier, []))
            for _, run in sorted(pairs, key=lambda p: p[0].name):
                if tier in run.drivers:
                    self.report.add(run.drivers[tier])
            skipped = tuple(n.name for n, run in pairs if tier not in run.ran and self.states[n.name].state in _GATED)
            for check in checks:
                if skipped:
                    why = "not run: node unreachable, gated out, or failed a lower tier"
                    self.report.add(CheckResult(check.name, Level.UNKNOWN, skipped, None, None, why))
            for check in checks:  # cluster-wide comparisons (driver, VBIOS...)
                per_node = {n.name: run.measured[check.name] for n, run in pairs if check.name in run.measured}
                if len(per_node) >= 2:
                    self.report.add(check.compare(per_node))

    def _judge(self, check: NodeCheck[Any], res: CommandResult) -> tuple[list[CheckResult], Any]:
        """Results for one node's output, and the measurement (for cluster-wide comparisons)."""
        node = res.node
        if res.outcome is Outcome.TIMEOUT:
            return [CheckResult(check.name, Level.ERROR, (node,), None, None, f"timed out: {res.detail}")], None
        if res.exit_code != 0 and not res.stdout.strip():
            tail = res.stderr.strip().splitlines()[-1:] or [""]
            msg = f"exit {res.exit_code}, no output: {tail[0]}"
            return [CheckResult(check.name, Level.UNKNOWN, (node,), None, None, msg)], None
        return check.judge(node, res.stdout, self.expect[node])


def _driver_missing(res: CommandResult) -> str | None:
    """Why nvidia-smi could not answer on this node (no binary, or no kernel module), or None."""
    if res.exit_code == 127 and _NO_SMI.search(res.stderr):
        return "nvidia-smi not found (exit 127)"
    if _NO_MODULE in res.stdout or _NO_MODULE in res.stderr:
        return "nvidia-smi could not communicate with the NVIDIA driver (module not loaded)"
    return None
