"""The shape every validate check has: a command, a pure parser, a pure evaluator.

Node checks run one command on one node. Multi-node checks (iperf3 pairs, NCCL across nodes)
are scheduled by the runner, but their parse/evaluate halves are pure in the same way, so both
are tested on captured tool output without any host.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from gpuforge.common.results import CheckResult, Level

M = TypeVar("M")  # the measurement a parser produces


class ParseError(ValueError):
    """The tool's output could not be understood; the check's result is `unknown`, never `pass`."""


@dataclass(frozen=True)
class Expectations:
    """What a node should have, from the profile + catalog or stated by the inventory.

    Every number says where it came from in `sources` (key -> "catalog: p4de.24xlarge" etc.).
    """

    gpus_per_node: int | None = None
    gpu_model: str | None = None
    gpu_memory_gib: float | None = None
    interconnect: str | None = None  # none | pcie | nvlink | nvswitch
    efa_interfaces: int | None = None
    link_gbps: float | None = None
    nccl_busbw_gbps: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)


class NodeCheck(ABC, Generic[M]):
    """A check that runs `command()` on one node and judges its stdout."""

    name: ClassVar[str]
    tier: ClassVar[int] = 0  # 0 = inventory gates (run first); higher tiers need lower ones passed
    timeout_s: ClassVar[float] = 30.0

    @abstractmethod
    def command(self) -> str:
        """The shell command to run on the node."""

    @abstractmethod
    def parse(self, stdout: str) -> M:
        """Pure: tool output -> measurement. Raise ParseError when the output is not understood."""

    @abstractmethod
    def evaluate(self, node: str, measurement: M, expect: Expectations) -> list[CheckResult]:
        """Pure: measurement + expectations -> results for this node."""

    def compare(self, per_node: dict[str, M]) -> list[CheckResult]:
        """Pure: results that need every node's measurement (e.g. the same driver everywhere).
        Called by the runner with two or more nodes; most checks have nothing to compare."""
        return []

    def judge(self, node: str, stdout: str, expect: Expectations) -> tuple[list[CheckResult], M | None]:
        """parse + evaluate, with unparsable output reported as `unknown`; also the measurement."""
        try:
            measurement = self.parse(stdout)
        except ParseError as exc:
            return [CheckResult(self.name, Level.UNKNOWN, (node,), None, None, f"could not parse output: {exc}")], None
        return self.evaluate(node, measurement, expect), measurement

    def run_on_output(self, node: str, stdout: str, expect: Expectations) -> list[CheckResult]:
        """parse + evaluate, with unparsable output reported as `unknown`."""
        return self.judge(node, stdout, expect)[0]
