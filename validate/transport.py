"""Run commands on nodes: paramiko over SSH, or subprocess on this machine (`local`).

Security by default: host keys are checked strictly against a known_hosts file; a new key is
accepted only with `accept_new=True`, and then written to that file and recorded. Key auth
only; agents and ~/.ssh keys are never consulted (no agent forwarding, no surprise identities).

Every wait is bounded (research/testbed-feasibility.md, timeout table): TCP connect and
banner+kex by `connect`, the banner by `banner`, auth by `auth`, the channel open by `channel`,
and the command by its own deadline, enforced twice: remotely by `timeout -k` around the
command, locally by a deadline on the read loop. A node that is unreachable, refuses auth, or
hangs is its own `Outcome`, and other nodes proceed in the thread pool meanwhile.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import select
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import paramiko

from common.errors import InputError
from common.results import atomic_write
from validate.inventory import Node, SshConfig

# The remote `timeout` gets this long after TERM before KILL; the local deadline adds it plus
# one round trip's slack so the remote verdict (rc 124/137) normally arrives first.
KILL_AFTER_S = 2.0
LOCAL_SLACK_S = 2.0
_TIMEOUT_RCS = (124, 137)


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


def run_many(
    transport: Transport,
    jobs: Sequence[Job],
    max_workers: int,
    on_done: Callable[[Job, CommandResult], None] | None = None,
) -> list[CommandResult]:
    """Run jobs with at most `max_workers` at once; results in job order."""
    if not jobs:
        return []

    def one(job: Job) -> CommandResult:
        res = transport.run(job.node, job.command, job.timeout_s)
        if on_done is not None:
            on_done(job, res)
        return res

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(jobs))), thread_name_prefix="gf-ssh") as pool:
        return list(pool.map(one, jobs))


# ----------------------------------------------------------------------------- local


class LocalTransport:
    """Runs on this machine, for validating the node you are logged in to."""

    kind = "local"

    def run(self, node: Node, command: str, timeout_s: float) -> CommandResult:
        start = time.monotonic()
        # A new session so that a deadline kills the whole process group, not just `sh`.
        proc = subprocess.Popen(
            ["sh", "-c", wrap(command, timeout_s)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s + KILL_AFTER_S + LOCAL_SLACK_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return _timed_out(node.name, command, start, out, err)
        if proc.returncode in _TIMEOUT_RCS:
            return _timed_out(node.name, command, start, out, err)
        return CommandResult(
            node.name, command, Outcome.OK, proc.returncode, _text(out), _text(err), time.monotonic() - start
        )

    def close(self) -> None:
        return None


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _timed_out(node: str, command: str, start: float, out: bytes, err: bytes) -> CommandResult:
    took = time.monotonic() - start
    return CommandResult(
        node, command, Outcome.TIMEOUT, None, _text(out), _text(err), took, f"command ran past its bound ({took:.1f} s)"
    )


# ----------------------------------------------------------------------------- ssh


class _RecordNewKey(paramiko.MissingHostKeyPolicy):
    """accept-new: trust a host seen for the first time, write its key, and record it.

    A *changed* key never reaches this policy: paramiko raises BadHostKeyException first.
    """

    def __init__(self, path: Path, lock: threading.Lock, recorded: list[dict[str, str]]) -> None:
        self.path, self.lock, self.recorded = path, lock, recorded

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
        with self.lock:
            old = self.path.read_text() if self.path.exists() else ""
            if old and not old.endswith("\n"):
                old += "\n"
            atomic_write(self.path, old + line)  # whole-file replace: never a half-written known_hosts
            self.recorded.append({"host": hostname, "key_type": key.get_name(), "fingerprint": f"SHA256:{digest}"})
        client.get_host_keys().add(hostname, key.get_name(), key)


@dataclass
class _Conn:
    client: paramiko.SSHClient | None = None
    failure: CommandResult | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class SshTransport:
    kind = "ssh"

    def __init__(self, ssh: SshConfig, timeouts: Timeouts | None = None, accept_new: bool = False) -> None:
        self.ssh = ssh
        self.timeouts = timeouts or Timeouts()
        self.accept_new = accept_new
        self.accepted_keys: list[dict[str, str]] = []
        self._known_hosts = ssh.known_hosts_path()
        self._kh_lock = threading.Lock()
        self._conns: dict[str, _Conn] = {}
        self._conns_lock = threading.Lock()
        self._jump: _Conn = _Conn()
        self._pkey = _load_key(ssh)
        if not self._known_hosts.is_file() and not accept_new:
            raise InputError(
                f"ssh.known_hosts: {self._known_hosts} does not exist, so no host key can be verified",
                "point ssh.known_hosts at a file with the nodes' keys, or pass --accept-new-host-keys "
                "to trust and record keys on first contact",
            )
        # paramiko logs a traceback from its transport thread for a failed banner even when the
        # caller handles the error; the outcome is reported by us, so keep stderr for progress.
        plog = logging.getLogger("paramiko")
        if not any(isinstance(h, logging.NullHandler) for h in plog.handlers):
            plog.addHandler(logging.NullHandler())
        plog.propagate = False

    # -- connections

    def _new_client(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        if self._known_hosts.is_file():
            client.get_host_keys().load(str(self._known_hosts))
        if self.accept_new:
            client.set_missing_host_key_policy(_RecordNewKey(self._known_hosts, self._kh_lock, self.accepted_keys))
        else:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        return client

    def _connect_kwargs(self) -> dict[str, Any]:
        t = self.timeouts
        return {
            "pkey": self._pkey,
            "allow_agent": False,
            "look_for_keys": False,
            "timeout": t.connect,
            "banner_timeout": t.banner,
            "auth_timeout": t.auth,
            "channel_timeout": t.channel,
        }

    def _jump_transport(self) -> paramiko.Transport:
        """The one shared connection to the jump host; its host key is checked like a node's."""
        jump = self.ssh.jump_host
        assert jump is not None
        with self._jump.lock:
            if self._jump.failure is not None:
                raise _JumpFailed(self._jump.failure)
            if self._jump.client is None:
                client = self._new_client()
                try:
                    client.connect(
                        jump.host, port=jump.port, username=jump.user or self.ssh.user, **self._connect_kwargs()
                    )
                except Exception as exc:  # noqa: BLE001 - classified; a jump failure fails every node behind it
                    outcome, detail = _classify(exc)
                    self._jump.failure = CommandResult(
                        f"jump:{jump.host}", "", outcome, None, "", "", 0.0, f"jump host {jump.host}: {detail}"
                    )
                    client.close()
                    raise _JumpFailed(self._jump.failure) from None
                self._jump.client = client
            tr = self._jump.client.get_transport()
        if tr is None or not tr.is_active():
            raise ConnectionResetError("the connection to the jump host was lost")
        return tr

    def _conn(self, node: Node) -> _Conn:
        with self._conns_lock:
            return self._conns.setdefault(node.name, _Conn())

    def _client(self, node: Node) -> tuple[paramiko.SSHClient | None, CommandResult | None]:
        conn = self._conn(node)
        with conn.lock:
            if conn.client is not None or conn.failure is not None:
                return conn.client, conn.failure
            start = time.monotonic()
            client = self._new_client()
            try:
                sock = None
                if self.ssh.jump_host is not None:
                    sock = self._jump_sock_to(node)
                client.connect(
                    node.host, port=self.ssh.port, username=self.ssh.user, sock=sock, **self._connect_kwargs()
                )
            except _JumpFailed as jf:
                conn.failure = _failure(node.name, jf.result.outcome, jf.result.detail, start)
            except Exception as exc:  # noqa: BLE001 - every connection failure becomes an Outcome
                outcome, detail = _classify(exc)
                conn.failure = _failure(node.name, outcome, detail, start)
            if conn.failure is not None:
                client.close()
                return None, conn.failure
            conn.client = client
            return client, None

    def _jump_sock_to(self, node: Node) -> paramiko.Channel:
        tr = self._jump_transport()
        try:
            return tr.open_channel(
                "direct-tcpip", (node.host, self.ssh.port), ("127.0.0.1", 0), timeout=self.timeouts.connect
            )
        except paramiko.ChannelException as exc:  # the jump host could not reach the node
            raise ConnectionRefusedError(f"via jump host: {exc}") from None

    def connect(self, node: Node) -> CommandResult | None:
        """Open (or reuse) the node's connection; the failure when it cannot be opened."""
        return self._client(node)[1]

    # -- commands

    def run(self, node: Node, command: str, timeout_s: float) -> CommandResult:
        client, failure = self._client(node)
        if failure is not None:
            return CommandResult(node.name, command, failure.outcome, None, "", "", 0.0, failure.detail, "connect")
        assert client is not None
        start = time.monotonic()
        tr = client.get_transport()
        if tr is None or not tr.is_active():
            return self._lost(node, command, start, "connection closed by the node")
        try:
            chan = tr.open_session(timeout=self.timeouts.channel)
        except paramiko.SSHException as exc:
            outcome = Outcome.TIMEOUT if "Timeout" in str(exc) else Outcome.UNREACHABLE
            return CommandResult(
                node.name, command, outcome, None, "", "", time.monotonic() - start, f"channel: {exc}", "channel"
            )
        try:
            return self._exec(node, chan, command, timeout_s, start)
        finally:
            chan.close()

    def _exec(self, node: Node, chan: paramiko.Channel, command: str, timeout_s: float, start: float) -> CommandResult:
        deadline = start + timeout_s + KILL_AFTER_S + LOCAL_SLACK_S
        out, err = bytearray(), bytearray()
        chan.settimeout(self.timeouts.channel)
        chan.exec_command(wrap(command, timeout_s))
        while True:
            # fileno() is a pipe paramiko sets when stdout or stderr data arrive or the channel closes.
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return _timed_out(node.name, command, start, bytes(out), bytes(err))
            select.select([chan], [], [], min(remaining, 0.5))
            while chan.recv_ready():
                out += chan.recv(65536)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            if chan.closed and not chan.exit_status_ready():
                return self._lost(node, command, start, "connection lost during the command")
        rc = chan.recv_exit_status()
        if rc in _TIMEOUT_RCS:
            return _timed_out(node.name, command, start, bytes(out), bytes(err))
        if rc == -1:
            return self._lost(node, command, start, "the node sent no exit status")
        return CommandResult(
            node.name, command, Outcome.OK, rc, _text(bytes(out)), _text(bytes(err)), time.monotonic() - start
        )

    def _lost(self, node: Node, command: str, start: float, why: str) -> CommandResult:
        return CommandResult(
            node.name, command, Outcome.UNREACHABLE, None, "", "", time.monotonic() - start, why, "connection"
        )

    def close(self) -> None:
        with self._conns_lock:
            conns = list(self._conns.values())
            self._conns.clear()
        for c in [*conns, self._jump]:
            if c.client is not None:
                c.client.close()
                c.client = None


class _JumpFailed(Exception):
    def __init__(self, result: CommandResult) -> None:
        super().__init__(result.detail)
        self.result = result


def _failure(node: str, outcome: Outcome, detail: str, start: float) -> CommandResult:
    return CommandResult(node, "", outcome, None, "", "", time.monotonic() - start, detail, "connect")


def _load_key(ssh: SshConfig) -> paramiko.PKey:
    path = ssh.key_path()
    if path is None:
        raise InputError(
            "ssh.key_file: not set; gpuforge uses key authentication only",
            "set ssh.key_file in the inventory to the private key that the nodes accept",
        )
    if not path.is_file():
        raise InputError(f"ssh.key_file: {path} does not exist", "point ssh.key_file at an existing private key")
    try:
        return paramiko.PKey.from_path(str(path))
    except paramiko.PasswordRequiredException:
        raise InputError(
            f"ssh.key_file: {path} is encrypted with a passphrase",
            "use an unencrypted key for validation, or decrypt a copy with ssh-keygen -p",
        ) from None
    except (paramiko.SSHException, ValueError, OSError) as exc:
        raise InputError(
            f"ssh.key_file: {path} is not a usable private key: {exc}", "pass an OpenSSH private key"
        ) from None


def _classify(exc: BaseException) -> tuple[Outcome, str]:
    """Map paramiko/socket exceptions (as measured in testbed-feasibility.md) to an Outcome."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, paramiko.BadHostKeyException):
        return Outcome.HOST_KEY, f"host key does not match known_hosts (possible impersonation): {text}"
    if isinstance(exc, paramiko.AuthenticationException):
        if "timeout" in text.lower():
            return Outcome.TIMEOUT, f"authentication timed out: {text}"
        return Outcome.AUTH_FAILED, f"authentication refused: {text}"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return Outcome.UNREACHABLE, text
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return Outcome.TIMEOUT, f"connect timed out: {text}"
    if isinstance(exc, paramiko.SSHException):
        if "not found in known_hosts" in text:
            return Outcome.HOST_KEY, f"{text}; verify the key and add it, or pass --accept-new-host-keys"
        if "banner" in text.lower() or "No existing session" in text:
            return Outcome.TIMEOUT, f"no SSH banner within the bound (sshd hung?): {text}"
        return Outcome.UNREACHABLE, f"ssh: {text}"
    if isinstance(exc, OSError):
        return Outcome.UNREACHABLE, text
    return Outcome.UNREACHABLE, f"{type(exc).__name__}: {text}"
