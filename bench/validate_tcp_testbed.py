"""Two test-bed measurements behind issue 12 items 3 and 5 (netns test hosts; needs root).

1. `--bidir` against one direction at a time: 6 hosts, every link tbf RATE mbit, the network
   stage with 4 flows per pair, each mode REPS times; prints each pair's slower direction.
2. What a real SSH connection costs the controller: SshTransport to N test hosts (each its own
   sshd), RSS and live threads before and after connecting to all of them and running two
   commands on each.
Usage: sudo .venv/bin/python -m bench.validate_tcp_testbed [--rate 200] [--reps 2] [--hosts 16,48]
Prints markdown tables. Not a test: figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from gpuforge.validate.checks import Expectations
from gpuforge.validate.inventory import Inventory
from gpuforge.validate.network.iperf import IperfSettings
from gpuforge.validate.network.ping import PingSettings
from gpuforge.validate.runner import Runner
from gpuforge.validate.ssh import SshTransport
from gpuforge.validate.stagehost import RunOptions
from gpuforge.validate.transport import Job, Timeouts, run_many
from tests.validate.testbed import Testbed, missing_requirements


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def directions(rate: float, reps: int) -> list[tuple[str, list[float], float]]:
    rows = []
    tb = Testbed(6).up()
    try:
        tb.shape_all(rate)
        inv = Inventory.model_validate(tb.inventory())
        expect = Expectations(link_gbps=rate / 1000, sources={"link_gbps": f"tbf {rate:g}mbit"})
        for _ in range(reps):
            for bidir in (True, False):
                transport = SshTransport(inv.ssh, Timeouts(3, 3, 3, 3))
                st = IperfSettings(duration_s=2, omit_s=0.5, bidir=bidir, streams=4 if bidir else None)
                opts = RunOptions(iperf=st, ping=PingSettings(count=3), retests=0)
                try:
                    res = Runner(inv, transport, [], lambda n: expect, options=opts).run()
                finally:
                    transport.close()
                worst = sorted(
                    min(v for k, v in r.observed.items() if k.endswith("_gbps"))
                    for r in res.report.results
                    if r.check == "network.iperf3" and isinstance(r.observed, dict)
                )
                rows.append(("-P 4 --bidir" if bidir else "one direction at a time", worst, rate / 1000))
    finally:
        tb.down()
    return rows


def ssh_cost(n: int) -> tuple[int, int, float, float, int, int, float]:
    tb = Testbed(n).up()
    try:
        inv = Inventory.model_validate(tb.inventory())
        transport = SshTransport(inv.ssh, Timeouts(5, 5, 5, 5))
        try:
            run_many(transport, [Job(inv.nodes[0], "true", 10)], 1)  # imports and crypto warmed up
            rss0, th0 = _rss_mib(), threading.active_count()
            start = time.monotonic()
            first = run_many(transport, [Job(node, "true", 10) for node in inv.nodes], 64)
            took = time.monotonic() - start
            run_many(transport, [Job(node, "uname -n; uname -r", 10) for node in inv.nodes], 64)
            rss1, th1 = _rss_mib(), threading.active_count()
        finally:
            transport.close()
        return n, sum(r.ok for r in first), rss0, rss1, th0, th1, took
    finally:
        tb.down()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--hosts", default="16,48")
    args = ap.parse_args()
    why = missing_requirements()
    if why:
        print(f"error: cannot run the benchmark: {why}", file=sys.stderr)
        return 2
    print(f"| mode | each pair's slower direction, Gbit/s (6 hosts, tbf {args.rate:g} mbit) | min / rate |")
    print("|---|---|---|")
    for mode, worst, rate in directions(args.rate, args.reps):
        print(f"| {mode} | {', '.join(f'{w:.4f}' for w in worst)} | {min(worst) / rate:.2f} |", flush=True)
    print()
    print("| hosts | connected | RSS MiB before -> after | KiB per connection | threads before -> after | connect all s |")
    print("|---|---|---|---|---|---|")
    for n in (int(x) for x in args.hosts.split(",")):
        _, ok, r0, r1, t0, t1, took = ssh_cost(n)
        per = (r1 - r0) * 1024 / max(n - 1, 1)
        print(f"| {n} | {ok} | {r0:.0f} -> {r1:.0f} | {per:.0f} | {t0} -> {t1} | {took:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
