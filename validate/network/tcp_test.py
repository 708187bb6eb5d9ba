"""The TCP pair test as run: k iperf3 processes per pair, one direction at a time, and its verdict.

Why one direction at a time: with `--bidir` each direction's ACKs wait in the other direction's
data queue, and behind a deep shaper queue (tbf `latency 400ms`) the ACK clock slows every flow:
a healthy 200 Mbit/s test bed fabric measured about 0.154 Gbit/s per direction (issue 12). Forward
then reverse (`-R`) keeps each run's ACK path idle, so each direction measures the link alone.
AWS's bandwidth applies in and out at once, so this is no less fair than `--bidir`; it takes two
runs instead of one.

Why k processes: before iperf3 3.16 one process is one thread (tcp_model.yaml iperf3), so a
multi-flow test runs one process per flow, each `-P 1`, on its own server port. The model
(validate/network/model.py) sizes k; this module builds the commands, splits and sums the outputs,
and judges the sum against the model's ceiling. A CPU-bound run says so instead of calling the
link slow (end.cpu_utilization_percent, as iperf3 reports it).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import ParseError
from gpuforge.validate.network import iperf, model
from gpuforge.validate.network.iperf import IperfMeasurement, IperfSettings

NAME = iperf.NAME
_MARK = "--- gpuforge iperf3 "
_CHUNK = re.compile(r"^--- gpuforge iperf3 (fwd|rev|bidir)\.(\d+) ---$", re.M)


def phases(settings: IperfSettings) -> list[tuple[str, str]]:
    """(name, iperf3 flag) of each run a pair makes: forward then reverse, or one --bidir run."""
    return [("bidir", "--bidir")] if settings.bidir else [("fwd", ""), ("rev", "-R")]


def server_command(bind: str, ports: list[int], settings: IperfSettings, runs: int = 2) -> str:
    """One one-shot server (`-1`) per port, each bounded by `timeout`, and a bounded wait until
    all of them listen. Every run of every process has a port of its own: a server asked for a
    second test right after its first can still be winding the first down and answer "the server
    is busy" (seen on a loaded test bed), so no server serves two."""
    life = runs * settings.run_bound_s() + 10
    b = shlex.quote(bind)
    starts = " ".join(
        f"nohup timeout -k 2 {life:g} iperf3 -s -1 -B {b} -p {int(p)} >/dev/null 2>&1 </dev/null &" for p in ports
    )
    checks = " && ".join(f"ss -Hltn 'sport = :{int(p)}' | grep -q ." for p in ports)
    return (
        f"{starts} for i in $(seq 50); do {checks} && exit 0; sleep 0.1; done; "
        f"echo 'iperf3 servers did not listen on ports {','.join(map(str, ports))} within 5 s' >&2; exit 1"
    )


def client_command(server: str, ports: list[int], flows_per_process: int, settings: IperfSettings) -> str:
    """All k processes of a run at once, one run after the other (forward, then reverse); each
    process's JSON behind a marker. `ports` holds k ports per run, in run order."""
    s = shlex.quote(server)
    base = (
        f"iperf3 -c {s} -P {int(flows_per_process)} -t {settings.duration_s:g} -O {settings.omit_s:g} -J "
        f"--connect-timeout {settings.connect_timeout_ms}"
    )
    runs = phases(settings)
    k = len(ports) // len(runs)
    body = []
    for r, (name, flag) in enumerate(runs):
        mine = ports[r * k : (r + 1) * k]
        starts = " ".join(f'{base} -p {int(p)} {flag} --logfile "$d/{name}.{i}" >/dev/null 2>&1 &' for i, p in enumerate(mine))
        body.append(f"{starts} wait;")
    return (
        "d=$(mktemp -d) || exit 1; " + " ".join(body) + " rc=0; "
        f'for f in "$d"/*; do echo "{_MARK}${{f##*/}} ---"; cat "$f"; echo; done; '
        'ls "$d" | grep -q . || rc=1; rm -rf "$d"; exit $rc'
    )


@dataclass(frozen=True)
class PairRun:
    """A pair's measurement summed over its processes, per direction."""

    forward_bps: float  # client -> server
    reverse_bps: float | None
    retransmits: int | None
    processes: int
    streams: int
    version: str | None
    cpu_percent: float | None  # the busiest iperf3 process on either end, % of one core
    error: str | None = None


def cpu_percent(text: str) -> tuple[float | None, float | None]:
    """(host_total, remote_total) from end.cpu_utilization_percent, if the run reported it."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None, None
    cpu = (doc.get("end") or {}).get("cpu_utilization_percent") if isinstance(doc, dict) else None
    if not isinstance(cpu, dict):
        return None, None
    return _pct(cpu.get("host_total")), _pct(cpu.get("remote_total"))


def _pct(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def parse(stdout: str) -> PairRun:
    """Split the client command's output by marker and sum each direction over its processes.

    Output without markers is one plain iperf3 `--bidir -J` document (the older single-process test)."""
    marks = list(_CHUNK.finditer(stdout))
    if not marks:
        m = iperf.parse(stdout)
        host, remote = cpu_percent(stdout)
        return _single(m, max((x for x in (host, remote) if x is not None), default=None))
    fwd: list[IperfMeasurement] = []
    rev: list[IperfMeasurement] = []
    cpus: list[float] = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(stdout)
        chunk = stdout[mark.end() : end]
        try:
            m = iperf.parse(chunk)
        except ParseError as exc:
            raise ParseError(f"iperf3 process {mark.group(1)}.{mark.group(2)}: {exc}") from None
        if m.error is not None:
            return PairRun(0.0, None, None, len(marks), 0, m.version, None, f"{mark.group(1)}.{mark.group(2)}: {m.error}")
        cpus += [x for x in cpu_percent(chunk) if x is not None]
        if mark.group(1) == "rev":
            rev.append(m)
        else:
            fwd.append(m)
            if m.reverse_bps is not None:  # a --bidir document carries both directions
                rev.append(IperfMeasurement(m.reverse_bps, None, None, m.streams, m.version))
    if not fwd:
        raise ParseError("no forward iperf3 run in the output")
    retr = [m.retransmits for m in (*fwd, *rev) if m.retransmits is not None]
    return PairRun(
        forward_bps=sum(m.forward_bps for m in fwd),
        reverse_bps=sum(m.forward_bps for m in rev) if rev else None,
        retransmits=sum(retr) if retr else None,
        processes=len(fwd),
        streams=sum(m.streams or 0 for m in fwd),
        version=fwd[0].version,
        cpu_percent=max(cpus) if cpus else None,
    )


def _single(m: IperfMeasurement, cpu: float | None) -> PairRun:
    return PairRun(m.forward_bps, m.reverse_bps, m.retransmits, 1, m.streams or 0, m.version, cpu, m.error)


def worst_gbps(run: PairRun) -> float:
    return min(x for x in (run.forward_bps, run.reverse_bps) if x is not None) / 1e9


def cpu_bound(run: PairRun) -> bool:
    """A process at >= cpu_bound_percent of a core per thread it runs: one thread before iperf3
    3.16, one per stream from 3.16 on (its figure sums its threads)."""
    limit = float(model.data()["iperf3"]["cpu_bound_percent"])
    threads = max(1, run.streams // max(1, run.processes)) if model.multithreaded(model.parse_version(run.version)) else 1
    return run.cpu_percent is not None and run.cpu_percent >= limit * threads


def expected_text(c: model.Ceiling) -> str | None:
    if c.gbps is None:
        return None
    return f">= {c.floor_gbps:.3g} Gbit/s per direction ({c.floor_fraction:g} x {c.gbps:.3g}: {c.reason})"


def evaluate(a: str, b: str, runs: list[PairRun], c: model.Ceiling) -> CheckResult:
    """One result per pair, judged on its best run (noise only ever lowers a throughput test)
    and on the slower direction of that run."""
    target = (iperf.pair_label(a, b),)
    ok = [r for r in runs if r.error is None]
    if not ok:
        return CheckResult(NAME, Level.ERROR, target, None, expected_text(c), f"iperf3: {runs[-1].error}")
    best = max(ok, key=worst_gbps)
    worst = worst_gbps(best)
    observed: dict[str, Any] = {f"{a}->{b}_gbps": round(best.forward_bps / 1e9, 4)}
    if best.reverse_bps is not None:
        observed[f"{b}->{a}_gbps"] = round(best.reverse_bps / 1e9, 4)
    observed.update({"processes": best.processes, "streams": best.streams, "runs": len(runs)})
    if len(runs) > 1:
        observed["all_runs_gbps"] = [round(worst_gbps(r), 4) for r in ok]
    if best.retransmits is not None:
        observed["retransmits"] = best.retransmits
    if best.cpu_percent is not None:
        observed["cpu_percent_max"] = round(best.cpu_percent, 1)
    expected = expected_text(c)
    if c.floor_gbps is None:
        msg = f"{worst:.3g} Gbit/s; {c.reason}, so not judged"
        return CheckResult(NAME, Level.INFO, target, observed, None, msg)
    if worst < c.floor_gbps:
        if cpu_bound(best):
            msg = (
                f"{worst:.3g} Gbit/s is below {c.floor_gbps:.3g}, but an iperf3 process ran at "
                f"{best.cpu_percent:.0f}% of a core: CPU-bound, so the link is not judged slow"
            )
            return CheckResult(NAME, Level.WARNING, target, observed, expected, msg)
        msg = f"{worst:.3g} Gbit/s is below {c.floor_gbps:.3g} ({c.floor_fraction:g} x {c.gbps:.3g} Gbit/s)"
        return CheckResult(NAME, Level.ERROR, target, observed, expected, msg)
    return CheckResult(NAME, Level.PASS, target, observed, expected, f"{worst:.3g} Gbit/s >= {c.floor_gbps:.3g}")
