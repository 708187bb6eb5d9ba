"""A starved controller fails no healthy node (issue 20).

`gpuforge validate` runs as its own process against real sshd on loopback (loopbed.py), at the
--workers values at both ends of what the CLI accepts and between. From outside, the controller
processes alone are stopped (SIGSTOP) for STOP_S at a time and let run for RUN_S in between,
until they finish, while the nodes' daemons run freely and answer in milliseconds. Every node is
healthy, so any failed node is the controller blaming a node for its own stall. Independent of
machine speed: a slower machine only means more stop cycles; the verdict may not change.

STOP_S is longer than the connect, banner and auth bounds (5 s each, the CLI's default): before
this change a handshake in flight when the controller was stopped timed out and the node was
reported unreachable or hung ("no SSH banner within the bound").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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
    try:
        inv = tmp_path / "inv.json"
        inv.write_text(json.dumps(bed.inventory()))
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        for w in WORKERS:
            argv = [sys.executable, "-m", "gpuforge.cli", "validate", "--inventory", str(inv), "--checks", "system",
                    "--format", "json", "--workers", str(w), "--out", str(tmp_path / f"ev{w}")]  # fmt: skip
            with (tmp_path / f"out{w}").open("wb") as fo, (tmp_path / f"err{w}").open("wb") as fe:
                procs[w] = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env)
        _until_started(tmp_path, procs)
        cycles = _starve(procs)
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
        [lag] = [r for r in report["results"] if r["check"] == "controller.lag"]
        assert lag["level"] == "warning" and lag["observed"]["max_stall_s"] >= STOP_S * 0.8, lag
    assert cycles >= 2  # the controllers really were starved, more than once


def _until_started(tmp: Path, procs: dict[int, subprocess.Popen[bytes]]) -> None:
    """Past Python's start-up: each controller has printed its first progress line."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if all(b"validate " in (tmp / f"err{w}").read_bytes() or p.poll() is not None for w, p in procs.items()):
            return
        time.sleep(0.05)
    raise AssertionError("the controllers did not start within 120 s")


def _starve(procs: dict[int, subprocess.Popen[bytes]]) -> int:
    """Stop and resume the controllers (only them) until they end; how many stops it took."""
    deadline, cycles = time.monotonic() + LIMIT_S, 0
    while time.monotonic() < deadline:
        running = [p for p in procs.values() if p.poll() is None]
        if not running:
            return cycles
        for p in running:
            os.kill(p.pid, signal.SIGSTOP)
        cycles += 1
        try:
            time.sleep(STOP_S)
        finally:
            for p in running:
                os.kill(p.pid, signal.SIGCONT)
        time.sleep(RUN_S)
    raise AssertionError(f"the controllers did not finish within {LIMIT_S:g} s of starvation")
