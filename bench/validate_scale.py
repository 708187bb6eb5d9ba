"""Benchmark of the validate stage on real test hosts (netns test bed; needs root).

For N in 1, 4, 16, 32 nodes, every link shaped with tbf so the CPU is not the bottleneck:
- wall time of a validation with the tier-0 system checks and the network checks (ring schedule);
- the same fan-out of one command (`hostname`) through our paramiko pool and through
  ClusterShell's `clush` (OpenSSH), both with strict host-key checking, median of 3;
- with one node shaped to half rate: the number of network rounds until it is named.
Prints a markdown table. Usage: sudo .venv/bin/python -m bench.validate_scale [--sizes 1,4,16,32]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpuforge.validate.checks import Expectations
from gpuforge.validate.inventory import Inventory
from gpuforge.validate.network.iperf import IperfSettings
from gpuforge.validate.network.ping import PingSettings
from gpuforge.validate.runner import Runner, RunResult
from gpuforge.validate.ssh import SshTransport
from gpuforge.validate.stagehost import RunOptions
from gpuforge.validate.system import system_checks
from gpuforge.validate.transport import Job, Timeouts, run_many
from tests.validate.testbed import Testbed, missing_requirements

RATE_MBIT = 50  # 16 bidirectional pairs x 2 x 50 Mbit = 1.6 Gbit/s: well inside what 2 cores push
REPS = 3


def _validate(tb: Testbed) -> tuple[float, RunResult]:
    inv = Inventory.model_validate(tb.inventory())
    transport = SshTransport(inv.ssh, Timeouts(3, 3, 3, 3))
    expect = Expectations(link_gbps=RATE_MBIT / 1000, sources={"link_gbps": f"tbf {RATE_MBIT}mbit"})
    opts = RunOptions(iperf=IperfSettings(duration_s=2, omit_s=0.5), ping=PingSettings(count=5), max_workers=64)
    start = time.monotonic()
    try:
        res = Runner(inv, transport, system_checks(True), lambda n: expect, options=opts).run()
    finally:
        transport.close()
    return time.monotonic() - start, res


def _fanout_paramiko(tb: Testbed) -> float:
    inv = Inventory.model_validate(tb.inventory())
    times = []
    for _ in range(REPS):
        transport = SshTransport(inv.ssh, Timeouts(5, 5, 5, 5))  # fresh: connection setup is counted
        start = time.monotonic()
        out = run_many(transport, [Job(n, "hostname", 10) for n in inv.nodes], max_workers=64)
        times.append(time.monotonic() - start)
        transport.close()
        assert all(r.ok for r in out), [r.detail for r in out if not r.ok]
    return statistics.median(times)


def _fanout_clush(tb: Testbed, kex: str | None) -> float | None:
    clush = shutil.which("clush") or str(Path(sys.executable).with_name("clush"))
    if not Path(clush).exists():
        return None
    cfg = tb.root / "ssh_config"
    cfg.write_text(
        f"Host *\n  User root\n  IdentityFile {tb.key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {tb.known_hosts}\n"
        "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 5\n"
    )
    opts = f"-F {cfg}" + (f" -o KexAlgorithms={kex}" if kex else "")
    hosts = ",".join(h.ip for h in tb.hosts)
    times = []
    for _ in range(REPS):
        start = time.monotonic()
        p = subprocess.run([clush, "-q", "-b", "-f", "64", "-o", opts, "-w", hosts, "hostname"],
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        times.append(time.monotonic() - start)
        assert p.returncode == 0, p.stderr[-300:]
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,4,16,32")
    args = ap.parse_args()
    why = missing_requirements()
    if why:
        print(f"error: cannot run the benchmark: {why}", file=sys.stderr)
        return 2
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        tb = Testbed(n).up()
        try:
            tb.shape_all(RATE_MBIT)
            wall, res = _validate(tb)
            healthy = res.verdict.kind if res.verdict else "-"
            para = _fanout_paramiko(tb)
            clush = _fanout_clush(tb, None)
            clush_c = _fanout_clush(tb, "curve25519-sha256")
            named, rounds = "-", "-"
            if n >= 3:
                slow = n // 2 + 1
                tb.shape(slow, RATE_MBIT / 2)
                _, sres = _validate(tb)
                v = sres.verdict
                named = "yes" if v is not None and v.slow_nodes == [f"node{slow}"] else f"no ({v and v.kind})"
                rounds = str(len(sres.rounds))
            rows.append((n, wall, len(res.rounds), healthy, para, clush, clush_c, rounds, named))
        finally:
            tb.down()
    print("| nodes | validate wall s (system + network) | rounds | verdict | fan-out paramiko s | clush s "
          "(default kex) | clush s (curve25519) | rounds to name a half-rate node | named |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for n, wall, rnds, healthy, para, clush, clush_c, rounds, named in rows:
        c1 = f"{clush:.2f}" if clush is not None else "n/a"
        c2 = f"{clush_c:.2f}" if clush_c is not None else "n/a"
        print(f"| {n} | {wall:.2f} | {rnds} | {healthy} | {para:.2f} | {c1} | {c2} | {rounds} | {named} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
