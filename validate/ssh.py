"""validate's SSH transport: a bounded pool of paramiko connections, one session per batch.

paramiko runs one reader thread per live connection, so live connections are what costs
threads, memory and descriptors. At most `capacity` are open at once: a node's work takes a
lease (connecting when it has no live connection), and a connection no one leases stays open,
idle, until a node without one needs its place. Queueing for a place costs the node nothing:
no bound starts before its connection does. `capacity` is `max_connections`, lowered to what
the process's open-file limit (RLIMIT_NOFILE) leaves room for, and lowered again if the
limit is hit anyway (EMFILE): the node waits for a connection to close and tries again, so a
descriptor limit below the pool queues work and never fails it.

A node's checks run in one session (batch.py frames them, sshsession.py reads it); each check's
result is handed back as soon as its end mark arrives. Stock OpenSSH allows 10 sessions per
connection (MaxSessions, servconf.h DEFAULT_SESSIONS_MAX in openssh/openssh-portable 0ef0f5a839831c213f24e3f2ae434765c607fb50):
concurrent `run` calls on one node share its connection, at most `max_sessions` at once, and a
session the node still refuses ("no more sessions" in sshd's log) is retried within the
channel bound rather than reported as an unreachable node.

A check's time limit is enforced on the node (`timeout`, batch.py); sshsession.py's read loop
only backs it up, in the controller's own time (validate/lag.py).
"""

from __future__ import annotations

import logging
import os
import resource
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import paramiko

from gpuforge.common.errors import InputError
from gpuforge.validate import lag
from gpuforge.validate.batch import OnResult
from gpuforge.validate.inventory import Node, SshConfig
from gpuforge.validate.sshconnect import STALL_RETRIES, Connector, OutOfDescriptors
from gpuforge.validate.sshkeys import KnownHosts, agent_key_blobs, load_key
from gpuforge.validate.sshsession import report, session
from gpuforge.validate.transport import (
    OPENSSH_MAX_SESSIONS,
    SLOT_WAIT_S,
    CommandResult,
    Job,
    Outcome,
    Timeouts,
)

FDS_PER_CONNECTION = 2  # its socket, and an ssh-agent socket while it authenticates


def fd_capacity(wanted: int) -> int:
    """How many connections fit under this process's open-file limit, next to what is open now."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = 32
    reserve = min(64, soft // 4)  # evidence files, the agent, stdio, a subprocess's pipes
    return max(1, min(wanted, (soft - used - reserve) // FDS_PER_CONNECTION))


@dataclass
class _Conn:
    node: str
    tr: paramiko.Transport
    slots: threading.BoundedSemaphore
    users: int = 0

    def alive(self) -> bool:
        return self.tr.is_active()


@dataclass
class PoolStats:
    opened: int = 0
    peak_live: int = 0
    descriptor_waits: int = 0  # EMFILE/ENFILE met: the node waited for a connection to close
    stall_retries: int = 0  # connects tried again because the controller stalled during them
    capacity: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class SshTransport:
    kind = "ssh"

    def __init__(
        self,
        ssh: SshConfig,
        timeouts: Timeouts | None = None,
        accept_new: bool = False,
        *,
        max_connections: int = 32,
        max_sessions: int = OPENSSH_MAX_SESSIONS,
        ask_passphrase: bool | None = None,
    ) -> None:
        self.ssh = ssh
        self.timeouts = timeouts or Timeouts()
        self.max_sessions = max(1, max_sessions)
        agent_blobs = agent_key_blobs()
        tty = sys.stdin.isatty() if ask_passphrase is None else ask_passphrase
        pkey = load_key(ssh, agent_blobs, tty)
        known_hosts = ssh.known_hosts_path()
        if not known_hosts.is_file() and not accept_new:
            raise InputError(
                f"ssh.known_hosts: {known_hosts} does not exist, so no host key can be verified",
                "point ssh.known_hosts at a file with the nodes' keys, or pass --accept-new-host-keys "
                "to trust and record keys on first contact",
            )
        self.known = KnownHosts(known_hosts, accept_new)
        self.accepted_keys = self.known.accepted
        self.connector = Connector(self.timeouts, self.known, pkey, bool(agent_blobs))
        self.stats = PoolStats(capacity=fd_capacity(max(1, max_connections)))
        self._cv = threading.Condition()
        self._live: dict[str, _Conn] = {}
        self._idle: OrderedDict[str, None] = OrderedDict()  # live, unleased, oldest first
        self._connecting: set[str] = set()
        self._count = 0  # live + connecting
        self._failed: dict[str, CommandResult] = {}  # a node that could not be reached stays so
        self._jump: paramiko.Transport | None = None
        self._jump_failure: CommandResult | None = None
        self._jump_lock = threading.Lock()
        # paramiko logs a traceback from its transport thread for a failed banner even when the
        # caller handles the error; the outcome is reported by us, so keep stderr for progress.
        plog = logging.getLogger("paramiko")
        if not any(isinstance(h, logging.NullHandler) for h in plog.handlers):
            plog.addHandler(logging.NullHandler())
        plog.propagate = False

    @property
    def capacity(self) -> int:
        return self.stats.capacity

    def widen(self, wanted: int) -> None:
        """Room for `wanted` live connections, as far as the open-file limit allows: a round of
        pair tests measures its disjoint pairs at once, which needs a connection per pair job."""
        with self._cv:
            room = fd_capacity(wanted) + self._count  # fd_capacity counts the live sockets as used
            self.stats.capacity = max(self.stats.capacity, min(wanted, room))
            self._cv.notify_all()

    def port(self, node: Node) -> int:
        """The node's own `port` from the inventory, else `ssh.port`."""
        return node.port or self.ssh.port

    def user(self, node: Node) -> str:
        return node.user or self.ssh.user

    # -- the pool

    @contextmanager
    def hold(self, node: Node) -> Iterator[_Conn | CommandResult]:
        """A lease on the node's connection for the block (shared with other holders of it), or
        the reason there is none. Waiting for a place in the pool is not counted against the node."""
        got = self._acquire(node)
        try:
            yield got
        finally:
            if isinstance(got, _Conn):
                with self._cv:
                    got.users -= 1
                    if got.users == 0 and self._live.get(got.node) is got:
                        self._idle[got.node] = None
                    self._cv.notify_all()

    def _acquire(self, node: Node) -> _Conn | CommandResult:
        while True:
            victims: list[_Conn] = []
            with self._cv:
                while True:
                    if node.name in self._failed:
                        return self._failed[node.name]
                    c = self._live.get(node.name)
                    if c is not None and c.alive():
                        c.users += 1
                        self._idle.pop(node.name, None)
                        return c
                    if c is not None:  # died while idle (the node closed it): forget it
                        self._drop(c)
                        victims.append(c)
                    if node.name not in self._connecting:
                        if self._count < self.stats.capacity:
                            self._count += 1
                            break
                        if self._idle:  # the place of the connection idle longest
                            victims.append(self._live[self._idle.popitem(last=False)[0]])
                            self._drop(victims[-1])
                            self._count += 1
                            break
                    self._cv.wait(0.5)
                self._connecting.add(node.name)
            for v in victims:
                v.tr.close()
            got = self._connect(node)
            with self._cv:
                self._connecting.discard(node.name)
                if isinstance(got, _Conn):
                    got.users = 1
                    self._live[node.name] = got
                    with self.stats.lock:
                        self.stats.opened += 1
                        self.stats.peak_live = max(self.stats.peak_live, len(self._live))
                    self._cv.notify_all()
                    return got
                self._count -= 1
                if got is not None:
                    self._failed[node.name] = got
                    self._cv.notify_all()
                    return got
                # out of descriptors: fewer places from now on, and wait for one to free
                with self.stats.lock:
                    self.stats.descriptor_waits += 1
                    self.stats.capacity = max(1, self._count)
                self._cv.notify_all()
                self._cv.wait(0.2)

    def _drop(self, c: _Conn) -> None:
        """Forget a connection (caller holds the lock and closes it after releasing)."""
        self._live.pop(c.node, None)
        self._idle.pop(c.node, None)
        self._count -= 1

    def _connect(self, node: Node) -> _Conn | CommandResult | None:
        """The node's new connection; its failure; or None when this process ran out of descriptors."""
        host, port, clock = node.host, self.port(node), lag.monitor()
        for _ in range(STALL_RETRIES + 1):
            start = time.monotonic()
            try:
                sock = self._jump_sock(host, port) if self.ssh.jump_host is not None else None
                tr = self.connector.open(host, port, self.user(node), sock)
                return _Conn(node.name, tr, threading.BoundedSemaphore(self.max_sessions))
            except OutOfDescriptors:
                return None
            except _JumpFailed as jf:
                return _failure(node.name, jf.result.outcome, jf.result.detail, start)
            except Exception as exc:  # noqa: BLE001 - every connection failure becomes an Outcome
                failure = self.connector.classify(exc, host, port, self.ssh.jump_host is not None)
            took = time.monotonic() - start
            if failure.outcome is Outcome.TIMEOUT and clock.stalled(start) >= 0.25 * took:
                with self.stats.lock:  # the wait ran out while this controller was stalled: no evidence
                    self.stats.stall_retries += 1
                continue
            return _failure(node.name, failure.outcome, failure.detail, start)
        return _failure(node.name, failure.outcome, f"{failure.detail} (controller stalled on every try)", start)

    def _jump_sock(self, host: str, port: int) -> paramiko.Channel:
        tr = self._jump_transport()
        try:
            return tr.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=self.timeouts.connect)
        except paramiko.ChannelException as exc:  # the jump host could not reach the node
            raise ConnectionRefusedError(f"via jump host: {exc}") from None

    def _jump_transport(self) -> paramiko.Transport:
        """The one shared connection to the jump host; its host key is checked like a node's."""
        jump = self.ssh.jump_host
        assert jump is not None
        with self._jump_lock:
            if self._jump_failure is not None:
                raise _JumpFailed(self._jump_failure)
            if self._jump is None:
                try:
                    self._jump = self.connector.open(jump.host, jump.port, jump.user or self.ssh.user)
                except Exception as exc:  # noqa: BLE001 - classified; a jump failure fails every node behind it
                    f = self.connector.classify(exc, jump.host, jump.port, False)
                    self._jump_failure = CommandResult(
                        f"jump:{jump.host}", "", f.outcome, None, "", "", 0.0, f"jump host {jump.host}: {f.detail}", "connect"
                    )
                    raise _JumpFailed(self._jump_failure) from None
            tr = self._jump
        if not tr.is_active():
            raise ConnectionResetError("the connection to the jump host was lost")
        return tr

    def connect(self, node: Node) -> CommandResult | None:
        """Reach the node (or reuse its connection); the failure when it cannot be reached."""
        with self.hold(node) as got:
            return got if isinstance(got, CommandResult) else None

    # -- commands

    def run(self, node: Node, command: str, timeout_s: float) -> CommandResult:
        return self.run_batch(node, [Job(node, command, timeout_s)])[0]

    def run_batch(self, node: Node, jobs: Sequence[Job], on_result: OnResult | None = None) -> list[CommandResult]:
        """The jobs in one session on the node's connection, each result handed to on_result as it
        arrives; results in job order."""
        with self.hold(node) as got:
            if isinstance(got, CommandResult):
                took, why = got.duration_s, got.detail
                failed = [CommandResult(node.name, j.command, got.outcome, None, "", "", took, why, "connect") for j in jobs]
                return report(jobs, failed, on_result)
            if not got.slots.acquire(timeout=SLOT_WAIT_S):
                why = f"no free session on the connection within {SLOT_WAIT_S:g} s ({self.max_sessions} in use)"
                cut = [CommandResult(node.name, j.command, Outcome.TIMEOUT, None, "", "", 0.0, why, "channel") for j in jobs]
                return report(jobs, cut, on_result)
            try:
                return session(got.tr, node, jobs, on_result, self.timeouts.channel, self.max_sessions)
            finally:
                got.slots.release()

    def close(self) -> None:
        with self._cv:
            conns = list(self._live.values())
            self._live.clear()
            self._idle.clear()
            self._count = len(self._connecting)
        for c in conns:
            c.tr.close()
        with self._jump_lock:
            if self._jump is not None:
                self._jump.close()
                self._jump = None


class _JumpFailed(Exception):
    def __init__(self, result: CommandResult) -> None:
        super().__init__(result.detail)
        self.result = result


def _failure(node: str, outcome: Outcome, detail: str, start: float) -> CommandResult:
    return CommandResult(node, "", outcome, None, "", "", time.monotonic() - start, detail, "connect")
