"""gpuforge validate against pdsh and ClusterShell on N real sshd (tests/validate/loopbed.py).

One defined workload: `gpuforge validate --checks system` (system.identity, over SSH, strict host
keys, evidence written), and for the anchors the very command gpuforge runs on each node,
`env LC_ALL=C timeout -k 2 10 sh -c 'uname -n; uname -r'`, with the same key, known_hosts and
strict checking (an OpenSSH client config). Fan-out 32 for all three (gpuforge's --workers
default; pdsh -f 32; clush -f 32). Every tool runs under `ulimit -n 1024` (the stock limit).

Per run: wall time; time to the first node's result (gpuforge: its first check-result progress
line, not a connect line; the anchors: their first output line); peak RSS, threads and open
descriptors of the tool's whole process tree (pdsh and clush run one `ssh` per node; sampled
every 50 ms from /proc). Three rounds, the tools' order rotated each round; the machine is shared
with other work, so only ratios within a round are compared, and the table gives the median of
the per-round ratios. Needs root (sshd), pdsh (Debian: apt-get install pdsh) and clush (a
dependency). Usage: sudo .venv/bin/python -m bench.validate_ssh_scale [--sizes 16,64,256,1024]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpuforge.validate.system import IdentityCheck
from gpuforge.validate.transport import wrap
from tests.validate.loopbed import LoopBed, missing_requirements

FANOUT = 32
NOFILE = 1024
TOOLS = ("gpuforge", "pdsh", "clush")


@dataclass
class Run:
    wall: float
    first: float
    rss_mib: float
    threads: int
    fds: int
    ok: bool
    why: str = ""


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
        except OSError:
            pass
    return out


def _sample(pid: int) -> tuple[float, int, int]:
    rss, threads, fds = 0.0, 0, 0
    for p in _tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) / 1024
            elif line.startswith("Threads:"):
                threads += int(line.split()[1])
    return rss, threads, fds


def _measure(argv: list[str], env: dict[str, str], first_on: str, marker: str) -> tuple[Run, str, str]:
    """Run argv; the first line on stream `first_on` containing `marker` is its first result."""
    start = time.monotonic()
    limited = ["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--", *argv]  # `ulimit -n`, then exec: same pid
    p = subprocess.Popen(limited, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    first: list[float] = []
    chunks: dict[str, list[bytes]] = {"out": [], "err": []}

    def read(name: str, stream: object) -> None:
        for line in iter(stream.readline, b""):  # type: ignore[attr-defined]
            if name == first_on and not first and marker.encode() in line:
                first.append(time.monotonic() - start)
            chunks[name].append(line)

    readers = [threading.Thread(target=read, args=(n, s), daemon=True) for n, s in (("out", p.stdout), ("err", p.stderr))]
    for r in readers:
        r.start()
    peak = (0.0, 0, 0)
    while p.poll() is None:
        s = _sample(p.pid)
        peak = (max(peak[0], s[0]), max(peak[1], s[1]), max(peak[2], s[2]))
        time.sleep(0.05)
        if time.monotonic() - start > 1800:
            p.kill()
    wall = time.monotonic() - start
    for r in readers:
        r.join(30)
    out, err = b"".join(chunks["out"]).decode(errors="replace"), b"".join(chunks["err"]).decode(errors="replace")
    run = Run(wall, first[0] if first else float("nan"), peak[0], peak[1], peak[2], p.returncode == 0)
    return run, out, err


def _gpuforge(bed: LoopBed, work: Path, env: dict[str, str]) -> Run:
    inv = work / "inv.json"
    inv.write_text(json.dumps(bed.inventory()))
    argv = [sys.executable, "-m", "gpuforge.cli", "validate", "--inventory", str(inv), "--checks", "system",
            "--format", "json", "--workers", str(FANOUT), "--out", str(work / f"ev{time.monotonic_ns()}")]  # fmt: skip
    run, out, err = _measure(argv, env, "err", "system.identity:")
    try:
        nodes = json.loads(out)["context"]["nodes"]
        bad = [n for n, s in nodes.items() if s["state"] != "ok"]
    except (ValueError, KeyError):
        bad = ["(no report)"]
    if bad or len(nodes) != bed.n:
        run.ok, run.why = False, f"{len(bad)} node(s) not ok, e.g. {bad[:3]}: {err[-300:]}"
    return run


def _anchor(tool: str, bed: LoopBed, env: dict[str, str]) -> Run:
    command = wrap(IdentityCheck().command(), IdentityCheck.timeout_s)
    cfg = bed.ssh_config()
    hosts = ",".join(bed.ip(i) for i in range(1, bed.n + 1))
    if tool == "pdsh":
        env = {**env, "PDSH_RCMD_TYPE": "ssh", "PDSH_SSH_ARGS": f"-F {cfg} -x -l%u %h"}
        argv = ["pdsh", "-R", "ssh", "-f", str(FANOUT), "-w", hosts, command]
    else:
        clush = shutil.which("clush") or str(Path(sys.executable).with_name("clush"))
        argv = [clush, "-f", str(FANOUT), "-o", f"-F {cfg}", "-w", hosts, command]
    run, out, err = _measure(argv, env, "out", ": ")
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if not run.ok or len(lines) != 2 * bed.n:
        run.ok, run.why = False, f"{len(lines)} lines for {bed.n} nodes: {err[-300:]}"
    return run


def _round(bed: LoopBed, work: Path, order: list[str]) -> dict[str, Run]:
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    return {tool: _gpuforge(bed, work, env) if tool == "gpuforge" else _anchor(tool, bed, env) for tool in order}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,64,256,1024")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tools", default=",".join(TOOLS), help="a subset of gpuforge,pdsh,clush (gpuforge always runs)")
    args = ap.parse_args()
    tools = ("gpuforge", *(t for t in args.tools.split(",") if t in TOOLS and t != "gpuforge"))
    why = missing_requirements() or (None if shutil.which("pdsh") else "pdsh is not installed (apt-get install pdsh)")
    if why:
        print(f"error: cannot run the benchmark: {why}", file=sys.stderr)
        return 2
    print(f"fan-out {FANOUT}, ulimit -n {NOFILE}, {args.rounds} rounds in rotated order; ratios are gpuforge / anchor "
          "within a round, median over rounds", flush=True)  # fmt: skip
    print("| N | tool | wall s (median) | first result s | peak RSS MiB | threads | fds | "
          "wall ratio gpuforge/tool | first-result ratio | first-result gap s | all ok |", flush=True)
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for n in (int(x) for x in args.sizes.split(",")):
        bed = LoopBed(n).up()
        work = Path(tempfile.mkdtemp(prefix="gf-scale-"))
        try:
            m = len(tools)
            rounds = [_round(bed, work, list(tools[r % m :] + tools[: r % m])) for r in range(args.rounds)]
        finally:
            bed.down()
            shutil.rmtree(work, ignore_errors=True)
        for tool in tools:
            runs = [r[tool] for r in rounds]
            med = statistics.median
            ratio = med(r["gpuforge"].wall / r[tool].wall for r in rounds)
            fratio = med(r["gpuforge"].first / r[tool].first for r in rounds)
            gap = med(r["gpuforge"].first - r[tool].first for r in rounds)
            ok = all(x.ok for x in runs)
            cells = [f"{med(x.wall for x in runs):.2f}", f"{med(x.first for x in runs):.2f}",
                     f"{max(x.rss_mib for x in runs):.0f}", str(max(x.threads for x in runs)),
                     str(max(x.fds for x in runs)), f"{ratio:.2f}", f"{fratio:.2f}", f"{gap:+.2f}",
                     "yes" if ok else "NO: " + next(x.why for x in runs if not x.ok)[:120]]  # fmt: skip
            print(f"| {n} | {tool} | " + " | ".join(cells) + " |", flush=True)
        for k, r in enumerate(rounds):
            print(f"  round {k + 1}: " + ", ".join(f"{t} {r[t].wall:.2f}/{r[t].first:.2f}" for t in tools), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
