"""Scale benchmark of validate's orchestrator: 64 to 1,024 nodes from one controller, no hosts.

Issue 12 item 5. A replay transport stands in for SSH: every command is answered with real
captured output after a simulated latency, so what is measured is the orchestrator (runner,
network stage, thread pools, evidence of results), not the network.
- Answers: each distinct tier-0 command is run once, for real, on this machine with
  tests/validate/replay first on PATH (GPU tools replay real captures, scenario h100-590: one H100, driver 590;
  fixtures/SOURCES.md), and that output is replayed for every node; `iperf3 --version`,
  ping and iperf3 answer with the test bed captures in tests/validate/netfix (SOURCES.md).
- Latency (simulated, in real time): the first command on a node pays CONNECT_S for the SSH
  connection; every command pays RTT_S; ping takes count x interval; an iperf3 client takes
  runs x (duration + omit), i.e. RUN_S (5 s by default) per iperf3 run, two runs per pair
  (forward, then reverse).
- Connections: one idle thread per opened connection stands for paramiko's reader thread
  (paramiko.Transport subclasses threading.Thread: one per connection), so the thread count is
  what SshTransport would have; its memory per connection is not modelled.
Measured: wall time per stage, peak RSS (ru_maxrss), peak live threads, connections opened,
peak concurrent sessions. `--old` runs a round's pairs at most `--workers` at a time and one
`--bidir` run per pair, as before (max_pairs_at_once = workers), for comparison.

Usage: .venv/bin/python -m bench.validate_replay_scale [--sizes 64,128,256,512,1024] [--old]
Prints a markdown table. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuforge.validate import thresholds
from gpuforge.validate.checks import Expectations, NodeCheck
from gpuforge.validate.inventory import Inventory, Node
from gpuforge.validate.network.iperf import IperfSettings
from gpuforge.validate.network.ping import PingSettings
from gpuforge.validate.registry import node_checks
from gpuforge.validate.runner import Runner
from gpuforge.validate.stagehost import RunOptions
from gpuforge.validate.system import system_checks
from gpuforge.validate.transport import CommandResult, Job, Outcome

ROOT = Path(__file__).resolve().parents[1]
NETFIX = ROOT / "tests" / "validate" / "netfix"
REPLAY = ROOT / "tests" / "validate" / "replay"
CONNECT_S = 0.25  # TCP + SSH banner, kex and auth to a node in the same region
RTT_S = 0.002  # one exec round trip on an open connection
VERSION_39 = "iperf 3.9 (cJSON 1.7.13)\n"  # Ubuntu 22.04's iperf3 (esnet/iperf discussion #1665)


@dataclass
class Stats:
    connections: int = 0
    sessions: int = 0
    peak_sessions: int = 0
    peak_threads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ReplayTransport:
    """Labelled replay: real captured answers, simulated latency (module docstring)."""

    kind = "replay"

    def __init__(self, answers: dict[str, str], run_s: float, ping_s: float) -> None:
        self.answers, self.run_s, self.ping_s = answers, run_s, ping_s
        self.stats = Stats()
        self._open: set[str] = set()
        self._closing = threading.Event()
        self._conn_threads: list[threading.Thread] = []
        self.ping = (NETFIX / "ping_testbed.txt").read_text()
        self.iperf = (NETFIX / "iperf3_3.12_seq_2proc_testbed.txt").read_text()

    def _connect(self, node: str) -> None:
        with self.stats.lock:
            if node in self._open:
                return
            self._open.add(node)
            self.stats.connections += 1
        time.sleep(CONNECT_S)
        t = threading.Thread(target=self._closing.wait, name=f"conn-{node}", daemon=True)
        t.start()
        self._conn_threads.append(t)

    def run(self, node: Node, command: str, timeout_s: float) -> CommandResult:
        self._connect(node.name)
        with self.stats.lock:
            self.stats.sessions += 1
            self.stats.peak_sessions = max(self.stats.peak_sessions, self.stats.sessions)
            self.stats.peak_threads = max(self.stats.peak_threads, threading.active_count())
        try:
            out, took = self._answer(command)
            time.sleep(RTT_S + took)
            return CommandResult(node.name, command, Outcome.OK, 0, out, "", RTT_S + took)
        finally:
            with self.stats.lock:
                self.stats.sessions -= 1

    def run_batch(self, node: Node, jobs: Sequence[Job],
                  on_result: Callable[[Job, CommandResult], None] | None = None) -> list[CommandResult]:  # fmt: skip
        """A node's checks in one session, as SshTransport runs them: connect once, then each
        command's round trip in turn, each result handed back as it completes."""
        out = []
        for job in jobs:
            res = self.run(node, job.command, job.timeout_s)
            out.append(res)
            if on_result is not None:
                on_result(job, res)
        return out

    def _answer(self, command: str) -> tuple[str, float]:
        if "iperf3 --version" in command:
            return VERSION_39, 0.0
        if command.startswith("ping "):
            return self.ping, self.ping_s
        if "iperf3 -c" in command:
            runs = 1 if "--bidir" in command else 2
            return self.iperf, runs * self.run_s
        if "iperf3 -s" in command:
            return "", 0.1
        if command == "true":
            return "", 0.0
        return self.answers.get(command, ""), 0.01

    def close(self) -> None:
        self._closing.set()


def tier0_checks() -> list[NodeCheck[object]]:
    checks: list[NodeCheck[object]] = [*system_checks(True), *(c for c in node_checks() if c.tier == 0)]
    return checks


def capture_answers(checks: list[NodeCheck[object]]) -> dict[str, str]:
    """Each check's command run once here (replayed GPU tools first on PATH), its output kept."""
    env = {**os.environ, "PATH": f"{REPLAY}:{os.environ.get('PATH', '')}", "LC_ALL": "C",
           "GPUFORGE_REPLAY_SCENARIO": "h100-590"}  # fmt: skip
    out = {}
    for c in checks:
        p = subprocess.run(["sh", "-c", c.command()], capture_output=True, text=True, timeout=30, env=env, check=False)
        out[c.command()] = p.stdout
    return out


def one(n: int, answers: dict[str, str], checks: list[NodeCheck[object]], args: argparse.Namespace) -> dict[str, object]:
    nodes = [{"name": f"n{i:04d}", "host": f"10.{i // 250}.{i % 250}.1", "instance_type": "p5.4xlarge"}
             for i in range(n)]  # fmt: skip
    inv = Inventory.model_validate({"nodes": nodes})
    # the replayed iperf3 capture is a 100 mbit test bed link: judge it against that, stated
    # one H100 (p5.4xlarge), as the replayed captures show; the h100-590 scenario has no fi_info capture
    expect = thresholds.build_expectations(None, "p5.4xlarge", {"link_gbps": 0.1, "efa_interfaces": 0})
    # --old: as before this change, one --bidir run of 4 streams per pair
    iperf = IperfSettings(duration_s=args.run_s - 1.0, omit_s=1.0, bidir=args.old, streams=4 if args.old else None)
    ping = PingSettings()
    transport = ReplayTransport(answers, args.run_s, ping.count * ping.interval_s)
    opts = RunOptions(
        iperf=iperf, ping=ping, max_workers=args.workers,
        max_pairs_at_once=args.workers if args.old else 1024,
    )  # fmt: skip
    stages: dict[str, float] = {}

    class Clock:
        def __init__(self) -> None:
            self.name, self.t = "", time.monotonic()

        def stage(self, name: str, total: int) -> None:
            now = time.monotonic()
            if self.name:
                key = "network" if self.name.startswith(("round", "network")) else self.name.split(":")[0]
                stages[key] = stages.get(key, 0.0) + now - self.t
            self.name, self.t = name, now
            transport.stats.peak_threads = max(transport.stats.peak_threads, threading.active_count())

        def advance(self, note: str = "") -> None:
            return None

    clock = Clock()
    start = time.monotonic()

    def expect_of(node: Node) -> Expectations:
        return expect

    res = Runner(inv, transport, checks, expect_of, options=opts, progress=clock).run()
    clock.stage("", 0)
    wall = time.monotonic() - start
    transport.close()
    v = res.verdict
    return {
        "nodes": n,
        "wall": wall,
        "connect+tier0": stages.get("node checks", 0.0),  # connect and every tier: one pipeline per node
        "network": stages.get("network", 0.0),
        "rounds": len(res.rounds),
        "verdict": v.kind if v else "-",
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": transport.stats.peak_threads,
        "connections": transport.stats.connections,
        "sessions": transport.stats.peak_sessions,
        "failed": sorted(name for name, s in res.states.items() if s.state != "ok")[:3],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,128,256,512,1024")
    ap.add_argument("--workers", type=int, default=32)
    ap.add_argument("--run-s", type=float, default=5.0, help="simulated seconds per iperf3 run")
    ap.add_argument("--old", action="store_true", help="as before: pairs at most --workers at a time, one --bidir run")
    args = ap.parse_args()
    checks = tier0_checks()
    answers = capture_answers(checks)
    print(f"tier-0 checks: {', '.join(c.name for c in checks)}; {args.run_s:g} s per iperf3 run, "
          f"workers {args.workers}, pairs per round {'<= workers (old)' if args.old else 'all at once'}")  # fmt: skip
    print("| nodes | wall s | node checks (connect + tiers) s | network s | rounds | verdict | peak RSS MiB | peak threads | "
          "SSH connections | peak sessions |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.sizes.split(",")):
        r = one(n, answers, checks, args)
        cells = (f"{r['wall']:.1f}", f"{r['connect+tier0']:.1f}", f"{r['network']:.1f}", r["rounds"], r["verdict"],
                 f"{r['rss_mib']:.0f}", r["threads"], r["connections"], r["sessions"])  # fmt: skip
        print(f"| {r['nodes']} | " + " | ".join(map(str, cells)) + " |", flush=True)
        if r["failed"]:
            print(f"  (nodes out of the run, e.g. {r['failed']})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
