"""Rehearsal nodes: the rendered user data booting under systemd and cloud-init, one
systemd-nspawn container per node, on a private test network with the package mirror and the
instance metadata stand-in. A reusable fixture (issue 11; the Slurm work boots nodes with it):

    with Rehearsal(image).up() as r:                # bridge, mirror, IMDS, login key
        node = r.boot("node-1", user_data, hardware=...)   # gzip user data, as EC2 receives it
        r.wait_bootstrap(node)                       # cloud-init ran the bootstrap
        r.ssh(node, "cat /var/lib/gpuforge/bootstrap-status.json")
        r.inventory("cv-training")                   # what `gpuforge validate` reads

Per node: an overlay over the cached Debian root (tests/rehearsal/root.py), booted with
`systemd-nspawn --register=no --keep-unit -b` (systemd is PID 1), one veth into the rehearsal
bridge with a static address (systemd-networkd; EC2 would use DHCP), and a NoCloud seed holding
the user data and the login user's public key (EC2: IMDS user-data and public-keys). cloud-init
makes the host keys at first boot, as on EC2; the rehearsal reads them from the node's disk
into `known_hosts` (EC2: the console output) and SSH checks them strictly.

What the root is told so that it behaves like the Ubuntu AMI (written before first boot, in
/etc/cloud/cloud.cfg.d/90-gpuforge-rehearsal.cfg): default user `ubuntu` with passwordless sudo
and the `apt` sources rewritten from user data (Ubuntu's cloud.cfg; Debian's sets
preserve_sources_list), the NoCloud datasource. chrony may not set the host's clock from a
container: it runs with -x (no clock control) instead of being skipped by its ConditionCapability.

Names carry a per-process prefix (gr<pid>), the /24 has a blackhole route, nothing routes out;
`down()` removes everything it made, also after a failed `up()`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from gpuforge.bootstrap.versions import Versions, load_versions
from tests.rehearsal.imds import ADDRESS as IMDS_ADDRESS
from tests.rehearsal.imds import Imds, InstanceMetadata
from tests.rehearsal.mirror import MirrorServer, MirrorTree, SigningKey
from tests.rehearsal.root import RootImage, ensure_slurm_debs
from tests.support.ssm import Ssm

LOGIN_USER = "ubuntu"
# A container's /proc/sys is the host's kernel (read-only under nspawn; a node must never change
# the host), and this host has no Yama LSM at all. For kernel.yama.ptrace_scope only, this
# stand-in keeps the node's own value as the kernel and systemd-sysctl would: a runtime write
# lives until reboot (/run), at boot the last /etc/sysctl.d file naming the key wins (Ubuntu
# ships 10-ptrace.conf with 1). Every other key goes to the real sysctl.
YAMA_SYSCTL = r"""#!/usr/bin/python3
import glob, os, sys
KEY, RUNTIME = "kernel.yama.ptrace_scope", "/run/gpuforge-rehearsal-yama/ptrace_scope"
args = [a for a in sys.argv[1:] if a not in ("-q", "-n", "-w")]
if len(args) != 1 or not args[0].startswith(KEY):
    os.execv("/usr/sbin/sysctl", ["/usr/sbin/sysctl", *sys.argv[1:]])
def boot_value():
    value = "1"
    for f in sorted(glob.glob("/etc/sysctl.d/*.conf"), key=os.path.basename):
        for line in open(f):
            k, _, v = line.partition("=")
            if k.strip() == KEY:
                value = v.strip()
    return value
if "=" in args[0]:
    os.makedirs(os.path.dirname(RUNTIME), exist_ok=True)
    open(RUNTIME, "w").write(args[0].split("=", 1)[1].strip())
    sys.exit(0)
value = open(RUNTIME).read() if os.path.exists(RUNTIME) else boot_value()
print(value if "-n" in sys.argv else f"{KEY} = {value}")
"""
# A fresh Ubuntu instance runs apt-daily-upgrade/unattended-upgrades at boot, which holds the
# dpkg and apt locks while cloud-init runs user data (canonical/cloud-init#2908). The rehearsal's
# stand-in takes the same fcntl write locks apt takes (apt-pkg/contrib/fileutl.cc GetLock:
# F_SETLK, F_WRLCK) before cloud-final starts, and keeps them until the bootstrap's log says it
# is waiting for them (then 5 s more), or for the given seconds at most: deterministic on a slow
# machine, and a bootstrap that does not wait meets a held lock.
HOLD_LOCKS = """#!/usr/bin/python3
import fcntl, os, sys, time
locks = ["/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock"]
log = "/var/log/gpuforge/bootstrap.log"
start = os.path.getsize(log) if os.path.exists(log) else 0
fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o640) for p in locks]
r, w = os.pipe()
if os.fork():
    os.read(r, 1)  # the parent returns (Type=forking) once the child holds every lock
    sys.exit(0)
for fd in fds:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.write(w, b"x")
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    try:
        with open(log) as f:
            f.seek(start)
            if "waiting for /var/lib/dpkg/lock" in f.read():
                time.sleep(5)
                break
    except OSError:
        pass
    time.sleep(1)
"""
# Slurm's cgroup/v1 plugin (proctrack/cgroup, task/cgroup with ConstrainCores/Devices/RAMSpace)
# makes slurm/uid_N/job_N under cpuset, memory, devices and freezer. On this v1 host nspawn mounts
# those hierarchies read-only in the container (only name=systemd is the container's), so before
# slurmd starts this bed unit mounts each one again (CAP_SYS_ADMIN is in nspawn's default set),
# makes the node's own subtree under the container's cgroup (cpuset: with its parent's cpus and
# mems, which a new cpuset lacks) and binds it where slurmd looks, /sys/fs/cgroup/<controller>.
# Rehearsal.down() removes the subtrees. EC2 nodes (Ubuntu 24.04) boot cgroup v2, which systemd
# delegates itself; tests/SUBSTITUTIONS.md.
CGROUP_V1 = r"""#!/bin/sh
set -eu
me=$(cat /etc/hostname)
for c in cpuset memory devices freezer; do
  t=/run/gpuforge-rehearsal-cgroup/$c
  mkdir -p "$t"
  mountpoint -q "$t" || mount -t cgroup -o "$c" cgroup "$t"
  own=$(sed -n "s/^[0-9]*:$c:\(.*\)$/\1/p" /proc/1/cgroup)
  sub="$t${own%/}/@PREFIX@-$me"
  mkdir -p "$sub"
  if [ "$c" = cpuset ]; then cat "${sub%/*}/cpuset.cpus" >"$sub/cpuset.cpus"; cat "${sub%/*}/cpuset.mems" >"$sub/cpuset.mems"; fi
  mount --bind "$sub" "/sys/fs/cgroup/$c"
done
"""
STATUS = "var/lib/gpuforge/bootstrap-status.json"
CLOUD_CFG = {
    # Ubuntu's cloud.cfg (cloud-init config/cloud.cfg.tmpl, variant ubuntu): the default user.
    "system_info": {"default_user": {
        "name": LOGIN_USER, "lock_passwd": True, "gecos": "Ubuntu", "groups": ["adm", "sudo"],
        "sudo": ["ALL=(ALL) NOPASSWD:ALL"], "shell": "/bin/bash",
    }},
    "apt": {"preserve_sources_list": False},
    # The root has no en_US.UTF-8 to generate (no `locales`): cc_locale failed, and cloud-config.service
    # exited 1. C.UTF-8 is built into glibc; cloud-init applies it without locale-gen (debian.py).
    "locale": "C.UTF-8",
    "datasource_list": ["NoCloud", "None"],
    "network": {"config": "disabled"},  # the rehearsal's networkd file sets the address
}  # fmt: skip


def _sh(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=timeout)


@dataclass
class Node:
    name: str
    index: int
    ip: str
    instance_id: str
    dir: Path
    hardware: dict[str, Any]
    veth_host: str
    veth_node: str
    disks: list[str] = field(default_factory=list)  # loop devices bound into the node
    proc: subprocess.Popen[bytes] | None = None
    boots: int = 0

    @property
    def root(self) -> Path:
        return self.dir / "merged"

    def log(self) -> str:
        """The bootstrap log, read from the node's disk (root-only on the node)."""
        try:
            return (self.root / "var/log/gpuforge/bootstrap.log").read_text()
        except OSError:
            return ""

    def status(self) -> dict[str, Any] | None:
        try:
            doc: dict[str, Any] = json.loads((self.root / STATUS).read_text())
            return doc
        except (OSError, ValueError):
            return None


@dataclass
class Rehearsal:
    image: RootImage
    versions: Versions = field(default_factory=load_versions)
    prefix: str = field(default_factory=lambda: f"gr{os.getpid()}")
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gf-rehearsal-", dir="/var/tmp")))
    nodes: dict[str, Node] = field(default_factory=dict)
    mirror: MirrorServer | None = None
    tree: MirrorTree | None = None
    imds: Imds | None = None
    cuda_os: str = "ubuntu-22.04"  # the stacks' os: the CUDA repository path and driver branch the mirror serves
    slurm: bool = False  # serve a Slurm stack's packages (Debian's Slurm, pyxis, enroot) and an SSM stand-in
    ssm: Ssm | None = None
    _created: list[tuple[str, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        pid = os.getpid()
        # 10.<50-149>.<0-255>.0/24: apart from tests/validate/testbed.py's 10.150-249
        self.net = f"10.{50 + (pid >> 8) % 100}.{pid % 256}"
        self.bridge = f"{self.prefix}br"[:15]
        self.key = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"

    # -- lifecycle

    def up(self) -> Rehearsal:
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def __enter__(self) -> Rehearsal:
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.down()

    def _up(self) -> None:
        if f" {self.net}." in _sh("ip", "-o", "addr").stdout:
            raise RuntimeError(f"subnet {self.net}.0/24 already in use here")
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        self._created.append(("ip", "link", "del", self.bridge))
        _sh("ip", "addr", "add", f"{self.net}.254/24", "dev", self.bridge)
        _sh("ip", "addr", "add", f"{IMDS_ADDRESS}/32", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        _sh("ip", "route", "add", "blackhole", f"{self.net}.0/24", "metric", "4242")
        self._created.append(("ip", "route", "del", "blackhole", f"{self.net}.0/24", "metric", "4242"))
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rehearsal", "-f", str(self.key))
        self.known_hosts.write_text("")
        self.archive_key = SigningKey(self.workdir / "gpg-archive").create()
        self.vendor_key = SigningKey(self.workdir / "gpg-vendor").create()
        self.tree = MirrorTree(self.workdir / "mirror", self.versions, self.image, self.vendor_key,
                               archive_key=self.archive_key, cuda_os=self.cuda_os,
                               slurm_debs=ensure_slurm_debs(self.image) if self.slurm else None).build()  # fmt: skip
        self.mirror = MirrorServer(self.tree.root, f"{self.net}.254").start()
        self.imds = Imds(self.bridge).start()
        if self.slurm:
            self.ssm = Ssm(f"{self.net}.254").start()

    def down(self) -> None:
        keep = os.environ.get("GPUFORGE_REHEARSAL_LOGS")  # a directory: keep each node's logs there
        for node in list(self.nodes.values()):
            self._stop(node, timeout=30)
            if keep:
                self._save_logs(node, Path(keep) / node.name)
            _sh("umount", str(node.root), check=False)
        self._remove_cgroups()
        for server in (self.mirror, self.imds, self.ssm):
            if server is not None:
                server.stop()
        for cmd in reversed(self._created):
            _sh(*cmd, check=False)
        self._created.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- what callers use

    @property
    def pins(self) -> Versions:
        """The versions to render user data with: the manifest, with the rehearsal's signing-key
        fingerprint and stand-in tarball digests in place of the vendors' (tests/rehearsal/mirror.py)."""
        assert self.tree is not None and self.tree.pins is not None
        return self.tree.pins

    def mirror_entries(self, *, broken_driver: bool = False) -> list[str]:
        """`gpuforge:mirror` for a stack whose nodes install from this rehearsal's mirror."""
        assert self.tree is not None and self.mirror is not None
        return self.tree.entries(self.mirror.url, f"{self.net}.254:{self.mirror.port}",
                                 cuda="cuda-broken" if broken_driver else "cuda")  # fmt: skip

    def boot(self, name: str, user_data: bytes, *, hardware: dict[str, Any], tags: dict[str, str] | None = None,
             role: str | None = None) -> Node:  # fmt: skip
        """Create a node and boot it for the first time with `user_data` (bytes, as EC2 receives them).
        `role`: the instance profile's role in the SSM stand-in (IMDS hands out its credentials)."""
        index = len(self.nodes) + 1
        node = Node(name, index, f"{self.net}.{index}", f"i-0rehearsal{os.getpid():06x}{index:02d}",
                    self.workdir / f"n{index}", hardware,
                    f"{self.prefix}h{index}"[:15], f"{self.prefix}n{index}"[:15])  # fmt: skip
        for d in ("upper", "work", "merged", "seed", "hw"):
            (node.dir / d).mkdir(parents=True)
        _sh("mount", "-t", "overlay", "overlay", "-o",
            f"lowerdir={self.image.tree},upperdir={node.dir / 'upper'},workdir={node.dir / 'work'}", str(node.root))  # fmt: skip
        self.nodes[name] = node
        self._prepare(node, user_data)
        self._attach_disks(node)
        assert self.imds is not None
        creds = self.ssm.roles[role].imds_credentials() if role and self.ssm else {}
        self.imds.instances[node.ip] = InstanceMetadata(node.instance_id, tags or {"Name": name}, local_ipv4=node.ip,
                                                        role=role, credentials=creds)  # fmt: skip
        self.start(node)
        return node

    def start(self, node: Node) -> None:
        """Boot the node (again: a stop/start keeps its disk, like an EBS root)."""
        netns = f"{self.prefix}-n{node.index}"
        if not Path(f"/run/netns/{netns}").exists():
            # A named namespace handed to nspawn: its --network-interface wants udev, which this
            # host may not run. The namespace (and the veth in it) outlives a stop/start.
            _sh("ip", "netns", "add", netns)
            self._created.append(("ip", "netns", "del", netns))
            _sh("ip", "link", "add", node.veth_host, "type", "veth", "peer", "name", node.veth_node, "netns", netns)
            self._created.append(("ip", "link", "del", node.veth_host))
            _sh("ip", "link", "set", node.veth_host, "master", self.bridge, "up")
        with open(node.dir / f"console-{node.boots + 1}.log", "wb") as console:  # the child keeps its own fd
            node.proc = self._nspawn(node, netns, console)
        node.boots += 1

    def _nspawn(self, node: Node, netns: str, console: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            ["systemd-nspawn", "--register=no", "--keep-unit", "-b", "-q", "-D", str(node.root), "-M", node.name,
             # CAP_NET_ADMIN inside its own namespace only: networkd configures the node's address
             f"--network-namespace-path=/run/netns/{netns}", "--capability=CAP_NET_ADMIN",
             "--console=pipe", "--link-journal=no", "--timezone=off",
             f"--bind-ro={node.dir / 'hw'}:/run/gpuforge-rehearsal", *(f"--bind={d}" for d in node.disks),
             *(f"--bind={dev}:/dev/{dev.name}" for dev in sorted((node.dir / "dev").glob("*")))],
            stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def stop(self, node: Node, timeout: float = 90) -> None:
        self._stop(node, timeout)

    def wait_bootstrap(self, node: Node, run: int = 1, timeout: float = 1200) -> dict[str, Any]:
        """Wait (bounded) until bootstrap run `run` has finished on the node; return its status."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            doc = node.status()
            if doc and doc.get("run", 0) >= run and doc.get("state") in ("succeeded", "failed"):
                self._learn_host_key(node)
                return doc
            if node.proc is not None and node.proc.poll() is not None:
                raise RuntimeError(f"{node.name}: the container exited ({node.proc.returncode}); see {node.dir}/console-*.log")
            time.sleep(2)
        raise TimeoutError(f"{node.name}: bootstrap run {run} not finished after {timeout:.0f}s; status {node.status()}")

    def ssh(self, node: Node, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A non-login session as the login user, host key checked strictly (as validate connects)."""
        return subprocess.run(
            ["ssh", "-i", str(self.key), "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
             "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", f"{LOGIN_USER}@{node.ip}", command],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def inventory(self, profile: str, nodes: list[Node], instance_type: str | None = None) -> dict[str, Any]:
        """What `gpuforge validate` reads (the stack output's shape) for `nodes`."""
        return {
            "profile": profile,
            "ssh": {"user": LOGIN_USER, "key_file": str(self.key), "known_hosts": str(self.known_hosts), "port": 22},
            "nodes": [{"name": n.name, "host": n.ip, "instance_type": instance_type} for n in nodes],
        }

    def set_spot_notice(self, node: Node, action: str = "terminate") -> None:
        assert self.imds is not None
        self.imds.instances[node.ip].spot_action = {"action": action, "time": "2026-01-01T00:02:00Z"}

    # -- internals

    def _prepare(self, node: Node, user_data: bytes) -> None:
        root = node.root
        assert self.tree is not None
        (node.dir / "hw" / "hardware.json").write_text(json.dumps(node.hardware))
        seed = root / "var/lib/cloud/seed/nocloud"
        seed.mkdir(parents=True)
        (seed / "user-data").write_bytes(user_data)
        pub = Path(f"{self.key}.pub").read_text().strip()
        meta = {"instance-id": node.instance_id, "local-hostname": node.name, "public-keys": [pub]}
        (seed / "meta-data").write_text(yaml.safe_dump(meta))
        cfg = root / "etc/cloud/cloud.cfg.d/90-gpuforge-rehearsal.cfg"
        cfg.write_text("# gpuforge rehearsal: what the Ubuntu AMI's cloud.cfg says (see tests/rehearsal/nodes.py)\n"
                       + yaml.safe_dump(CLOUD_CFG))  # fmt: skip
        veth_node = node.veth_node
        net = root / "etc/systemd/network/10-rehearsal.network"
        net.parent.mkdir(parents=True, exist_ok=True)
        net.write_text(f"[Match]\nName={veth_node}\n\n[Network]\nAddress={node.ip}/24\n\n"
                       f"[Route]\nDestination={IMDS_ADDRESS}/32\n")  # fmt: skip
        wants = {
            "multi-user.target.wants/systemd-networkd.service": "systemd-networkd.service",
            "sockets.target.wants/systemd-networkd.socket": "systemd-networkd.socket",
            "network-online.target.wants/systemd-networkd-wait-online.service": "systemd-networkd-wait-online.service",
        }
        for link, unit in wants.items():
            path = root / "etc/systemd/system" / link
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_symlink():
                path.symlink_to(f"/lib/systemd/system/{unit}")
        dropin = root / "etc/systemd/system/chrony.service.d/90-gpuforge-rehearsal.conf"
        dropin.parent.mkdir(parents=True, exist_ok=True)
        dropin.write_text("# a container may not set the host's clock: run without clock control\n"
                          "[Unit]\nConditionCapability=\n")  # fmt: skip
        (root / "etc/default/chrony").write_text('DAEMON_OPTS="-F 1 -x"\n')
        # A cloud-init unit that fails (Type=oneshot, TimeoutSec=0) waits in stop-sigterm for its cgroup
        # to empty; under nspawn on this cgroup-v1 host systemd sometimes misses that notice and waits
        # forever, so cloud-final never ran (2 of 6 nodes in one afternoon). Bounded here.
        for unit in ("cloud-init-local", "cloud-init", "cloud-config", "cloud-final"):
            stop = root / f"etc/systemd/system/{unit}.service.d/90-gpuforge-rehearsal.conf"
            stop.parent.mkdir(parents=True, exist_ok=True)
            stop.write_text("# systemd in a container on a v1 host can miss the empty-cgroup notice (tests/rehearsal/nodes.py)\n"
                            "[Service]\nTimeoutStopSec=30\n")  # fmt: skip
        if hold := node.hardware.get("dpkg_lock_at_boot_s"):
            script = root / "usr/local/sbin/gpuforge-rehearsal-unattended-upgrades"
            script.write_text(HOLD_LOCKS)
            script.chmod(0o755)
            unit_file = root / "etc/systemd/system/gpuforge-rehearsal-unattended-upgrades.service"
            unit_file.write_text("[Unit]\nDescription=stand-in for unattended-upgrades at first boot (dpkg/apt locks)\n"
                            "Before=cloud-final.service\n\n"
                            f"[Service]\nType=forking\nExecStart=/{script.relative_to(root)} {hold}\n\n"
                            "[Install]\nWantedBy=multi-user.target\n")  # fmt: skip
            wants_link = root / "etc/systemd/system/multi-user.target.wants" / unit_file.name
            wants_link.parent.mkdir(parents=True, exist_ok=True)
            wants_link.symlink_to(f"/etc/systemd/system/{unit_file.name}")
        if node.hardware.get("slurm_cgroups"):
            script = root / "usr/local/sbin/gpuforge-rehearsal-cgroups"
            script.write_text(CGROUP_V1.replace("@PREFIX@", self.prefix))
            script.chmod(0o755)
            unit_file = root / "etc/systemd/system/gpuforge-rehearsal-cgroups.service"
            unit_file.write_text("[Unit]\nDescription=writable cgroup v1 subtrees for slurmd (tests/rehearsal/nodes.py)\n"
                                 "Before=slurmd.service cloud-final.service\n\n"
                                 f"[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/{script.relative_to(root)}\n\n"
                                 "[Install]\nWantedBy=multi-user.target\n")  # fmt: skip
            wants_link = root / "etc/systemd/system/multi-user.target.wants" / unit_file.name
            wants_link.parent.mkdir(parents=True, exist_ok=True)
            wants_link.symlink_to(f"/etc/systemd/system/{unit_file.name}")
        yama = root / "usr/local/sbin/sysctl"  # on every host: with Yama, the host's value is not the node's
        yama.write_text(YAMA_SYSCTL)
        yama.chmod(0o755)
        (root / "etc/sysctl.d/10-ptrace.conf").write_text("kernel.yama.ptrace_scope = 1\n")  # as Ubuntu's procps ships it
        # The archive's signing key, trusted as an Ubuntu AMI trusts Ubuntu's (ubuntu-keyring).
        keyring = root / "etc/apt/trusted.gpg.d/gpuforge-rehearsal-archive.gpg"
        keyring.write_bytes(self.archive_key.binary())
        if self.ssm is not None:
            # The bootstrap's ssm_get honours GPUFORGE_SSM_ENDPOINT (lib.sh.j2); EC2 reaches ssm.<region>.amazonaws.com.
            env = root / "etc/systemd/system.conf.d/90-gpuforge-rehearsal-ssm.conf"
            env.parent.mkdir(parents=True, exist_ok=True)
            env.write_text(f"[Manager]\nDefaultEnvironment=GPUFORGE_SSM_ENDPOINT={self.ssm.url}\n")
        # The GPUs' device files (c 195:N, as the NVIDIA driver makes them), for gres.conf's File=:
        # no driver loads in a container, so the rehearsal makes them and binds them in.
        for i in range(int(node.hardware.get("gpu_devices", 0))):
            dev = node.dir / "dev" / f"nvidia{i}"
            dev.parent.mkdir(exist_ok=True)
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, i))

    def _save_logs(self, node: Node, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        for rel in ("var/log/gpuforge/bootstrap.log", "var/log/cloud-init-output.log", "var/log/cloud-init.log", STATUS):
            src = node.root / rel
            if src.exists():
                shutil.copy(src, dest / src.name)
        for console in node.dir.glob("console-*.log"):
            shutil.copy(console, dest / console.name)

    def _attach_disks(self, node: Node) -> None:
        """Instance-store NVMe disks and EBS volumes as loop devices, named under /dev/disk/by-id
        as on a Nitro instance (there by udev's rules for the NVMe model and serial, here by a
        tmpfiles.d entry: a container has no udev). hardware: nvme_disks (count), ebs_volumes (ids)."""
        links = []
        names = [f"nvme-Amazon_EC2_NVMe_Instance_Storage_AWS{node.index:02d}{i:015d}"
                 for i in range(int(node.hardware.get("nvme_disks", 0)))]  # fmt: skip
        names += [f"nvme-Amazon_Elastic_Block_Store_{vol.replace('-', '')}" for vol in node.hardware.get("ebs_volumes", [])]
        for i, name in enumerate(names):
            backing = node.dir / f"disk{i}.img"
            with open(backing, "wb") as f:
                f.truncate(256 * 1024 * 1024)
            dev = _sh("losetup", "-f", "--show", str(backing)).stdout.strip()
            self._created.append(("losetup", "-d", dev))
            node.disks.append(dev)
            links.append(f"L+ /dev/disk/by-id/{name} - - - - {dev}")
        if links:
            conf = node.root / "etc/tmpfiles.d/gpuforge-rehearsal-disks.conf"
            conf.write_text("# gpuforge rehearsal: the instance's disks by id (tests/rehearsal/nodes.py)\n"
                            "d /dev/disk/by-id 0755 root root -\n" + "\n".join(links) + "\n")  # fmt: skip

    def _remove_cgroups(self) -> None:
        """The nodes' cgroup v1 subtrees (CGROUP_V1), deepest first, once their processes are gone."""
        for c in ("cpuset", "memory", "devices", "freezer"):
            for top in Path(f"/sys/fs/cgroup/{c}").glob(f"**/{self.prefix}-*"):
                for d in sorted((p for p in top.glob("**/") if p.is_dir()), key=lambda p: -len(p.parts)):
                    try:
                        d.rmdir()
                    except OSError:
                        pass

    def _learn_host_key(self, node: Node) -> None:
        pub = (node.root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
        lines = [ln for ln in self.known_hosts.read_text().splitlines() if not ln.startswith(f"{node.ip} ")]
        self.known_hosts.write_text("\n".join([*lines, f"{node.ip} {pub[0]} {pub[1]}"]) + "\n")
        end = time.monotonic() + 60
        while time.monotonic() < end:
            with socket.socket() as s:
                s.settimeout(2)
                if s.connect_ex((node.ip, 22)) == 0:
                    break
            time.sleep(1)
        # sshd answers before systemd-user-sessions removes /run/nologin ("System is booting up"):
        # a login is what the tests and validate need (bounded; seen once on a loaded machine).
        end = time.monotonic() + 180
        while time.monotonic() < end and self.ssh(node, "true", timeout=30).returncode != 0:
            time.sleep(3)

    def _stop(self, node: Node, timeout: float) -> None:
        proc = node.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # nspawn -b: asks systemd in the container to power off
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        node.proc = None
