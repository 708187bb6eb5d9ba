"""Name the slow node or link from pair throughputs, with robust statistics.

A pair is *low* when it is below the acceptance floor (a fraction of the expected link speed)
or, relative to its peers, below `outlier_ratio` x the median AND more than `outlier_mad_z`
scaled MADs under it. Then:
- most nodes look slow, or the pairs no slow node explains are under the floor too: the whole
  fabric is slow;
- a node all of whose (>= 2) pairs are low: that node is slow (how maintainers read a node
  fault, nccl-tests#106);
- a low pair not explained by a slow node: that link is slow;
- one low pair and nothing else to compare with (2 nodes): inconclusive, node or link.
Pure: pair values in, a verdict out, so the rules are tested without any host.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.network.policy import figure

NAME = "network.localise"
MAD_SCALE = 1.4826  # scaled MAD estimates the standard deviation for normal data


@dataclass(frozen=True)
class PairValue:
    a: str
    b: str
    a_to_b_gbps: float
    b_to_a_gbps: float | None = None

    @property
    def worst(self) -> float:
        return min(x for x in (self.a_to_b_gbps, self.b_to_a_gbps) if x is not None)


@dataclass
class Verdict:
    kind: str  # healthy | node | link | fabric | inconclusive | no-data
    slow_nodes: list[str] = field(default_factory=list)
    slow_links: list[tuple[str, str]] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)  # all pairs low, but < 2 pairs tested
    median_gbps: float | None = None
    mad_gbps: float | None = None
    floor_gbps: float | None = None
    low_pairs: list[tuple[str, str]] = field(default_factory=list)
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "slow_nodes": self.slow_nodes,
            "slow_links": [list(p) for p in self.slow_links],
            "suspects": self.suspects,
            "median_gbps": self.median_gbps,
            "mad_gbps": self.mad_gbps,
            "floor_gbps": self.floor_gbps,
            "low_pairs": [list(p) for p in self.low_pairs],
            "message": self.message,
        }


def matrix(nodes: Sequence[str], pairs: Sequence[PairValue]) -> dict[str, dict[str, float | None]]:
    """Directional node x node matrix: m[src][dst] = Gbit/s from src to dst (None: not tested)."""
    m: dict[str, dict[str, float | None]] = {a: {b: None for b in nodes if b != a} for a in nodes}
    for p in pairs:
        m.setdefault(p.a, {})[p.b] = p.a_to_b_gbps
        if p.b_to_a_gbps is not None:
            m.setdefault(p.b, {})[p.a] = p.b_to_a_gbps
    return m


def classify(
    pairs: Sequence[PairValue], expected_gbps: float | None, min_fraction: float | None = None, unit: str = "Gbit/s"
) -> Verdict:
    """`min_fraction` of `expected_gbps` is the floor (default: the iperf3 figure from defaults.yaml)."""
    if not pairs:
        return Verdict("no-data", message="no pair was measured")
    values = [p.worst for p in pairs]
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    frac = figure("iperf_min_fraction").value if min_fraction is None else min_fraction
    floor = frac * expected_gbps if expected_gbps is not None else None
    ratio, z = figure("outlier_ratio").value, figure("outlier_mad_z").value

    def relatively_low(v: float) -> bool:
        spread = MAD_SCALE * mad
        return v < ratio * med and (spread == 0 or (med - v) / spread > z)

    def below_or_outlier(v: float) -> bool:
        return (floor is not None and v < floor) or relatively_low(v)

    low: Callable[[float], bool] = below_or_outlier

    verdict = Verdict("healthy", median_gbps=med, mad_gbps=mad, floor_gbps=floor)
    standouts = _standout_nodes(pairs, ratio, z)
    verdict.low_pairs = [(p.a, p.b) for p in pairs if low(p.worst) or p.a in standouts or p.b in standouts]
    if not verdict.low_pairs:
        verdict.message = f"all {len(pairs)} pairs healthy (median {med:.3g} {unit})"
        return verdict
    candidates, all_low, by_node = _slow_nodes(pairs, low)
    unexplained = [p for p in pairs if p.a not in all_low and p.b not in all_low]
    rest_median = statistics.median(p.worst for p in unexplained) if unexplained else None
    below = floor is not None and rest_median is not None and rest_median < floor
    if len(candidates) > len(by_node) / 2 or below:
        # A fabric-wide shortfall. It is one finding; a node or link that stands out from this
        # fabric's own median is another, so judge the outliers against the median alone.
        verdict.kind = "fabric"
        verdict.message = f"median pair {med:.3g} {unit}; most pairs are low: the whole fabric is slow"
        if floor is not None:
            verdict.message += f" (floor {floor:.3g})"
        candidates, all_low, by_node = _slow_nodes(pairs, relatively_low)
        candidates = sorted(set(candidates) | standouts)
        if len(candidates) > len(by_node) / 2:
            return verdict
        low = relatively_low
        verdict.low_pairs = [(p.a, p.b) for p in pairs if low(p.worst) or p.a in standouts or p.b in standouts]
    else:
        candidates = sorted(set(candidates) | standouts)
        verdict.low_pairs = [(p.a, p.b) for p in pairs if low(p.worst) or p.a in standouts or p.b in standouts]
    verdict.slow_nodes = candidates
    verdict.suspects = sorted(n for n in all_low if len(by_node[n]) < 2)
    slow = set(verdict.slow_nodes)
    verdict.slow_links = [(p.a, p.b) for p in pairs if low(p.worst) and p.a not in slow and p.b not in slow]
    if verdict.kind == "fabric":
        outliers = [*verdict.slow_nodes, *(f"{a}<->{b}" for a, b in verdict.slow_links if len(by_node) > 2)]
        if outliers:
            verdict.message += f"; and against its own median {', '.join(outliers)} stand(s) out"
        return verdict
    if verdict.slow_nodes:
        verdict.kind = "node"
        verdict.message = f"slow node(s): {', '.join(verdict.slow_nodes)} (every pair they are in is low)"
    elif verdict.slow_links and len(by_node) > 2:
        verdict.kind = "link"
        links = ", ".join(f"{a}<->{b}" for a, b in verdict.slow_links)
        verdict.message = f"slow link(s): {links} (their nodes are fine with other peers)"
    else:
        verdict.kind = "inconclusive"
        verdict.message = "a pair is low but no third node separates node from link; test with more nodes"
    if verdict.slow_nodes and verdict.slow_links:
        links = ", ".join(f"{a}<->{b}" for a, b in verdict.slow_links)
        verdict.message += f"; also slow link(s): {links}"
    return verdict


def _standout_nodes(pairs: Sequence[PairValue], ratio: float, z: float) -> set[str]:
    """Nodes (in >= 2 pairs) whose *best* pair is low against the other nodes' best pairs.

    A slow node drags down every pair it is in, but only half of each neighbour's: a node's best
    pair is its own figure, uncontaminated by one bad peer. On a 6-node ring a slow node is a third
    of the pairs, too many for a pair-level MAD to see (policed test bed: pairs 0.044, 0.044,
    0.047, 0.038 and the slow node's 0.025, 0.024 give z 2.2); against the nodes' best pairs it
    stands at z > 10."""
    best: dict[str, float] = {}
    count: dict[str, int] = {}
    for p in pairs:
        for n in (p.a, p.b):
            best[n] = max(best.get(n, p.worst), p.worst)
            count[n] = count.get(n, 0) + 1
    if len(best) < 3:
        return set()
    med = statistics.median(best.values())
    spread = MAD_SCALE * statistics.median(abs(v - med) for v in best.values())
    return {
        n for n, v in best.items() if count[n] >= 2 and v < ratio * med and (spread == 0 or (med - v) / spread > z)
    }


def _slow_nodes(
    pairs: Sequence[PairValue], low: Callable[[float], bool]
) -> tuple[list[str], set[str], dict[str, list[bool]]]:
    """Nodes all of whose (>= 2) pairs are low; every node whose pairs are all low; flags per node."""
    by_node: dict[str, list[bool]] = {}
    for p in pairs:
        for n in (p.a, p.b):
            by_node.setdefault(n, []).append(low(p.worst))
    all_low = {n for n, flags in by_node.items() if all(flags)}
    return sorted(n for n in all_low if len(by_node[n]) >= 2), all_low, by_node


def results(
    verdict: Verdict, mat: Mapping[str, Mapping[str, float | None]], name: str = NAME, unit: str = "Gbit/s"
) -> list[CheckResult]:
    observed = {"kind": verdict.kind, "median_gbps": verdict.median_gbps, "mad_gbps": verdict.mad_gbps}
    expected = f">= {verdict.floor_gbps:.3g} {unit} per pair" if verdict.floor_gbps is not None else None
    if verdict.kind == "no-data":
        return [CheckResult(name, Level.UNKNOWN, (), None, expected, verdict.message)]
    if verdict.kind == "healthy":
        measured = [v for row in mat.values() for v in row.values() if v is not None]
        observed["min_gbps"] = min(measured) if measured else None  # what a saved baseline keeps
        return [CheckResult(name, Level.PASS, tuple(mat), observed, expected, verdict.message)]
    targets: tuple[str, ...]
    if verdict.kind == "node":
        targets = tuple(verdict.slow_nodes)
    elif verdict.kind == "link":
        targets = tuple(f"{a}<->{b}" for a, b in verdict.slow_links)
    else:
        targets = tuple(mat)
    out = [CheckResult(name, Level.ERROR, targets, observed, expected, verdict.message)]
    if verdict.kind == "fabric" and (verdict.slow_nodes or verdict.slow_links):
        # the second finding: who stands out from the (slow) fabric's own median
        who = (*verdict.slow_nodes, *(f"{a}<->{b}" for a, b in verdict.slow_links))
        msg = f"below {figure('outlier_ratio').value:g} x this fabric's own median ({verdict.median_gbps:.3g} {unit})"
        out.append(CheckResult(f"{name}.outlier", Level.ERROR, who, observed, "in line with the fabric's median", msg))
    return out
