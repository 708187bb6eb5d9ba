"""What a stage of a validation run reads and calls on the run itself: the run's options and node
states, its progress sink, and `StageHost`, the part of the runner a stage uses.

The runner (runner.py) runs the network stage (network/stage.py) and the NCCL pairs
(collective.py), and they use its transport, evidence, node states and report. They take a
`StageHost`, which the Runner is, so neither imports runner.py: the arrows run one way,
runner -> stages -> stagehost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpuforge.common.results import Report
from gpuforge.validate.checks import Expectations
from gpuforge.validate.inventory import Inventory, Node
from gpuforge.validate.network import iperf, ping
from gpuforge.validate.transport import CommandResult, Job, Transport


class Progress(Protocol):
    def stage(self, name: str, total: int) -> None: ...

    def advance(self, note: str = "") -> None: ...


@dataclass(frozen=True)
class PairPlan:
    """One large message size: the busbw there is the figure; a sweep would cost minutes per pair."""

    min_bytes: str = "1G"
    max_bytes: str = "1G"
    iters: int = 20
    timeout_s: int = 120


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
    nccl_plan: PairPlan = field(default_factory=PairPlan)


@dataclass
class NodeState:
    state: str  # ok | failed_gates | unreachable | auth_failed | timeout | host_key_rejected
    detail: str = ""


class StageHost(Protocol):
    """The runner as a stage sees it (runner.Runner)."""

    @property
    def inv(self) -> Inventory: ...
    @property
    def transport(self) -> Transport: ...
    @property
    def expect(self) -> dict[str, Expectations]: ...
    @property
    def opt(self) -> RunOptions: ...
    @property
    def progress(self) -> Progress: ...
    @property
    def report(self) -> Report: ...
    @property
    def states(self) -> dict[str, NodeState]: ...
    @property
    def degraded(self) -> dict[str, int]: ...

    def active(self) -> list[Node]: ...

    def evidence(self, where: str, name: str, res: CommandResult) -> None: ...

    def run_jobs(self, stage: str, jobs: list[Job]) -> list[CommandResult]: ...

    def run_pairs(self, stage: str, jobs: list[Job]) -> list[CommandResult]: ...

    def lost(self, res: CommandResult) -> bool: ...
