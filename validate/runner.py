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

from gpuforge.common.results import CheckResult, Level, Report, atomic_write
from gpuforge.validate import collective, localise
from gpuforge.validate.checks import Expectations, NodeCheck
from gpuforge.validate.inventory import Inventory, Node
from gpuforge.validate.network import iperf, ping
from gpuforge.validate.network.stage import NetworkStage
from gpuforge.validate.transport import CommandResult, Job, Outcome, Transport, run_many

GATE_TIER = 0
_BAD = (Level.ERROR, Level.UNKNOWN)
_GATED = ("ok", "failed_gates")  # reachable nodes (ok ones may be degraded: failed a tier >= 1)
# What a shell or nvidia-smi print when the driver is not there (exit 127: POSIX "command not
# found"; exit 9 with this text: nvidia-smi installed but the kernel module not loaded).
_NO_SMI = re.compile(r"nvidia-smi: (?:command )?not found|nvidia-smi: No such file")
_NO_MODULE = "couldn't communicate with the NVIDIA driver"


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
    # A round's pairs are disjoint and each of its jobs mostly waits on the network, so a round
    # runs all its pairs at once (one thread each) up to this bound, whatever max_workers says.
    max_pairs_at_once: int = 1024
    retests: int = 1  # a low pair is measured again up to this many times; its best run counts
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

    def active(self) -> list[Node]:
        return [n for n in self.inv.nodes if self.states[n.name].state == "ok"]

    def evidence(self, where: str, name: str, res: CommandResult) -> None:
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
        self._connect()
        for tier in sorted({c.tier for c in self.checks}):
            self._tier(tier, [c for c in self.checks if c.tier == tier])
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
        kind = self.transport.kind
        # only an SSH connection is evidence that SSH works; `local` ran a shell here
        ok = {
            "ssh": "ssh ok",
            "local": "local: commands run on this machine, not over a network",
            "slurm": "slurm: reached through srun",
        }.get(kind, f"{kind}: reached")
        for res in self.run_jobs("connect", jobs):
            if not self.lost(res):
                self.report.add(CheckResult("node.reachable", Level.PASS, (res.node,), "ok", "ok", ok))

    def _tier(self, tier: int, checks: list[NodeCheck[Any]]) -> None:
        active = [n for n in self.active() if n.name not in self.degraded]
        # A node out of reach already has its one node.reachable row; "not run" rows are for
        # nodes that were reachable but gated out or failed a lower tier.
        skipped = [n for n in self.inv.nodes if n not in active and self.states[n.name].state in _GATED]
        jobs = [Job(n, c.command(), c.timeout_s, c) for n in active for c in checks]
        results = self.run_jobs(f"tier {tier}", jobs)
        failed: set[str] = set()
        measured: dict[str, tuple[NodeCheck[Any], dict[str, Any]]] = {}
        no_driver: dict[str, str] = {}  # node -> why: one result instead of one per nvidia-smi check
        for job, res in zip(jobs, results, strict=True):
            check: NodeCheck[Any] = job.tag
            self.evidence(res.node, check.name, res)
            if self.lost(res):
                continue
            if (why := _driver_missing(res)) is not None:
                no_driver.setdefault(res.node, why)
                continue
            out, measurement = self._judge(check, res)
            self.report.add(out)
            if measurement is not None:
                measured.setdefault(check.name, (check, {}))[1][res.node] = measurement
            if any(r.level in _BAD for r in out):
                failed.add(res.node)
        for node, why in sorted(no_driver.items()):
            want = self.expect[node].gpus_per_node
            if want:
                msg = f"{why}: NVIDIA driver missing on a node expected to have {want} GPU(s)"
                self.report.add(CheckResult("gpu.driver_present", Level.ERROR, (node,), why, want, msg))
                failed.add(node)
            else:
                msg = f"{why}: no NVIDIA driver, and no GPU expected here"
                self.report.add(CheckResult("gpu.driver_present", Level.INFO, (node,), why, want, msg))
        for check in checks:
            if skipped:
                names = tuple(n.name for n in skipped)
                why = "not run: node unreachable, gated out, or failed a lower tier"
                self.report.add(CheckResult(check.name, Level.UNKNOWN, names, None, None, why))
        for check, per_node in measured.values():  # cluster-wide comparisons (driver, VBIOS...)
            if len(per_node) >= 2:
                self.report.add(check.compare(per_node))
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
        return check.judge(node, res.stdout, self.expect[node])


def _driver_missing(res: CommandResult) -> str | None:
    """Why nvidia-smi could not answer on this node (no binary, or no kernel module), or None."""
    if res.exit_code == 127 and _NO_SMI.search(res.stderr):
        return "nvidia-smi not found (exit 127)"
    if _NO_MODULE in res.stdout or _NO_MODULE in res.stderr:
        return "nvidia-smi could not communicate with the NVIDIA driver (module not loaded)"
    return None
