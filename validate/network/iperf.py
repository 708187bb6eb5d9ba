"""iperf3 between two nodes: settings, a pure parser of one `-J` document, and a pure evaluator
of one document against a stated link speed (the parser corpus uses it).

The pair test as the network stage runs it (k processes, one direction at a time, its ceiling)
is validate/network/tcp_test.py and model.py. An iperf3 server runs one test at a time and has
no queue (esnet/iperf#685), so every process has a server port of its own; every run is under
`timeout`: iperf3's own timeouts do not bound a SIGSTOPped server (testbed-feasibility.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import ParseError
from gpuforge.validate.network.policy import figure

NAME = "network.iperf3"


@dataclass(frozen=True)
class IperfSettings:
    streams: int | None = None  # None: as many flows as the TCP model (model.py) says the link needs
    duration_s: float = 3.0
    omit_s: float = 1.0  # skip slow start (`-O`)
    port_base: int = 5301
    ports: int = 200  # ports cycle through [port_base, port_base + ports)
    connect_timeout_ms: int = 3000
    bidir: bool = False  # both directions at once; default is one after the other (tcp_test.py says why)

    def run_bound_s(self) -> float:
        """How long a client may take: the test, slow start, the connect, and slack for the end."""
        return self.duration_s + self.omit_s + self.connect_timeout_ms / 1000 + 5.0

    def port(self, round_no: int, pair_no: int, pairs_per_round: int) -> int:
        # A fresh port per round, so a server left over from a failed round never collides.
        return self.port_base + (round_no * max(pairs_per_round, 1) + pair_no) % self.ports


@dataclass(frozen=True)
class IperfMeasurement:
    forward_bps: float  # client -> server, as received by the server
    reverse_bps: float | None  # server -> client (--bidir); None when the run was one-way
    retransmits: int | None
    streams: int | None
    version: str | None
    error: str | None = None  # iperf3 ran and reported a failure (top-level "error")


def parse(stdout: str) -> IperfMeasurement:
    text = stdout.strip()
    if not text:
        raise ParseError("empty output (iperf3 not installed, or killed before it printed)")
    try:
        doc = json.loads(text, object_pairs_hook=_keep_duplicates)
    except json.JSONDecodeError as exc:
        doc = _json_stream(text)
        if doc is None:
            raise ParseError(f"not iperf3 JSON ({exc.msg} at char {exc.pos}); truncated?") from None
    if not isinstance(doc, dict):
        raise ParseError("iperf3 JSON is not an object")
    start = doc.get("start") if isinstance(doc.get("start"), dict) else {}
    version = start.get("version") if isinstance(start, dict) else None
    if doc.get("error"):
        return IperfMeasurement(0.0, None, None, None, version, str(doc["error"]))
    end = doc.get("end")
    if not isinstance(end, dict):
        raise ParseError("no `end` block: the test did not finish")
    fwd = _bps(end, "sum_received")
    if fwd is None:
        raise ParseError("no end.sum_received.bits_per_second (UDP run, or wrong tool?)")
    rev = _bps(end, "sum_received_bidir_reverse")
    sent = end.get("sum_sent") if isinstance(end.get("sum_sent"), dict) else {}
    retr = sent.get("retransmits") if isinstance(sent, dict) else None
    test = start.get("test_start", {}) if isinstance(start, dict) else {}
    streams = test.get("num_streams") if isinstance(test, dict) else None
    return IperfMeasurement(fwd, rev, int(retr) if isinstance(retr, (int, float)) else None, streams, version, None)


def _json_stream(text: str) -> dict[str, Any] | None:
    """The `-J` document rebuilt from `--json-stream` output (iperf3 3.17+), or None if it is not.

    One object per line, `{"event": "start"|"interval"|"end"|"error", "data": ...}` (esnet/iperf
    src/iperf_api.c, JSON_STREAM; a published capture: omnt/OpenMobileNetworkToolkit#34,
    tests/validate/corpus/iperf3/). Every line must be such an event, or this is not the format.
    """
    doc: dict[str, Any] = {}
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for line in lines:
        try:
            event = json.loads(line, object_pairs_hook=_keep_duplicates)
        except json.JSONDecodeError:
            return None
        if not isinstance(event, dict) or not isinstance(event.get("event"), str) or "data" not in event:
            return None
        if event["event"] in ("start", "end", "error"):
            doc[event["event"]] = event["data"]
    return doc if lines else None


def _keep_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object that keeps a repeated key under the name iperf3 3.11 gave it.

    iperf3 3.7 to 3.10 write `--bidir` results with duplicate keys (esnet/iperf#952, fixed by
    PR #1200 in 3.11): the client prints its sending streams' `sum_sent`/`sum_received` first,
    then its receiving streams' under the same names (src/iperf_api.c at tag 3.9, commit
    1f8fb13297f3e3e40169ebcd12e171167e394473, iperf_print_results: lower_mode -1 = sender
    first). A plain dict keeps the last one, silently swapping in the reverse direction. 3.11
    names the second one `<key>_bidir_reverse`; mapping the old output onto that name makes both
    versions read the same.
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key not in out:
            out[key] = value
        elif f"{key}_bidir_reverse" not in out:
            out[f"{key}_bidir_reverse"] = value
        # a third copy is ignored: 3.12 repeats `sock_bufsize` in `start` (netfix capture), no
        # field we read is printed more than twice
    return out


def _bps(end: dict[str, Any], key: str) -> float | None:
    block = end.get(key)
    if not isinstance(block, dict):
        return None
    value = block.get("bits_per_second")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < float("inf"):
        raise ParseError(f"end.{key}.bits_per_second is {value!r}, not a non-negative number")
    return float(value)


def pair_label(a: str, b: str) -> str:
    return f"{a}<->{b}"


def evaluate(a: str, b: str, m: IperfMeasurement, expected_gbps: float | None, source: str | None) -> CheckResult:
    """One result per pair, judged on the slower direction (a link is as good as its worst side)."""
    target = (pair_label(a, b),)
    if m.error is not None:
        return CheckResult(NAME, Level.ERROR, target, None, _expected(expected_gbps, source), f"iperf3: {m.error}")
    observed: dict[str, Any] = {f"{a}->{b}_gbps": round(m.forward_bps / 1e9, 3)}
    if m.reverse_bps is not None:
        observed[f"{b}->{a}_gbps"] = round(m.reverse_bps / 1e9, 3)
    if m.retransmits is not None:
        observed["retransmits"] = m.retransmits
    worst = min(x for x in (m.forward_bps, m.reverse_bps) if x is not None) / 1e9
    if expected_gbps is None:
        return CheckResult(
            NAME,
            Level.INFO,
            target,
            observed,
            None,
            f"{worst:.3g} Gbit/s; no expected link speed (set expect.link_gbps or a profile) so not judged",
        )
    frac = figure("iperf_min_fraction").value
    floor = frac * expected_gbps
    expected = _expected(expected_gbps, source)
    if worst < floor:
        return CheckResult(
            NAME,
            Level.ERROR,
            target,
            observed,
            expected,
            f"{worst:.3g} Gbit/s is below {floor:.3g} ({frac:g} x {expected_gbps:g} Gbit/s)",
        )
    return CheckResult(NAME, Level.PASS, target, observed, expected, f"{worst:.3g} Gbit/s >= {floor:.3g}")


def _expected(gbps: float | None, source: str | None) -> str | None:
    if gbps is None:
        return None
    frac = figure("iperf_min_fraction").value
    return f">= {frac * gbps:.3g} Gbit/s ({frac:g} x {gbps:g}; {source or 'unstated source'})"
