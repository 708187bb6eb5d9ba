"""A starved controller fails no healthy node (issue 20).

`gpuforge validate` runs as its own process against real sshd on loopback (loopbed.py), at the
--workers values at both ends of what the CLI accepts and between. From outside, each controller
process alone is stopped (SIGSTOP) as it starts on its nodes, again the moment its first check
result is out (its other nodes in flight), and otherwise for STOP_S in every STOP_S + RUN_S,
until it finishes; the nodes' daemons run freely and answer in milliseconds. Every node is
healthy, so any failed node is the controller blaming a node for its own stall. Independent of
machine speed: the first stops come from the controller's own progress, not a clock, and the
test checks that nodes were still unfinished when the result-triggered one came.

STOP_S is longer than the connect, banner and auth bounds (5 s each, the CLI's default): before
this change a handshake in flight when the controller was stopped timed out and the node was
reported unreachable or hung ("authentication timed out", "no SSH banner within the bound").
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.validate.loopbed import LoopBed, missing_requirements

pytestmark = [pytest.mark.slow]
NODES = 16
WORKERS = (1, 2, NODES, 32, 512)  # --workers is IntRange(1, 512): both ends, the default, N
STOP_S = 6.0
RUN_S = 0.3
LIMIT_S = 420.0


def test_a_starved_controller_fails_no_healthy_node(tmp_path: Path) -> None:
    why = missing_requirements()
    if why:
        pytest.skip(why)
    bed = LoopBed(NODES).up()
    procs: dict[int, subprocess.Popen[bytes]] = {}
    mid_run: dict[int, int] = {}  # --workers -> results out when the first stop came
    try:
        inv = tmp_path / "inv.json"
        inv.write_text(json.dumps(bed.inventory()))
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        for w in WORKERS:
            argv = [sys.executable, "-m", "gpuforge.cli", "validate", "--inventory", str(inv), "--checks", "system",
                    "--format", "json", "--workers", str(w), "--out", str(tmp_path / f"ev{w}")]  # fmt: skip
            with (tmp_path / f"out{w}").open("wb") as fo, (tmp_path / f"err{w}").open("wb") as fe:
                procs[w] = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env)
        starvers = [threading.Thread(target=_starve, args=(p, tmp_path / f"err{w}", mid_run, w), daemon=True)
                    for w, p in procs.items()]  # fmt: skip
        for t in starvers:
            t.start()
        for t in starvers:
            t.join(LIMIT_S + 30)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait(timeout=30)
        bed.down()
    for w, p in procs.items():
        err = (tmp_path / f"err{w}").read_text(errors="replace")
        report = json.loads((tmp_path / f"out{w}").read_text() or "{}")
        nodes = report.get("context", {}).get("nodes", {})
        failed = {n: s for n, s in nodes.items() if s["state"] != "ok"}
        assert p.returncode == 0 and len(nodes) == NODES and not failed, (w, failed, err[-600:])
        # stopped while nodes were still unfinished: the starvation hit the run itself
        assert mid_run.get(w, NODES) < NODES, (w, mid_run)
        [lag] = [r for r in report["results"] if r["check"] == "controller.lag"]
        assert lag["level"] == "warning" and lag["observed"]["max_stall_s"] >= STOP_S * 0.8, lag


_RESULT = re.compile(rb"^validate (?!connect )[^\n]* \d+/\d+: ", re.MULTILINE)  # a check's progress line


def _results(err: Path) -> int:
    """Check results the controller has printed (plain progress: stderr is a file here)."""
    return len(_RESULT.findall(err.read_bytes()))


def _starve(p: subprocess.Popen[bytes], err: Path, mid_run: dict[int, int], w: int) -> None:
    """Stop `p` the moment it starts on its nodes (its first progress line: connections about to
    open), again the moment its first check result is out (other nodes in flight), and otherwise
    for STOP_S in every STOP_S + RUN_S, until it ends (bounded by LIMIT_S)."""
    deadline = time.monotonic() + LIMIT_S
    while p.poll() is None and b"validate " not in err.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.002)
    while p.poll() is None and time.monotonic() < deadline:
        os.kill(p.pid, signal.SIGSTOP)
        if w not in mid_run and _results(err):
            mid_run[w] = _results(err)  # the stop that came with the first result
        try:
            time.sleep(STOP_S)
        finally:
            os.kill(p.pid, signal.SIGCONT)
        until = time.monotonic() + RUN_S
        while time.monotonic() < until and p.poll() is None:
            if w not in mid_run and _results(err):
                break  # stop now: its first result is out
            time.sleep(0.002)
