"""ping between two nodes: RTT p50/p99 and loss, and the path MTU with Don't Fragment set.

The interval stays at 0.2 s, the smallest a non-root user may ask for, because validation
often logs in as an ordinary user. `-w` bounds the run whatever the network does.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import ParseError
from gpuforge.validate.network.iperf import pair_label
from gpuforge.validate.network.policy import figure

NAME = "network.ping"
MTU_NAME = "network.path_mtu"
_MTU_MARK = "--- gpuforge path mtu ---"
_RTT = re.compile(r"\btime[=<]([0-9.]+) ?ms\b")
_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
# The same two lines from a ping that ran under another locale (our commands run under LC_ALL=C,
# but captures from elsewhere may not): iputils in German prints "1 Pakete übertragen, 0 empfangen,
# 100% packet loss" (a published capture), and "Zeit=0,035 ms"-style replies; only the shape is
# relied on: count, words, count, words, [+count words,] percent.
_SUMMARY_ANY = re.compile(r"(\d+) [^\d,\n]+, (\d+) [^\d,\n]+(?:, \+?\d+ [^\d,\n]+)*, [\d.,]+ ?%")
_RTT_ANY = re.compile(r"\b\w+[=<]([0-9]+(?:[.,][0-9]+)?) ?ms\b")
# Windows ping, any locale: "Packets: Sent = 4, Received = 4, Lost = 0 (0% loss)," or Polish
# "Pakiety: Wyslane = 4, Odebrane = 4, Utracone = 0\n (0% straty)," (influxdata/telegraf
# plugins/inputs/ping/ping_windows_test.go captures): label = count, three times, then a percent.
# Windows counts an ICMP error ("Destination net unreachable", "TTL expired in transit") as
# Received, so only lines with a round-trip time are echo replies.
_SUMMARY_WINDOWS = re.compile(r"^[ \t]*[^\n:=]+:\s*[^\n=,]+=\s*(\d+),\s*[^\n=,]+=\s*(\d+),\s*[^\n=,]+=\s*\d+\s*\(\d+%", re.M)
# iputils: "rtt min/avg/max/mdev = a/b/c/d ms"; macOS: "round-trip min/avg/max/stddev = ...";
# busybox: "round-trip min/avg/max = a/b/c ms" (thombashi/pingparsing test captures).
_RTT_SUMMARY = re.compile(r"(?:rtt|round-trip) min/avg/max(?:/\w+)? = ([0-9.]+)/([0-9.]+)/([0-9.]+)")
_IP_OVERHEAD = 28  # 20-byte IPv4 header + 8-byte ICMP header


@dataclass(frozen=True)
class PingSettings:
    count: int = 10
    interval_s: float = 0.2

    def run_bound_s(self) -> float:
        return self.count * self.interval_s + 3.0


def command(target: str, settings: PingSettings, mtu: int | None) -> str:
    t = shlex.quote(target)
    deadline = math.ceil(settings.count * settings.interval_s + 2)
    cmd = f"ping -n -c {settings.count} -i {settings.interval_s:g} -W 1 -w {deadline} {t}"
    if mtu is not None:
        # ping exits 1 when the big packet is refused; the marker keeps the two outputs apart.
        cmd += f"; echo '{_MTU_MARK}'; ping -n -M do -s {mtu - _IP_OVERHEAD} -c 2 -W 1 -w 3 {t}"
    return cmd


@dataclass(frozen=True)
class PingMeasurement:
    sent: int
    received: int
    rtts_ms: tuple[float, ...]
    mtu_ok: bool | None  # None: not tested

    @property
    def loss_percent(self) -> float:
        return 100.0 * (self.sent - self.received) / self.sent if self.sent else 100.0


def percentile(values: tuple[float, ...], q: float) -> float:
    """Nearest-rank percentile: always one of the measured values."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def parse(stdout: str) -> PingMeasurement:
    main, _, mtu_part = stdout.partition(_MTU_MARK)
    windows = None
    summary = _SUMMARY.search(main) or _SUMMARY_ANY.search(main) or (windows := _SUMMARY_WINDOWS.search(main))
    if summary is None:
        raise ParseError("no 'packets transmitted' summary line (ping missing or killed?)")
    sent, received = int(summary.group(1)), int(summary.group(2))
    rtts = tuple(float(x) for x in _RTT.findall(main))
    if not rtts:
        rtts = tuple(float(x.replace(",", ".")) for x in _RTT_ANY.findall(main))
    if windows is not None:
        received = min(received, len(rtts))  # ICMP errors are counted as Received there
    if not rtts and received and (agg := _RTT_SUMMARY.search(main)):
        # `ping -q` prints no per-reply lines, only the summary: min/avg/max stand in for the
        # samples, so p50 reads the average and p99 the maximum (never better than measured)
        rtts = (float(agg.group(1)), float(agg.group(2)), float(agg.group(3)))
    if received > sent or len(rtts) < min(received, 1):
        raise ParseError(f"inconsistent ping output: {sent} sent, {received} received, {len(rtts)} RTT lines")
    mtu_ok: bool | None = None
    if _MTU_MARK in stdout:
        m = _SUMMARY.search(mtu_part) or _SUMMARY_ANY.search(mtu_part)
        mtu_ok = bool(m and int(m.group(2)) > 0)
    return PingMeasurement(sent, received, rtts, mtu_ok)


def evaluate(a: str, b: str, m: PingMeasurement, p99_limit_ms: float | None, mtu: int | None) -> list[CheckResult]:
    target = (pair_label(a, b),)
    out: list[CheckResult] = []
    if m.received == 0:
        out.append(CheckResult(NAME, Level.ERROR, target, {"loss_percent": 100.0}, None, f"{a} got no reply from {b}"))
    else:
        p50, p99 = percentile(m.rtts_ms, 50), percentile(m.rtts_ms, 99)
        observed = {"p50_ms": p50, "p99_ms": p99, "loss_percent": round(m.loss_percent, 1), "samples": len(m.rtts_ms)}
        warn_loss = figure("ping_loss_warn_percent").value
        if p99_limit_ms is not None and p99 > p99_limit_ms:
            out.append(
                CheckResult(NAME, Level.ERROR, target, observed, f"p99 <= {p99_limit_ms:g} ms", "p99 RTT too high")
            )
        elif m.loss_percent > warn_loss:
            out.append(CheckResult(NAME, Level.WARNING, target, observed, "no loss", f"{m.loss_percent:.0f}% loss"))
        else:
            level = Level.PASS if p99_limit_ms is not None else Level.INFO
            exp = f"p99 <= {p99_limit_ms:g} ms" if p99_limit_ms is not None else None
            out.append(CheckResult(NAME, level, target, observed, exp, f"p50 {p50:g} ms, p99 {p99:g} ms"))
    if mtu is not None:
        if m.mtu_ok is None:
            out.append(CheckResult(MTU_NAME, Level.UNKNOWN, target, None, mtu, "path MTU probe did not run"))
        elif m.mtu_ok:
            out.append(CheckResult(MTU_NAME, Level.PASS, target, mtu, mtu, f"{mtu}-byte packets pass unfragmented"))
        else:
            out.append(
                CheckResult(MTU_NAME, Level.ERROR, target, f"< {mtu}", mtu, f"{mtu}-byte packets with DF do not pass")
            )
    return out
