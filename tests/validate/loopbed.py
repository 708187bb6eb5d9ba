"""N real OpenSSH daemons on this machine, one per loopback address: the bed for validate at scale.

Linux routes all of 127.0.0.0/8 to `lo`, so each daemon listens on its own 127.x.y.z with no
namespace, bridge or veth: 1,024 nodes cost 1,024 sshd listeners (a few MiB each) and nothing
else. Each daemon has its own host key (known_hosts lists each, strict checking is the default),
stock limits (no MaxSessions/MaxStartups), and runs in the foreground (`-D`) as this process's
child, so `down()` ends exactly the daemons it started, by PID. Every node shares this machine's
kernel and hostname: the bed is for the transport and the fan-out, not for per-node facts
(tests/validate/testbed.py, with namespaces, is for those).

Faults: `stop(i)` SIGSTOPs a daemon (the kernel still completes the TCP handshake; no banner ever
comes: a hung sshd), `refuse(i)` ends it (connection refused: unreachable), and `deny=` starts a
daemon whose authorized_keys lacks our key (auth failure).

Addresses: 127.<200 + pid % 50>.<i // 250>.<i % 250 + 1>, port 20022: distinct for concurrent
runs (different pids) and clear of 127.0.0.1. Root: sshd logs in as root, and each daemon gets
a clean /root in its own mount namespace (`unshare --mount`), as testbed.py does.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PORT = 20022
SSHD = "/usr/sbin/sshd"


def missing_requirements() -> str | None:
    """Why the bed cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (sshd must run as root to switch to the login user)"
    absent = [t for t in ("ssh-keygen", "timeout", "unshare") if shutil.which(t) is None]
    if not Path(SSHD).exists():
        absent.append("sshd")
    if absent:
        return f"missing tools: {', '.join(absent)} (scripts/setup.sh --with-test-hosts installs them)"
    return None


@dataclass
class LoopBed:
    __test__ = False

    n: int
    deny: frozenset[int] = frozenset()  # node indexes (1-based) whose daemon does not accept our key
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gf-loopbed-")))
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    stopped: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.net = 200 + os.getpid() % 50
        self.key = self.root / "id_ed25519"
        self.known_hosts = self.root / "known_hosts"

    def ip(self, i: int) -> str:
        return f"127.{self.net}.{(i - 1) // 250}.{(i - 1) % 250 + 1}"

    def up(self) -> LoopBed:
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def _up(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privsep dir; left for others
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True, timeout=30)
        (self.root / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        (self.root / "nobody_keys").write_text("")
        (self.root / "home").mkdir()
        known = []
        for i in range(1, self.n + 1):
            hk = self.root / f"host{i}"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hk)], check=True, timeout=30)
            kind, blob = Path(f"{hk}.pub").read_text().split()[:2]
            known.append(f"[{self.ip(i)}]:{PORT} {kind} {blob}\n")
        self.known_hosts.write_text("".join(known))
        for i in range(1, self.n + 1):
            self._start(i)
        self._wait_listening(range(1, self.n + 1))

    def _start(self, i: int) -> None:
        keys = self.root / ("nobody_keys" if i in self.deny else "authorized_keys")
        cfg = self.root / f"sshd{i}.conf"
        # Stock limits on purpose: no MaxSessions, MaxStartups or LoginGraceTime here.
        cfg.write_text(
            f"ListenAddress {self.ip(i)}:{PORT}\nHostKey {self.root}/host{i}\nPidFile none\n"
            f"AuthorizedKeysFile {keys}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\nLogLevel VERBOSE\n"
        )
        # A clean /root in the daemon's own mount namespace: this machine's dotfiles (a pyenv
        # init in .bashrc here cost ~0.4 s per session) are not what a node's login runs.
        script = f"mount --bind {self.root}/home /root && exec {SSHD} -D -f {cfg} -E {self.root}/sshd{i}.log"
        self.procs[i] = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def _wait_listening(self, which: range | list[int]) -> None:
        left = set(which)
        deadline = time.monotonic() + 60 + self.n / 10
        while left and time.monotonic() < deadline:
            for i in sorted(left):
                if self.procs[i].poll() is not None:
                    log = (self.root / f"sshd{i}.log").read_text()[-400:]
                    raise RuntimeError(f"sshd {i} exited: {log}")
                try:
                    with socket.create_connection((self.ip(i), PORT), timeout=1):
                        left.discard(i)
                except OSError:
                    pass
            if left:
                time.sleep(0.05)
        if left:
            raise RuntimeError(f"{len(left)} sshd(s) not listening, e.g. {self.ip(min(left))}")

    def down(self) -> None:
        for i in sorted(self.stopped):
            self._signal(i, signal.SIGCONT)
        for i in self.procs:
            self._signal(i, signal.SIGTERM)  # sshd's listener ends its session children with it
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def _signal(self, i: int, sig: signal.Signals) -> None:
        p = self.procs.get(i)
        if p is not None and p.poll() is None:
            os.kill(p.pid, sig)

    # -- faults

    def stop(self, i: int) -> None:
        """A hung sshd: SIGSTOP the listener; TCP handshakes still complete, no banner comes."""
        self._signal(i, signal.SIGSTOP)
        self.stopped.add(i)

    def refuse(self, i: int) -> None:
        """No daemon at the address any more: connections are refused."""
        p = self.procs.pop(i)
        os.kill(p.pid, signal.SIGTERM)
        p.wait(timeout=10)

    def sessions(self, i: int) -> int:
        """How many sessions daemon i has started (sshd logs each at VERBOSE: "Starting session")."""
        log = self.root / f"sshd{i}.log"
        return log.read_text(errors="replace").count("Starting session:") if log.exists() else 0

    # -- what the tools read

    def names(self) -> list[str]:
        return [f"n{i:04d}" for i in range(1, self.n + 1)]

    def inventory(self) -> dict[str, object]:
        return {
            "ssh": {"user": "root", "key_file": str(self.key), "known_hosts": str(self.known_hosts), "port": PORT},
            "nodes": [{"name": name, "host": self.ip(i)} for i, name in enumerate(self.names(), 1)],
        }

    def ssh_config(self) -> Path:
        """An OpenSSH client config with the same policy, for the anchors (pdsh, clush)."""
        cfg = self.root / "ssh_config"
        cfg.write_text(
            f"Host *\n  User root\n  Port {PORT}\n  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 5\n  ControlMaster no\n"
        )
        return cfg
