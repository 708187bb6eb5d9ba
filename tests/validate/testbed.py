"""Real test hosts for the validate tests: network namespaces on a bridge, each with its own sshd.

After research/netns-testbed-sketch.sh (testbed-feasibility.md): a namespace per host with a
veth into a private bridge, an sshd (key-only, its own host key and pid file) started under
`unshare --uts --mount` so `hostname` answers the node's name and a clean /root is mounted (no
dotfiles slowing each session). tests/validate/replay, when it exists, is bind-mounted over
/usr/local/bin (first on sshd's PATH) so GPU tools there replay captured output.

Safety: all names carry a per-process prefix (gf<pid>) so parallel runs never collide; the
subnet has a blackhole route so its traffic cannot leave via the default route; namespaces
have no default route. `down()` removes everything it created, also after a failed `up()`.
Every subprocess call has a timeout and every wait loop a bounded count.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPLAY_DIR = Path(__file__).resolve().parent / "replay"
TOOLS = ("ip", "tc", "ethtool", "sshd", "ssh-keygen", "iperf3", "ping", "ss", "unshare", "timeout")


def missing_requirements() -> str | None:
    """Why the test bed cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces); CI runs these as root"
    absent = [t for t in TOOLS if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]
    if absent:
        return f"missing tools: {', '.join(absent)} (scripts/setup.sh --with-test-hosts installs them)"
    return None


def shaper_burst(mbit: float) -> int:
    """A shaper's bucket in bytes: 10 ms of its rate, at least 4,000 (32 kbit).

    tbf and htb send what the bucket holds when their watchdog timer fires; a bucket smaller than
    the rate times the timer's lateness loses the tokens that would have accrued meanwhile. On an
    idle Firecracker VM (kernel 6.18, HZ 250) the wakeups are late enough that `tbf rate 100mbit
    burst 32kbit` delivered 74-92 Mbit/s to iperf3 (2026-12-04; testbed-feasibility.md had 95.4 %
    of 200 mbit on a busier day) and a healthy test bed was called slow. With 10 ms (1 mbit at
    100 mbit) it delivered 95.9, which is TCP's ceiling at that rate (1448/1514 x R), idle or under
    CPU load. Over a 2.5 s test the bucket adds 0.4 % at most."""
    return max(4000, int(mbit * 1e6 / 8 * 0.010))


def _sh(*args: str, check: bool = True, timeout: float = 15) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=timeout)


@dataclass
class Host:
    index: int
    name: str
    ip: str
    ns: str
    dir: Path
    sshd_pid: int | None = None


@dataclass
class Testbed:
    __test__ = False  # not a test class, despite the name

    n: int
    prefix: str = field(default_factory=lambda: f"gf{os.getpid()}")
    hosts: list[Host] = field(default_factory=list)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gf-testbed-")))
    stopped: set[int] = field(default_factory=set)
    scenarios: dict[int, str] = field(default_factory=dict)  # host index -> replay scenario (sshd SetEnv)
    ports: dict[int, int] = field(default_factory=dict)  # host index -> sshd port (default 22)
    no_replay: set[int] = field(default_factory=set)  # hosts without the GPU tools: no nvidia-smi at all
    # host index -> a folder mounted over /usr/local/sbin (first on sshd's PATH) instead of the replay
    # tools over /usr/local/bin, which stays as it is: this machine's Python lives there (tests/poc: the
    # docker stand-in, run by that Python; no nvidia-smi)
    bin_dirs: dict[int, Path] = field(default_factory=dict)
    _created: list[tuple[str, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        pid = os.getpid()
        # 10.<150-249>.<0-255>.0/24 from the pid: distinct for concurrent runs on one machine
        self.net = f"10.{150 + (pid >> 8) % 100}.{pid % 256}"
        self.bridge = f"{self.prefix}br"[:15]
        self.key = self.root / "id_ed25519"
        self.known_hosts = self.root / "known_hosts"

    # -- lifecycle

    def up(self) -> Testbed:
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def _up(self) -> None:
        taken = _sh("ip", "-o", "addr").stdout
        if f" {self.net}." in taken:
            raise RuntimeError(f"subnet {self.net}.0/24 already in use here")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd privsep dir; left in place, others may use it
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        self._created.append(("ip", "link", "del", self.bridge))
        _sh("ip", "link", "set", self.bridge, "up")
        _sh("ip", "addr", "add", f"{self.net}.254/24", "dev", self.bridge)
        _sh("ip", "route", "add", "blackhole", f"{self.net}.0/24", "metric", "4242")
        self._created.append(("ip", "route", "del", "blackhole", f"{self.net}.0/24", "metric", "4242"))
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        (self.root / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        (self.root / "home").mkdir()
        kh = []
        for i in range(1, self.n + 1):
            host = self._add_host(i)
            pub = Path(f"{host.dir}/ssh_host_ed25519_key.pub").read_text().split()
            name = host.ip if self.port(i) == 22 else f"[{host.ip}]:{self.port(i)}"  # known_hosts' own form
            kh.append(f"{name} {pub[0]} {pub[1]}\n")
            self.hosts.append(host)
        self.known_hosts.write_text("".join(kh))
        for host in self.hosts:
            self._wait_listening(host)

    def port(self, i: int) -> int:
        return self.ports.get(i, 22)

    def _add_host(self, i: int) -> Host:
        ns, veth = f"{self.prefix}-h{i}", f"{self.prefix}v{i}"[:15]
        host = Host(i, f"node{i}", f"{self.net}.{i}", ns, self.root / f"h{i}")
        host.dir.mkdir()
        _sh("ip", "netns", "add", ns)
        self._created.append(("ip", "netns", "del", ns))
        _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _sh("ip", "link", "set", veth, "master", self.bridge, "up")
        _sh("ip", "-n", ns, "link", "set", "lo", "up")
        _sh("ip", "-n", ns, "addr", "add", f"{host.ip}/24", "dev", "eth0")
        _sh("ip", "-n", ns, "link", "set", "eth0", "up")
        key = host.dir / "ssh_host_ed25519_key"
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        cfg = host.dir / "sshd_config"
        # Stock limits on purpose (no MaxSessions/MaxStartups): the transport must live with
        # OpenSSH's defaults, 10 sessions per connection and 10:30:100 startups (servconf.c).
        cfg.write_text(
            f"ListenAddress {host.ip}:{self.port(i)}\nHostKey {key}\nPidFile {host.dir}/sshd.pid\n"
            f"AuthorizedKeysFile {self.root}/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "UseDNS no\n"
        )
        if i in self.scenarios:  # each session on this host replays its own scenario (_replay.py)
            with cfg.open("a") as f:
                f.write(f"SetEnv GPUFORGE_REPLAY_SCENARIO={self.scenarios[i]}\n")
        mounts = f"mount --bind {self.root}/home /root"
        if i in self.bin_dirs:
            mounts += f" && mount --bind {self.bin_dirs[i]} /usr/local/sbin"
        elif i not in self.no_replay and REPLAY_DIR.is_dir() and any(p.is_file() for p in REPLAY_DIR.iterdir()):
            mounts += f" && mount --bind {REPLAY_DIR} /usr/local/bin"
        script = f"hostname {host.name} && {mounts} && exec /usr/sbin/sshd -f {cfg} -E {host.dir}/sshd.log"
        _sh("ip", "netns", "exec", ns, "unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script)
        pidfile = host.dir / "sshd.pid"
        for _ in range(100):  # sshd daemonizes, then writes its pid file
            if pidfile.is_file() and pidfile.read_text().strip():
                host.sshd_pid = int(pidfile.read_text())
                break
            time.sleep(0.02)
        else:
            raise RuntimeError(f"sshd on {host.name} did not start: {(host.dir / 'sshd.log').read_text()[-500:]}")
        return host

    def _wait_listening(self, host: Host) -> None:
        for _ in range(100):
            if _sh("ip", "netns", "exec", host.ns, "ss", "-Hltn", f"sport = :{self.port(host.index)}").stdout.strip():
                return
            time.sleep(0.02)
        raise RuntimeError(f"sshd on {host.name} is not listening")

    def down(self) -> None:
        for i in sorted(self.stopped):
            self._signal(self.hosts[i - 1].sshd_pid, signal.SIGCONT)
        for host in self.hosts:
            self._signal(host.sshd_pid, signal.SIGTERM)
            pids = _sh("ip", "netns", "pids", host.ns, check=False).stdout.split()
            for p in pids:  # per-connection sshd children and iperf3 servers left in the namespace
                self._signal(int(p), signal.SIGKILL)
        for cmd in reversed(self._created):
            _sh(*cmd, check=False)
        for host in self.hosts:
            _sh("ip", "link", "del", f"{self.prefix}v{host.index}"[:15], check=False)  # usually gone with the netns
        self._created.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _signal(pid: int | None, sig: signal.Signals) -> None:
        if pid is None:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    # -- faults and shaping

    def shape(self, i: int, mbit: float) -> None:
        """Limit what host i sends (egress of its eth0) with tbf; netem is absent on this kernel."""
        h = self.hosts[i - 1]
        _sh("ip", "netns", "exec", h.ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
            "rate", f"{mbit:g}mbit", "burst", str(shaper_burst(mbit)), "latency", "400ms")  # fmt: skip

    def police(self, i: int, mbit: float, burst_bytes: int = 4096) -> None:
        """A policer rather than a shaper: tbf whose bucket and queue hold ~3 packets, so what
        exceeds the rate is dropped, not queued, and TCP underdelivers (measured 0.54-0.58 x the
        rate at 100 mbit with 4 flows, 0.52-0.58 at 40 mbit), the way a token-bucket policer in a switch behaves."""
        h = self.hosts[i - 1]
        # A switch's policer meets wire-size frames. With segmentation offload on, this host hands the
        # qdisc 64 KB TCP super-packets that tbf cuts up and mostly drops at once, which made the
        # result swing with TCP's TSO sizing: 100 mbit gave 40-45 and 40 mbit 22-25 (ratio 0.54);
        # with it off 54-58 and 21-23 (0.41, the ratio of the rates), 2026-12-04, 4 runs each.
        _sh("ip", "netns", "exec", h.ns, "ethtool", "-K", "eth0", "tso", "off", "gso", "off")
        _sh("ip", "netns", "exec", h.ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
            "rate", f"{mbit:g}mbit", "burst", str(burst_bytes), "limit", str(burst_bytes))  # fmt: skip

    def shape_link(self, i: int, j: int, base_mbit: float, slow_mbit: float) -> None:
        """Slow only the link i<->j: htb on both ends, a u32 filter sends the peer's traffic to a slow class.

        Small packets (TCP ACKs, IP length < 128) get their own top-priority class: in one htb
        queue they would wait behind data and slow what the host *receives* from everyone else.
        """
        for src, dst in ((i, j), (j, i)):
            ns, peer = self.hosts[src - 1].ns, self.hosts[dst - 1].ip
            tc = ("ip", "netns", "exec", ns, "tc")
            _sh(*tc, "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10")
            _sh(*tc, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate", f"{base_mbit:g}mbit",
                "burst", str(shaper_burst(base_mbit)), "cburst", str(shaper_burst(base_mbit)))  # fmt: skip
            ack = base_mbit / 10  # ACKs of a full-rate stream need ~3 % of it; the data class borrows the rest
            for cls, rate, prio in (("1:5", ack, 0), ("1:10", base_mbit - ack, 1), ("1:20", slow_mbit, 1)):
                _sh(*tc, "class", "add", "dev", "eth0", "parent", "1:1", "classid", cls, "htb", "rate", f"{rate:g}mbit",
                    "ceil", f"{base_mbit if cls != '1:20' else slow_mbit:g}mbit", "prio", str(prio),
                    "burst", str(shaper_burst(rate)), "cburst", str(shaper_burst(rate)), "quantum", "1514")  # fmt: skip
            _sh(*tc, "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                "match", "u16", "0x0000", "0xff80", "at", "2", "flowid", "1:5")  # fmt: skip
            _sh(*tc, "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "2", "u32",
                "match", "ip", "dst", f"{peer}/32", "flowid", "1:20")  # fmt: skip

    def shape_all(self, mbit: float) -> None:
        for h in self.hosts:
            self.shape(h.index, mbit)

    def link_down(self, i: int) -> None:
        h = self.hosts[i - 1]
        _sh("ip", "neigh", "flush", "to", h.ip, check=False)  # cold ARP: fails fast and the same way every time
        _sh("ip", "-n", h.ns, "link", "set", "eth0", "down")

    def stop_sshd(self, i: int) -> None:
        """SIGSTOP the listener: the kernel still completes TCP handshakes, no banner ever comes."""
        self._signal(self.hosts[i - 1].sshd_pid, signal.SIGSTOP)
        self.stopped.add(i)

    def resume_sshd(self, i: int) -> None:
        """SIGCONT a listener stopped by stop_sshd: it answers again (backlogged handshakes included)."""
        self._signal(self.hosts[i - 1].sshd_pid, signal.SIGCONT)
        self.stopped.discard(i)

    # -- inventory

    def inventory(self, **extra: object) -> dict[str, object]:
        doc: dict[str, object] = {
            "ssh": {"user": "root", "key_file": str(self.key), "known_hosts": str(self.known_hosts)},
            "nodes": [{"name": h.name, "host": h.ip} for h in self.hosts],
        }
        doc.update(extra)
        return doc
