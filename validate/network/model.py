"""What a TCP test between two nodes can reach, and why: the ceiling iperf3 is judged against.

Pure: facts in (the default card's bandwidth, placement group, ENA Express, the test's flows
and processes, the iperf3 version on both ends), a `Ceiling` out that carries its own reason
and sources, so the report prints what it judged against. Figures are in tcp_model.yaml.

Three kinds of ceiling, strongest evidence first:
- `baseline`: a pair figure measured on this cluster when it was healthy (saved baseline);
- `stated`: a per-direction link speed the inventory states (`expect.link_gbps`), e.g. a test bed;
- `model`: AWS's documented limits: flows x per-flow limit, capped by the default card's baseline.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpuforge.validate.checks import Expectations
from gpuforge.validate.network.policy import figure

_FILE = Path(__file__).with_name("tcp_model.yaml")
_VERSION = re.compile(r"iperf (\d+)\.(\d+)")


@cache
def data() -> dict[str, Any]:
    doc = yaml.safe_load(_FILE.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{_FILE}: not a mapping")
    return doc


@dataclass(frozen=True)
class LinkFacts:
    """What is known about a node's TCP path, from the catalog, the profile and the inventory."""

    instance_type: str | None = None
    card_baseline_gbps: float | None = None
    card_peak_gbps: float | None = None
    ena_express_supported: bool = False
    ena_express: bool = False  # enabled on the node's interface (stack option)
    placement: str | None = None  # "cluster" | "none" | None (unknown)
    stated_gbps: float | None = None  # the inventory's own per-direction link speed
    baseline_gbps: float | None = None  # a healthy pair's figure from a saved baseline
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """How to run iperf3 for a pair so the test itself is not the limit."""

    flows: int
    processes: int

    @property
    def flows_per_process(self) -> int:
        return max(1, self.flows // self.processes)


@dataclass(frozen=True)
class Ceiling:
    gbps: float | None  # per direction; None: nothing to judge against
    kind: str  # model | stated | baseline | none
    reason: str
    sources: tuple[str, ...]
    floor_fraction: float

    @property
    def floor_gbps(self) -> float | None:
        return None if self.gbps is None else self.floor_fraction * self.gbps


def parse_version(text: str | None) -> tuple[int, int] | None:
    """(3, 9) from 'iperf 3.9 (cJSON 1.7.13)' or the JSON's start.version 'iperf 3.9'."""
    m = _VERSION.search(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def multithreaded(version: tuple[int, int] | None) -> bool:
    """True from iperf3 3.16 on; an unknown version is taken as single-threaded (the safe plan)."""
    major, minor = (int(x) for x in str(data()["iperf3"]["multithreaded_from"]).split("."))
    return version is not None and version >= (major, minor)


def flow_limit(facts: LinkFacts) -> tuple[float, str]:
    lim = data()["flow_limits_gbps"]
    if facts.ena_express and facts.ena_express_supported:
        return float(lim["ena_express"]), "with ENA Express"
    if facts.placement == "cluster":
        return float(lim["cluster_placement_group"]), "in a cluster placement group"
    where = "outside a cluster placement group" if facts.placement == "none" else "placement group unknown, so"
    return float(lim["outside_cluster_placement_group"]), where


def plan(facts: LinkFacts, versions: tuple[tuple[int, int] | None, ...], streams: int | None = None) -> Plan:
    """Flows enough to reach the card at the per-flow limit (min_flows..max_flows), and one process
    per flow unless both ends run a multi-threaded iperf3. `streams` (the user's) wins on flows."""
    if streams is not None:
        flows = streams
    elif facts.card_baseline_gbps is not None and facts.stated_gbps is None and facts.baseline_gbps is None:
        per_flow, _ = flow_limit(facts)
        d = data()["iperf3"]
        flows = min(int(d["max_flows"]), max(int(d["min_flows"]), math.ceil(facts.card_baseline_gbps / per_flow)))
    else:
        flows = 4
    mt = all(multithreaded(v) for v in versions) if versions else False
    return Plan(flows, 1 if mt else flows)


def ceiling(facts: LinkFacts, p: Plan) -> Ceiling:
    """The per-direction figure a healthy pair reaches with plan `p`, and the reason in words."""
    strict = figure("iperf_min_fraction")
    if facts.baseline_gbps is not None:
        return Ceiling(
            facts.baseline_gbps,
            "baseline",
            f"saved baseline: a healthy pair measured {facts.baseline_gbps:g} Gbit/s per direction",
            facts.sources,
            strict.value,
        )
    if facts.stated_gbps is not None:
        return Ceiling(
            facts.stated_gbps,
            "stated",
            f"link speed stated in the inventory: {facts.stated_gbps:g} Gbit/s per direction",
            facts.sources,
            strict.value,
        )
    if facts.card_baseline_gbps is None:
        return Ceiling(None, "none", "no link speed known (no catalog type, no expect.link_gbps)", (), strict.value)
    per_flow, where = flow_limit(facts)
    by_flows = p.flows * per_flow
    card = facts.card_baseline_gbps
    gbps = min(by_flows, card)
    peak = f", peak {facts.card_peak_gbps:g}" if facts.card_peak_gbps not in (None, card) else ""
    reason = f"{p.flows} flows x {per_flow:g} Gbit/s {where} = {by_flows:g} Gbit/s; card 0 baseline {card:g}{peak}"
    reason += " -> bound by the flows" if by_flows < card else " -> bound by the card"
    if p.processes > 1:
        reason += f"; {p.processes} iperf3 processes (single-threaded before {data()['iperf3']['multithreaded_from']})"
    src = (
        *facts.sources,
        "tcp_model.yaml flow_limits_gbps: " + " ".join(str(data()["flow_limits_gbps"]["source"]).split()),
    )
    return Ceiling(gbps, "model", reason, src, float(data()["floor_fraction"]["value"]))


def nccl_note() -> str:
    return " ".join(str(data()["nccl_note"]).split())


def facts(expect: Expectations) -> LinkFacts:
    """A node's LinkFacts from its Expectations (thresholds.build_expectations or the inventory)."""
    x, src = expect.extra, expect.sources
    stated = None
    link_src = src.get("link_gbps", "")
    if expect.link_gbps is not None and not link_src.startswith("catalog:"):
        stated = float(expect.link_gbps)  # the inventory's (or a caller's) own figure, not the catalog's
    keys = ("tcp_pair_gbps", "link_gbps", "tcp_card_baseline_gbps", "placement_group", "ena_express")
    return LinkFacts(
        instance_type=link_src.removeprefix("catalog: ") if link_src.startswith("catalog:") else None,
        card_baseline_gbps=_num(x.get("tcp_card_baseline_gbps")),
        card_peak_gbps=_num(x.get("tcp_card_peak_gbps")),
        ena_express_supported=bool(x.get("ena_express_supported", False)),
        ena_express=bool(x.get("ena_express", False)),
        placement=x.get("placement_group"),
        stated_gbps=stated,
        baseline_gbps=_num(x.get("tcp_pair_gbps")),
        sources=tuple(f"{k}: {src[k]}" for k in keys if k in src),
    )


def combine(a: LinkFacts, b: LinkFacts) -> LinkFacts:
    """A pair's facts: the weaker end of each (a pair runs at its slower end's speed)."""

    def low(x: float | None, y: float | None) -> float | None:
        known = [v for v in (x, y) if v is not None]
        return min(known) if known else None

    slower = a if (a.card_baseline_gbps or 0) <= (b.card_baseline_gbps or 0) else b
    return LinkFacts(
        instance_type=slower.instance_type,
        card_baseline_gbps=low(a.card_baseline_gbps, b.card_baseline_gbps),
        card_peak_gbps=low(a.card_peak_gbps, b.card_peak_gbps),
        ena_express_supported=a.ena_express_supported and b.ena_express_supported,
        ena_express=a.ena_express and b.ena_express,  # both ends must enable it (EC2 User Guide)
        placement=a.placement if a.placement == b.placement else ("none" if "none" in (a.placement, b.placement) else None),
        stated_gbps=low(a.stated_gbps, b.stated_gbps),
        baseline_gbps=low(a.baseline_gbps, b.baseline_gbps),
        sources=tuple(dict.fromkeys((*a.sources, *b.sources))),
    )


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
