"""Open one authenticated SSH connection (a paramiko Transport), step by step, each step bounded.

The steps and their bounds (Timeouts): TCP connect (`connect`), the server's banner (`banner`),
key exchange (`connect`), the host-key check against known_hosts (sshkeys.KnownHosts), public-key
auth (`auth`, per key offered). paramiko.Transport is driven directly rather than through
SSHClient, which re-reads known_hosts on every connection and measures its bounds in wall time.
Here every wait after the TCP connect is measured in the controller's own time (validate/lag.py),
so a stopped or starved controller does not make a healthy sshd look hung; a TCP connect that
timed out while the controller was stalled is tried again rather than reported.

A failure is a `ConnectFailure` naming the step: unreachable, auth failure, a hung sshd (no
banner) and a host-key problem stay separate outcomes.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from dataclasses import dataclass

import paramiko

from gpuforge.validate import lag
from gpuforge.validate.sshkeys import HostKeyMismatch, HostKeyUnknown, KnownHosts, fingerprint, fingerprint_blob, known_hosts_name
from gpuforge.validate.transport import Outcome, Timeouts

# paramiko's own banner/handshake timers run in wall time in its reader thread; ours (own time)
# fire first, so these are only a backstop for a controller stalled longer than this.
PARAMIKO_BACKSTOP_S = 300.0
POLL_S = 0.05
STALL_RETRIES = 20  # a connect that timed out during a controller stall is tried again, this often at most


class OutOfDescriptors(Exception):
    """This process hit its open-file limit (EMFILE/ENFILE): the controller's problem, not the node's."""


class StepTimeout(Exception):
    def __init__(self, step: str, detail: str) -> None:
        super().__init__(detail)
        self.step = step


@dataclass(frozen=True)
class ConnectFailure:
    outcome: Outcome
    step: str  # tcp | banner | kex | hostkey | auth | jump
    detail: str


def _own_wait(ev: threading.Event, tr: paramiko.Transport, bound: float, start: float, step: str, what: str) -> None:
    """Wait for `ev` while the transport lives, at most `bound` seconds of the controller's own time."""
    clock = lag.monitor()
    while not ev.wait(POLL_S):
        if not tr.is_active():
            raise tr.get_exception() or paramiko.SSHException(f"{step}: the connection closed")
        if clock.own_time(start) > bound:
            raise StepTimeout(step, what)


class Connector:
    """Opens connections for one run: the known_hosts index and our keys, loaded once."""

    def __init__(self, timeouts: Timeouts, known: KnownHosts, pkey: paramiko.PKey | None, use_agent: bool) -> None:
        self.t, self.known, self.pkey, self.use_agent = timeouts, known, pkey, use_agent

    def open(self, host: str, port: int, user: str, sock: paramiko.Channel | None = None) -> paramiko.Transport:
        """A connected, authenticated transport; raises what the failing step raised."""
        t = self.t
        if sock is None:
            try:
                raw = socket.create_connection((host, port), timeout=t.connect)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    raise OutOfDescriptors(str(exc)) from None
                raise
        tr = paramiko.Transport(sock if sock is not None else raw)
        try:
            self._negotiate(tr, host, port, user)
        except BaseException:
            tr.close()
            raise
        return tr

    def _negotiate(self, tr: paramiko.Transport, host: str, port: int, user: str) -> None:
        t = self.t
        tr.banner_timeout = tr.handshake_timeout = PARAMIKO_BACKSTOP_S
        tr.auth_timeout = PARAMIKO_BACKSTOP_S
        name = known_hosts_name(host, port)
        opts = tr.get_security_options()
        prefer = [k for k in self.known.preferred_types(name) if k in opts.key_types]
        if prefer:
            opts.key_types = tuple(prefer + [k for k in opts.key_types if k not in prefer])
        start = time.monotonic()
        ev = threading.Event()
        tr.start_client(event=ev)
        clock = lag.monitor()
        while not tr.remote_version and not ev.is_set():  # the banner
            if not tr.is_active():
                raise tr.get_exception() or paramiko.SSHException("Error reading SSH protocol banner")
            if clock.own_time(start) > t.banner:
                raise StepTimeout("banner", f"no SSH banner within {t.banner:g} s (sshd hung?)")
            ev.wait(POLL_S)
        _own_wait(ev, tr, t.connect, time.monotonic(), "kex", f"key exchange did not finish within {t.connect:g} s")
        if not tr.is_active():
            raise tr.get_exception() or paramiko.SSHException("Negotiation failed.")
        self.known.check(name, tr.get_remote_server_key())
        self._auth(tr, user)

    def _auth(self, tr: paramiko.Transport, user: str) -> None:
        """Agent keys first, as OpenSSH does, then the key file; the last refusal is raised."""
        agent = paramiko.Agent() if self.use_agent else None
        try:
            keys: list[paramiko.PKey] = list(agent.get_keys()) if agent is not None else []
            if self.pkey is not None:
                keys.append(self.pkey)
            if not keys:
                raise paramiko.AuthenticationException("no key to offer: ssh-agent has none and ssh.key_file is unset")
            last: Exception | None = None
            for key in keys:
                ev = threading.Event()
                tr.auth_publickey(user, key, ev)
                _own_wait(ev, tr, self.t.auth, time.monotonic(), "auth", f"authentication timed out after {self.t.auth:g} s")
                handler = tr.auth_handler
                assert handler is not None  # auth_publickey just made it
                try:
                    handler.wait_for_response(ev)  # set already: raises the refusal, if any
                    return
                except paramiko.AuthenticationException as exc:
                    last = exc
            assert last is not None
            raise last
        finally:
            if agent is not None:
                agent.close()

    # -- what went wrong

    def classify(self, exc: BaseException, host: str, port: int, via_jump: bool) -> ConnectFailure:
        """Map a failed open to an Outcome (the exceptions as measured in testbed-feasibility.md)."""
        if isinstance(exc, HostKeyMismatch):
            entry = known_hosts_name(host, port)
            kh = self.known.path
            detail = (
                f"host key for {entry} has changed: it sent {exc.sent.get_name()} {fingerprint(exc.sent)}, "
                f"{kh} has {exc.expected_type} {fingerprint_blob(exc.expected_blob)} "
                f"(possible impersonation). If the change is expected (node rebuilt), remove the old key with: "
                f"ssh-keygen -f '{kh}' -R '{entry}'"
            )
            return ConnectFailure(Outcome.HOST_KEY, "hostkey", detail)
        if isinstance(exc, HostKeyUnknown):
            why = f"{exc}; verify the key and add it, or pass --accept-new-host-keys"
            return ConnectFailure(Outcome.HOST_KEY, "hostkey", why)
        if isinstance(exc, StepTimeout):
            failure = ConnectFailure(Outcome.TIMEOUT, exc.step, str(exc))
        else:
            outcome, detail = classify_error(exc)
            failure = ConnectFailure(outcome, "auth" if outcome is Outcome.AUTH_FAILED else "tcp", detail)
        if failure.outcome is Outcome.TIMEOUT and "banner" in failure.detail.lower() and not via_jump:
            answer = probe(host, port, min(self.t.banner, 1.0))
            if answer is not None and not answer.startswith(b"SSH-"):
                shown = answer[:60].decode("ascii", errors="replace").strip()
                detail = (
                    f"{host}:{port} answers, but not with SSH (it sent {shown!r}): not an SSH server. "
                    "Check ssh.port or the node's port in the inventory"
                )
                return ConnectFailure(Outcome.UNREACHABLE, "banner", detail)
        return failure


def probe(host: str, port: int, timeout: float) -> bytes | None:
    """What the port says first when spoken to like an SSH client (bounded); None: nothing came."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"SSH-2.0-gpuforge_probe\r\n")
            data = sock.recv(256)
            return data or None
    except OSError:
        return None


def classify_error(exc: BaseException) -> tuple[Outcome, str]:
    """Map paramiko/socket exceptions (as measured in testbed-feasibility.md) to an Outcome."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, paramiko.AuthenticationException):
        if "timeout" in text.lower():
            return Outcome.TIMEOUT, f"authentication timed out: {text}"
        return Outcome.AUTH_FAILED, f"authentication refused: {text}"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return Outcome.TIMEOUT, f"connect timed out: {text}"
    if isinstance(exc, paramiko.SSHException):
        if "banner" in text.lower() or "No existing session" in text:
            return Outcome.TIMEOUT, f"no SSH banner within the bound (sshd hung?): {text}"
        return Outcome.UNREACHABLE, f"ssh: {text}"
    if isinstance(exc, OSError):
        return Outcome.UNREACHABLE, text
    return Outcome.UNREACHABLE, f"{type(exc).__name__}: {text}"
