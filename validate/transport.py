"""What every transport shares: outcomes, results, the node-side bound, the fan-out, `local`.

Transports: `local` (here), `ssh` (validate/ssh.py: a bounded pool of paramiko connections),
`slurm` (validate/slurm.py: srun). Each has `run(node, command, timeout_s)`; a node's checks go
through `batch.run_batch`, which gives them one session where the transport can stream
(SSH), and one framed script otherwise (validate/batch.py).

Bounds judge the node, not the controller. A command's limit is enforced where it runs: `wrap()`
puts it under `timeout`, whose exit status (124, or 137 after the kill) is the verdict. The
controller's own deadlines are backstops, measured in the controller's own time (validate/lag.py):
seconds this process was stopped or starved do not count, so a busy controller never fails a
node; queueing for a worker or a connection is not counted either, since no bound starts before
the command does.
"""


from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, TypeVar

from gpuforge.validate import lag
from gpuforge.validate.inventory import Node

# The remote `timeout` gets this long after TERM before KILL; the local deadline adds it plus
# one round trip's slack so the remote verdict (rc 124/137) normally arrives first.
KILL_AFTER_S = 2.0
LOCAL_SLACK_S = 2.0
TIMEOUT_RCS = (124, 137)
# OpenSSH's default MaxSessions (servconf.h DEFAULT_SESSIONS_MAX = 10, openssh-portable @0ef0f5a).
OPENSSH_MAX_SESSIONS = 10
# How long a command may wait for a free session slot on its node's connection: the slot frees
# when a running command ends, and each of those is bounded, so this only caps a pathological queue.
SLOT_WAIT_S = 900.0


class Outcome(str, Enum):
    OK = "ok"  # the command ran; its exit code says how it went
    UNREACHABLE = "unreachable"  # refused, no route, connection lost
    AUTH_FAILED = "auth_failed"
    TIMEOUT = "timeout"  # a bounded wait ran out: connect, banner, auth, channel or command
    HOST_KEY = "host_key_rejected"  # unknown or changed host key: never silently trusted


@dataclass(frozen=True)
class Timeouts:
    connect: float = 5.0
    banner: float = 5.0
    auth: float = 5.0
    channel: float = 5.0

    def connect_bound(self) -> float:
        """Worst case before a node's connection outcome is known (TCP, banner+kex, auth)."""
        return 2 * self.connect + self.banner + self.auth


@dataclass(frozen=True)
class CommandResult:
    node: str
    command: str
    outcome: Outcome
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    detail: str = ""
    # where it ended: connect | channel | connection (lost mid-command) | command. Only a
    # `command` result says anything about the check; the others say the node is out of reach.
    stage: str = "command"

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK and self.exit_code == 0


@dataclass(frozen=True)
class Job:
    node: Node
    command: str
    timeout_s: float
    tag: Any = None  # the caller's handle (check, pair) carried through unchanged


class Transport(Protocol):
    kind: str

    def run(self, node: Node, command: str, timeout_s: float) -> CommandResult: ...

    def close(self) -> None: ...


def wrap(command: str, timeout_s: float) -> str:
    """The command as the node runs it: under `timeout`, so nothing outlives its bound there.

    Under `LC_ALL=C` too: the parsers read the tools' English, C-locale output (ping's summary,
    decimal points), and a node's own locale must not change it. `env` rather than a `VAR=x`
    prefix because the remote login shell is not necessarily a Bourne shell.
    """
    return f"env LC_ALL=C timeout -k {KILL_AFTER_S:g} {max(timeout_s, 0.1):g} sh -c {shlex.quote(command)}"


T = TypeVar("T")
R = TypeVar("R")


def fan_out(items: Sequence[T], fn: Callable[[T], R], width: int, on_done: Callable[[T, R], None] | None = None) -> list[R]:
    """fn over items with at most `width` threads, whatever len(items) is; results in item order.

    The workers are daemon threads, not a ThreadPoolExecutor: the executor's shutdown and its
    exit hook join every running job, so Ctrl-C waited out each node's connect and command
    bounds (57 s seen; issue 13). Here an interrupt in the main thread stops handing out items
    and propagates at once; the caller closes the transport, and the process may exit while a
    worker still sits in a socket read. A worker's exception is raised in the caller.
    """
    if not items:
        return []
    results: list[Any] = [_UNSET] * len(items)
    failures: list[BaseException] = []
    pending = iter(range(len(items)))
    lock = threading.Lock()
    finished = threading.Condition(lock)
    stop = threading.Event()
    left = [len(items)]

    def worker() -> None:
        while not stop.is_set():
            with lock:
                i = next(pending, None)
            if i is None:
                return
            try:
                res = fn(items[i])
                if on_done is not None:
                    on_done(items[i], res)
                results[i] = res
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
                failures.append(exc)
                stop.set()
            with finished:
                left[0] -= 1
                finished.notify_all()

    for k in range(max(1, min(width, len(items)))):
        threading.Thread(target=worker, name=f"gf-worker-{k}", daemon=True).start()
    try:
        with finished:
            # A bounded wait in a loop: the main thread wakes to take a SIGINT promptly.
            while left[0] and not failures:
                finished.wait(0.2)
    except BaseException:
        stop.set()
        raise
    if failures:
        raise failures[0]
    return [r for r in results if r is not _UNSET]


_UNSET: Any = object()


def run_many(
    transport: Transport,
    jobs: Sequence[Job],
    max_workers: int,
    on_done: Callable[[Job, CommandResult], None] | None = None,
) -> list[CommandResult]:
    """Run jobs with at most `max_workers` at once; results in job order."""
    return fan_out(jobs, lambda j: transport.run(j.node, j.command, j.timeout_s), max_workers, on_done)


# ----------------------------------------------------------------------------- local


class LocalTransport:
    """Runs on this machine, for validating the node you are logged in to."""

    kind = "local"

    def run(self, node: Node, command: str, timeout_s: float) -> CommandResult:
        start = time.monotonic()
        try:
            rc, out, err, took = run_bounded(["sh", "-c", wrap(command, timeout_s)], timeout_s + KILL_AFTER_S + LOCAL_SLACK_S)
        except OSError as exc:  # no shell to run it in (sh not on PATH, no processes left): no evidence
            why = f"local: cannot start sh: {(exc.strerror or str(exc)).lower()}"
            return CommandResult(node.name, command, Outcome.UNREACHABLE, None, "", "", time.monotonic() - start, why, "connect")
        if rc is None or rc in TIMEOUT_RCS:
            return _timed_out(node.name, command, start, out, err)
        return CommandResult(node.name, command, Outcome.OK, rc, out, err, took)

    def close(self) -> None:
        return None


def run_bounded(
    argv: Sequence[str], deadline_s: float, env: dict[str, str] | None = None
) -> tuple[int | None, str, str, float]:
    """Run a local command with a deadline: (rc, or None past the deadline; stdout; stderr; seconds).
    A new session, so that the deadline kills the whole process group (whatever `sh`, srun or a
    launcher started), not just the first process. The deadline is in the controller's own time
    (lag.own_time): while this process is stopped or starved the command is not charged."""
    clock = lag.monitor()
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    while True:
        try:
            out, err = proc.communicate(timeout=max(0.05, deadline_s - clock.own_time(start)))
            return proc.returncode, _text(out), _text(err), time.monotonic() - start
        except subprocess.TimeoutExpired:
            if clock.own_time(start) < deadline_s:
                continue  # the wait ran out in wall time only: this process was stalled meanwhile
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return None, _text(out), _text(err), time.monotonic() - start


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _timed_out(node: str, command: str, start: float, out: str, err: str) -> CommandResult:
    took = time.monotonic() - start
    return CommandResult(
        node, command, Outcome.TIMEOUT, None, out, err, took, f"command ran past its bound ({took:.1f} s)"
    )


