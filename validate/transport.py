"""Run commands on nodes: paramiko over SSH, or subprocess on this machine (`local`).

Security by default: host keys are checked strictly against a known_hosts file; a new key is
accepted only with `accept_new=True`, and then written to that file and recorded. Key auth
only: the keys of a running ssh-agent first (as OpenSSH does), then `ssh.key_file` (asking for
its passphrase on a terminal); ~/.ssh keys are never guessed at and the agent is never forwarded.

Stock OpenSSH allows 10 sessions per connection (MaxSessions, servconf.h DEFAULT_SESSIONS_MAX
in openssh/openssh-portable 0ef0f5a839831c213f24e3f2ae434765c607fb50): every node's
connection carries at most `max_sessions` commands at once, the rest queue for a slot, and a
session the node still refuses ("no more sessions" in sshd's log, ChannelException 'Connect
failed' here) is retried within the channel bound rather than reported as an unreachable node.

Every wait is bounded (research/testbed-feasibility.md, timeout table): TCP connect and
banner+kex by `connect`, the banner by `banner`, auth by `auth`, the channel open by `channel`,
and the command by its own deadline, enforced twice: remotely by `timeout -k` around the
command, locally by a deadline on the read loop. A node that is unreachable, refuses auth, or
hangs is its own `Outcome`, and other nodes proceed in the thread pool meanwhile.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import logging
import os
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import paramiko

from gpuforge.common.errors import InputError
from gpuforge.common.results import atomic_write
from gpuforge.validate.inventory import Node, SshConfig

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


def run_many(
    transport: Transport,
    jobs: Sequence[Job],
    max_workers: int,
    on_done: Callable[[Job, CommandResult], None] | None = None,
) -> list[CommandResult]:
    """Run jobs with at most `max_workers` at once; results in job order.

    The workers are daemon threads, not a ThreadPoolExecutor: the executor's shutdown and its
    exit hook join every running job, so Ctrl-C waited out each node's connect and command
    bounds (57 s seen; issue 13). Here an interrupt in the main thread stops handing out jobs
    and propagates at once; the caller closes the transport, and the process may exit while a
    worker still sits in a socket read.
    """
    if not jobs:
        return []
    results: list[CommandResult | None] = [None] * len(jobs)
    failures: list[BaseException] = []
    pending = iter(range(len(jobs)))
    lock = threading.Lock()
    finished = threading.Condition(lock)
    stop = threading.Event()
    left = [len(jobs)]

    def worker() -> None:
        while not stop.is_set():
            with lock:
                i = next(pending, None)
            if i is None:
                return
            try:
                res = transport.run(jobs[i].node, jobs[i].command, jobs[i].timeout_s)
                if on_done is not None:
                    on_done(jobs[i], res)
                results[i] = res
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
                failures.append(exc)
                stop.set()
            with finished:
                left[0] -= 1
                finished.notify_all()

    for k in range(max(1, min(max_workers, len(jobs)))):
        threading.Thread(target=worker, name=f"gf-ssh-{k}", daemon=True).start()
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
    return [r for r in results if r is not None]


# ----------------------------------------------------------------------------- local


class LocalTransport:
    """Runs on this machine, for validating the node you are logged in to."""

    kind = "local"

    def run(self, node: Node, command: str, timeout_s: float) -> CommandResult:
        start = time.monotonic()
        rc, out, err, took = run_bounded(["sh", "-c", wrap(command, timeout_s)], timeout_s + KILL_AFTER_S + LOCAL_SLACK_S)
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
    launcher started), not just the first process."""
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, _text(out), _text(err), time.monotonic() - start
    return proc.returncode, _text(out), _text(err), time.monotonic() - start


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _timed_out(node: str, command: str, start: float, out: str, err: str) -> CommandResult:
    took = time.monotonic() - start
    return CommandResult(
        node, command, Outcome.TIMEOUT, None, out, err, took, f"command ran past its bound ({took:.1f} s)"
    )


# ----------------------------------------------------------------------------- ssh


def fingerprint(key: paramiko.PKey) -> str:
    """The key's fingerprint as OpenSSH prints it (`ssh-keygen -lf`, sshkey_fingerprint SHA256)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def known_hosts_name(host: str, port: int) -> str:
    """How known_hosts (and `ssh-keygen -R`) names a host: `[host]:port` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


class _RecordNewKey(paramiko.MissingHostKeyPolicy):
    """accept-new: trust a host seen for the first time, write its key, and record it.

    A *changed* key never reaches this policy: paramiko raises BadHostKeyException first.
    """

    def __init__(self, path: Path, lock: threading.Lock, recorded: list[dict[str, str]]) -> None:
        self.path, self.lock, self.recorded = path, lock, recorded

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self.lock:
            old = self.path.read_text() if self.path.exists() else ""
            if old and not old.endswith("\n"):
                old += "\n"
            atomic_write(self.path, old + line)  # whole-file replace: never a half-written known_hosts
            self.recorded.append({"host": hostname, "key_type": key.get_name(), "fingerprint": fingerprint(key)})
        client.get_host_keys().add(hostname, key.get_name(), key)


@dataclass
class _Conn:
    client: paramiko.SSHClient | None = None
    failure: CommandResult | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    slots: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(OPENSSH_MAX_SESSIONS))


class SshTransport:
    kind = "ssh"

    def __init__(
        self,
        ssh: SshConfig,
        timeouts: Timeouts | None = None,
        accept_new: bool = False,
        *,
        max_sessions: int = OPENSSH_MAX_SESSIONS,
        ask_passphrase: bool | None = None,
    ) -> None:
        self.ssh = ssh
        self.timeouts = timeouts or Timeouts()
        self.accept_new = accept_new
        self.max_sessions = max(1, max_sessions)
        self.accepted_keys: list[dict[str, str]] = []
        self._known_hosts = ssh.known_hosts_path()
        self._kh_lock = threading.Lock()
        self._conns: dict[str, _Conn] = {}
        self._conns_lock = threading.Lock()
        self._jump: _Conn = _Conn()
        self._agent_blobs = _agent_key_blobs()
        tty = sys.stdin.isatty() if ask_passphrase is None else ask_passphrase
        self._pkey = _load_key(ssh, self._agent_blobs, tty)
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

    def _connect_kwargs(self, auth: str) -> dict[str, Any]:
        t = self.timeouts
        return {
            "pkey": self._pkey if auth == "key" else None,
            "allow_agent": auth == "agent",
            "look_for_keys": False,
            "timeout": t.connect,
            "banner_timeout": t.banner,
            "auth_timeout": t.auth,
            "channel_timeout": t.channel,
        }

    def _auths(self) -> list[str]:
        """Agent first, as OpenSSH does; then the key file (unless the agent holds that very key)."""
        return (["agent"] if self._agent_blobs else []) + (["key"] if self._pkey is not None else [])

    def _connect(self, host: str, port: int, user: str, sock: paramiko.Channel | None = None) -> paramiko.SSHClient:
        """A connected, authenticated client; raises what the last attempt raised."""
        auths = self._auths()
        for n, auth in enumerate(auths):
            client = self._new_client()
            try:
                client.connect(host, port=port, username=user, sock=sock, **self._connect_kwargs(auth))
                return client
            except paramiko.AuthenticationException:
                client.close()
                if n == len(auths) - 1:
                    raise
                if sock is not None:  # a jump channel is used up by the failed attempt: open another
                    sock = self._jump_sock(host, port)
            except BaseException:
                client.close()
                raise
        raise paramiko.AuthenticationException("no key to offer: ssh-agent has none and ssh.key_file is unset")

    def _jump_transport(self) -> paramiko.Transport:
        """The one shared connection to the jump host; its host key is checked like a node's."""
        jump = self.ssh.jump_host
        assert jump is not None
        with self._jump.lock:
            if self._jump.failure is not None:
                raise _JumpFailed(self._jump.failure)
            if self._jump.client is None:
                try:
                    client = self._connect(jump.host, jump.port, jump.user or self.ssh.user)
                except Exception as exc:  # noqa: BLE001 - classified; a jump failure fails every node behind it
                    outcome, detail = self._classify(exc, jump.host, jump.port)
                    self._jump.failure = CommandResult(
                        f"jump:{jump.host}", "", outcome, None, "", "", 0.0, f"jump host {jump.host}: {detail}"
                    )
                    raise _JumpFailed(self._jump.failure) from None
                self._jump.client = client
            tr = self._jump.client.get_transport()
        if tr is None or not tr.is_active():
            raise ConnectionResetError("the connection to the jump host was lost")
        return tr

    def _conn(self, node: Node) -> _Conn:
        with self._conns_lock:
            return self._conns.setdefault(node.name, _Conn())

    def port(self, node: Node) -> int:
        """The node's own `port` from the inventory, else `ssh.port`."""
        return node.port or self.ssh.port

    def user(self, node: Node) -> str:
        return node.user or self.ssh.user

    def _client(self, node: Node) -> tuple[paramiko.SSHClient | None, CommandResult | None]:
        conn = self._conn(node)
        with conn.lock:
            if conn.client is not None or conn.failure is not None:
                return conn.client, conn.failure
            start = time.monotonic()
            port = self.port(node)
            try:
                sock = self._jump_sock(node.host, port) if self.ssh.jump_host is not None else None
                conn.client = self._connect(node.host, port, self.user(node), sock)
            except _JumpFailed as jf:
                conn.failure = _failure(node.name, jf.result.outcome, jf.result.detail, start)
            except Exception as exc:  # noqa: BLE001 - every connection failure becomes an Outcome
                outcome, detail = self._classify(exc, node.host, port)
                conn.failure = _failure(node.name, outcome, detail, start)
            if conn.failure is not None:
                return None, conn.failure
            conn.slots = threading.BoundedSemaphore(self.max_sessions)
            return conn.client, None

    def _jump_sock(self, host: str, port: int) -> paramiko.Channel:
        tr = self._jump_transport()
        try:
            return tr.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=self.timeouts.connect)
        except paramiko.ChannelException as exc:  # the jump host could not reach the node
            raise ConnectionRefusedError(f"via jump host: {exc}") from None

    def _classify(self, exc: BaseException, host: str, port: int) -> tuple[Outcome, str]:
        if isinstance(exc, paramiko.BadHostKeyException):
            entry = known_hosts_name(host, port)
            detail = (
                f"host key for {entry} has changed: it sent {exc.key.get_name()} {fingerprint(exc.key)}, "
                f"{self._known_hosts} has {exc.expected_key.get_name()} {fingerprint(exc.expected_key)} "
                f"(possible impersonation). If the change is expected (node rebuilt), remove the old key with: "
                f"ssh-keygen -f '{self._known_hosts}' -R '{entry}'"
            )
            return Outcome.HOST_KEY, detail
        outcome, detail = _classify(exc)
        if outcome is Outcome.TIMEOUT and "SSH banner" in detail and self.ssh.jump_host is None:
            answer = _probe(host, port, min(self.timeouts.banner, 1.0))
            if answer is not None and not answer.startswith(b"SSH-"):
                shown = answer[:60].decode("ascii", errors="replace").strip()
                detail = (
                    f"{host}:{port} answers, but not with SSH (it sent {shown!r}): not an SSH server. "
                    "Check ssh.port or the node's port in the inventory"
                )
                return Outcome.UNREACHABLE, detail
        return outcome, detail

    def connect(self, node: Node) -> CommandResult | None:
        """Open (or reuse) the node's connection; the failure when it cannot be opened."""
        return self._client(node)[1]

    # -- commands

    def run(self, node: Node, command: str, timeout_s: float) -> CommandResult:
        client, failure = self._client(node)
        if failure is not None:
            return CommandResult(node.name, command, failure.outcome, None, "", "", 0.0, failure.detail, "connect")
        assert client is not None
        slots = self._conn(node).slots
        if not slots.acquire(timeout=SLOT_WAIT_S):
            why = f"no free session on the connection within {SLOT_WAIT_S:g} s ({self.max_sessions} in use)"
            return CommandResult(node.name, command, Outcome.TIMEOUT, None, "", "", SLOT_WAIT_S, why, "channel")
        try:
            return self._run_in_slot(node, client, command, timeout_s)
        finally:
            slots.release()

    def _run_in_slot(self, node: Node, client: paramiko.SSHClient, command: str, timeout_s: float) -> CommandResult:
        start = time.monotonic()
        tr = client.get_transport()
        if tr is None or not tr.is_active():
            return self._lost(node, command, start, "connection closed by the node")
        # sshd may still count a session we just closed, or run with MaxSessions below ours: a
        # refused session ("no more sessions") is retried for as long as a channel may take.
        deadline = start + 3 * self.timeouts.channel
        while True:
            try:
                chan = tr.open_session(timeout=self.timeouts.channel)
                break
            except paramiko.SSHException as exc:
                # a refusal is a ChannelException, or, when concurrent opens on one transport
                # race for paramiko's single saved exception, a bare "Unable to open channel."
                refused = isinstance(exc, paramiko.ChannelException) or "Unable to open channel" in str(exc)
                if not refused:
                    outcome = Outcome.TIMEOUT if "Timeout" in str(exc) else Outcome.UNREACHABLE
                    return CommandResult(
                        node.name, command, outcome, None, "", "", time.monotonic() - start, f"channel: {exc}", "channel"
                    )
                if time.monotonic() >= deadline:
                    why = f"channel: sshd refused a session ({exc}); its MaxSessions is below {self.max_sessions}?"
                    return CommandResult(
                        node.name, command, Outcome.UNREACHABLE, None, "", "", time.monotonic() - start, why, "channel"
                    )
                time.sleep(0.1)
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
                return _timed_out(node.name, command, start, _text(bytes(out)), _text(bytes(err)))
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
        if rc in TIMEOUT_RCS:
            return _timed_out(node.name, command, start, _text(bytes(out)), _text(bytes(err)))
        if rc == -1:
            return self._lost(node, command, start, "the node sent no exit status")
        return CommandResult(node.name, command, Outcome.OK, rc, _text(bytes(out)), _text(bytes(err)), time.monotonic() - start)

    def _lost(self, node: Node, command: str, start: float, why: str) -> CommandResult:
        return CommandResult(node.name, command, Outcome.UNREACHABLE, None, "", "", time.monotonic() - start, why, "connection")

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


def _agent_key_blobs() -> list[bytes]:
    """Public key blobs the running ssh-agent holds (SSH_AUTH_SOCK); empty without an agent."""
    if not os.environ.get("SSH_AUTH_SOCK"):
        return []
    agent = paramiko.Agent()
    try:
        return [k.asbytes() for k in agent.get_keys()]
    except (paramiko.SSHException, OSError):
        return []
    finally:
        agent.close()


def _public_blob(path: Path) -> bytes | None:
    """The key's public half from `<key>.pub`, readable without the passphrase."""
    pub = Path(f"{path}.pub")
    try:
        fields = pub.read_text().split()
        return base64.b64decode(fields[1]) if len(fields) >= 2 else None
    except (OSError, ValueError):
        return None


def _load_key(ssh: SshConfig, agent_blobs: list[bytes], ask: bool) -> paramiko.PKey | None:
    """The key file's key, or None when the agent already offers it (or there is no key file).

    An encrypted key is decrypted with a passphrase asked on the terminal; without a terminal
    it is a clear error (load it into ssh-agent), never a traceback.
    """
    path = ssh.key_path()
    if path is None:
        if agent_blobs:
            return None
        raise InputError(
            "ssh.key_file: not set and no ssh-agent with keys (SSH_AUTH_SOCK); gpuforge uses key authentication only",
            "set ssh.key_file in the inventory to the private key that the nodes accept, or ssh-add it to an agent",
        )
    if not path.is_file():
        raise InputError(f"ssh.key_file: {path} does not exist", "point ssh.key_file at an existing private key")
    if agent_blobs and _public_blob(path) in agent_blobs:
        return None  # the agent holds this very key: no passphrase needed
    try:
        return paramiko.PKey.from_path(str(path))
    except (paramiko.PasswordRequiredException, TypeError):
        # cryptography raises TypeError ("Key is password-protected, but password was not provided")
        pass
    except (paramiko.SSHException, ValueError, OSError) as exc:
        raise InputError(f"ssh.key_file: {path} is not a usable private key: {exc}", "pass an OpenSSH private key") from None
    if not ask:
        raise InputError(
            f"ssh.key_file: {path} is encrypted with a passphrase and there is no terminal to ask for it",
            f"load it into ssh-agent first (eval $(ssh-agent); ssh-add {path}), then run again",
        )
    try:
        secret = getpass.getpass(f"Passphrase for {path}: ").encode()
        # bytes at run time (cryptography's load_ssh_private_key); the stubs say str
        return paramiko.PKey.from_path(str(path), secret)  # type: ignore[arg-type]
    except (paramiko.SSHException, ValueError, TypeError):
        raise InputError(f"ssh.key_file: wrong passphrase for {path}", "try again, or ssh-add it to an agent") from None


def _probe(host: str, port: int, timeout: float) -> bytes | None:
    """What the port says first when spoken to like an SSH client (bounded); None: nothing came."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"SSH-2.0-gpuforge_probe\r\n")
            data = sock.recv(256)
            return data or None
    except OSError:
        return None


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
