"""The root file system rehearsal nodes boot: Debian bookworm from the Debian registry, built with
mmdebstrap and cached as a tarball keyed by its package lists (about 4 minutes on a loaded
2-core machine; later runs only extract it).

A Debian root stands in for the Ubuntu AMI: it carries what an Ubuntu cloud image already has
(systemd, cloud-init, openssh-server, curl, gnupg, python3, chrony, mdadm, nvme-cli, pciutils),
and nothing the bootstrap installs. The real Debian packages that the bootstrap and the EFA
installer install from the Ubuntu archive (build-essential, iperf3, libhwloc-dev, the EFA
installer's dependencies) are downloaded with their dependencies next to the tarball and served
by the rehearsal's package mirror, so the node installs them with apt, from the mirror, as on EC2.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"
REGISTRY = "http://deb.debian.org/debian"
# What the Ubuntu cloud image ships (and the rehearsal needs to boot: systemd, dbus, cloud-init,
# sshd). e2fsprogs and initramfs-tools are two: rehearsals without them died in the scratch
# phase (mkfs.ext4) and in the driver phase (update-initramfs after blacklisting nouveau).
ROOT_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "cloud-init", "openssh-server", "sudo", "curl", "ca-certificates",
    "python3", "gnupg", "iproute2", "chrony", "mdadm", "nvme-cli", "pciutils", "kmod", "netbase", "iputils-ping",
    "less", "e2fsprogs", "procps", "xz-utils", "bzip2", "lsb-release", "psmisc", "initramfs-tools",
)  # fmt: skip
# Installed by the node from the mirror: bootstrap/plan.py BASE_PACKAGES that the image lacks,
# the tools phase's iperf3, aws-ofi-nccl's hwloc headers, and the EFA installer's apt dependencies
# (efa_installer.sh install_dependencies(): pciutils environment-modules tcl libnl-3-dev libnl-route-3-dev),
# and python3-venv for the gpuforge phase (Debian's python3, like Ubuntu's, has no ensurepip without it).
MIRROR_PACKAGES = (
    "build-essential", "iperf3", "libhwloc-dev", "environment-modules", "tcl", "libnl-3-200", "libnl-3-dev",
    "libnl-route-3-200", "libnl-route-3-dev", "python3-venv",
)  # fmt: skip
RECIPE = 1  # bump when the build steps below change
# A Slurm stack's head and GPU nodes (gpuforge:scheduler slurm) also install, from the archive:
# munge and the Slurm daemons (bootstrap/templates/phases/slurm.sh.j2, slurm-accounting.sh.j2:
# slurmdbd and the embedded MariaDB), and the pyxis phase's build and Enroot dependencies. Debian
# 12's Slurm is 22.05.8 (bookworm-security: 22.05.8-4+deb12u3), not Ubuntu 24.04's 23.11.4
# (tests/SUBSTITUTIONS.md). Kept apart from the root's key: adding them does not rebuild the root.
SLURM_PACKAGES = (
    "munge", "slurmctld", "slurmd", "slurm-client", "slurmdbd", "mariadb-server", "libslurm-dev", "gcc", "make",
    "jq", "squashfs-tools", "parallel", "fuse-overlayfs", "pigz", "squashfuse", "libpmix-dev",
)  # fmt: skip
SECURITY_REGISTRY = "http://deb.debian.org/debian-security"


def cache_dir() -> Path:
    return Path(os.environ.get("GPUFORGE_REHEARSAL_CACHE", "/var/cache/gpuforge-rehearsal"))


def root_key() -> str:
    text = "\n".join([str(RECIPE), SUITE, REGISTRY, " ".join(ROOT_PACKAGES), " ".join(MIRROR_PACKAGES)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RootImage:
    tree: Path  # the extracted root, used read-only as the lower layer of every node
    debs: Path  # real Debian packages for the mirror's archive

    @property
    def kernel_release(self) -> str:
        return os.uname().release  # a container runs the host's kernel


def ensure_root(timeout_s: float = 1500) -> RootImage:
    """The cached root for the current package lists, built first when missing."""
    base = cache_dir() / root_key()
    tree, debs, tar = base / "tree", base / "debs", base / "root.tar"
    if (base / "ready").exists():
        return RootImage(tree, debs)
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / f"{root_key()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent runs (other helpers, CI shards) build it once
        if (base / "ready").exists():
            return RootImage(tree, debs)
        _build(base, tree, debs, tar, timeout_s)
    return RootImage(tree, debs)


def _build(base: Path, tree: Path, debs: Path, tar: Path, timeout_s: float) -> None:
    shutil.rmtree(base, ignore_errors=True)
    debs.mkdir(parents=True)
    hook = (
        f'chroot "$1" apt-get install --download-only -y -q {" ".join(MIRROR_PACKAGES)} && '
        f'cp "$1"/var/cache/apt/archives/*.deb {debs}/ && '
        # every node makes its own host keys at first boot (cloud-init cc_ssh), as on EC2
        'rm -f "$1"/etc/ssh/ssh_host_* && '
        # the node knows no archive but the mirror that its user data names
        'rm -f "$1"/etc/apt/sources.list "$1"/etc/apt/sources.list.d/*'
    )
    built = subprocess.run(
        ["mmdebstrap", "--variant=apt", f"--include={','.join(ROOT_PACKAGES)}", f"--customize-hook={hook}",
         SUITE, str(tar), REGISTRY],
        check=False, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    if built.returncode != 0:
        tail = "\n".join((built.stderr or built.stdout).strip().splitlines()[-8:])
        raise RuntimeError(f"mmdebstrap could not build the rehearsal root from {REGISTRY} (exit {built.returncode}):\n{tail}")
    tree.mkdir()
    subprocess.run(["tar", "-xpf", str(tar), "-C", str(tree), "--numeric-owner"], check=True, timeout=600)
    (base / "ready").write_text(root_key() + "\n")


def ensure_slurm_debs(image: RootImage, timeout_s: float = 900) -> Path:
    """Debian's Slurm, munge, MariaDB and the pyxis phase's packages, with every dependency the
    root lacks, downloaded once next to the root (apt-get on this host, reading the root's dpkg
    status and keyring; bookworm with its security updates, as a Debian 12 instance sees them)."""
    key = hashlib.sha256(" ".join([SECURITY_REGISTRY, *SLURM_PACKAGES]).encode()).hexdigest()[:12]
    out = image.debs.parent / f"slurm-debs-{key}"
    if (out / "ready").exists():
        return out
    with open(image.debs.parent / f"slurm-debs-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "ready").exists():
            return out
        shutil.rmtree(out, ignore_errors=True)
        work = image.debs.parent / f"slurm-debs-{key}.work"
        shutil.rmtree(work, ignore_errors=True)
        (work / "lists" / "partial").mkdir(parents=True)
        (out / "partial").mkdir(parents=True)
        keyring = image.tree / "usr/share/keyrings/debian-archive-keyring.gpg"
        (work / "sources.list").write_text(
            f"deb [signed-by={keyring}] {REGISTRY} {SUITE} main\n"
            f"deb [signed-by={keyring}] {SECURITY_REGISTRY} {SUITE}-security main\n"
        )
        opts = [
            "-o", f"Dir::State::status={image.tree / 'var/lib/dpkg/status'}", "-o", f"Dir::State::Lists={work / 'lists'}",
            "-o", f"Dir::State::extended_states={work / 'extended_states'}", "-o", f"Dir::Cache={work}",
            "-o", f"Dir::Cache::Archives={out}", "-o", f"Dir::Etc::SourceList={work / 'sources.list'}",
            "-o", "Dir::Etc::SourceParts=/nonexistent", "-o", "Dir::Etc::Preferences=/nonexistent",
            "-o", "Dir::Etc::PreferencesParts=/nonexistent", "-o", "Debug::NoLocking=1", "-o", "APT::Architecture=amd64",
        ]  # fmt: skip
        for args in (["update"], ["install", "--download-only", "--no-install-recommends", "-y", *SLURM_PACKAGES]):
            done = subprocess.run(["apt-get", "-q", *opts, *args], check=False, capture_output=True, text=True, timeout=timeout_s)
            if done.returncode != 0:
                tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
                raise RuntimeError(f"apt-get {args[0]} for the Slurm packages failed (exit {done.returncode}):\n{tail}")
        shutil.rmtree(out / "partial", ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        (out / "ready").write_text(key + "\n")
    return out


def missing_tools() -> list[str]:
    return [t for t in ("mmdebstrap", "systemd-nspawn", "dpkg-deb", "apt-ftparchive", "gpg", "ip") if not shutil.which(t)]


def unavailable() -> str | None:
    """Why a rehearsal cannot run on this machine (a test module skips with it), or None."""
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn, overlay mounts, loop devices, network namespaces)"
    if missing := missing_tools():
        return f"missing tools: {', '.join(missing)} (scripts/setup.sh --with-test-hosts installs them)"
    return None
