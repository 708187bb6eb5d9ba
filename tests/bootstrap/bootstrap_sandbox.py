"""Run the rendered bootstrap for real, in a temp root, with stand-in system commands.

The sandbox writes the user data's `write_files` under a temp root (as cloud-init would), builds
a PATH holding only the stand-ins (tests/bootstrap/fakes/fake, under each command's name) and an
allowlist of harmless real tools, and runs the phase runner with GPUFORGE_ROOT pointing at the
root. A command the phases call that is neither faked nor allowlisted is "not found", so nothing
can touch the host. Downloads come from fixture tarballs whose digests the test pins.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuforge.bootstrap.render import RenderedBootstrap, render_user_data
from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.bootstrap.versions import Versions, load_versions
from gpuforge.core.config import StackConfig

FAKE = Path(__file__).resolve().parent / "fakes" / "fake"
FAKED = (
    "apt-get", "apt-mark", "dpkg-query", "nvidia-smi", "nv-fabricmanager", "systemctl", "hostnamectl", "modprobe",
    "mdadm", "mkfs.ext4", "blkid", "findmnt", "mount", "mountpoint", "gpg", "curl", "docker", "nvidia-ctk",
    "make", "dpkg", "ldconfig", "update-initramfs", "sysctl", "ip",
)  # fmt: skip
REAL = (
    "bash", "sh", "tar", "gzip", "sha256sum", "sha512sum", "md5sum", "python3", "flock", "sleep", "seq", "readlink",
    "sort", "sed", "grep", "cut", "tr", "paste", "cat", "mkdir", "rm", "mv", "cp", "chmod", "touch", "date",
    "dirname", "basename", "mktemp", "cmp", "env", "ls", "head", "tail", "wc", "uniq", "timeout", "nproc", "uname", "awk",
    "ln", "realpath",
)  # fmt: skip
SECRETS = {"FAKE_NGC_KEY": "nvapi-TEST-SECRET-0123456789", "FAKE_AWS_SECRET": "aws-secret-TEST-9876543210"}


def _targz(members: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def fixture_downloads(v: Versions) -> dict[str, bytes]:
    """Tarballs and keys the phases download, as small stand-ins that record what runs."""
    rec = 'printf "%s\\t%s\\n" "$(basename "$0")" "$*" >>"$FAKE_STATE/calls.log"\n'
    # As the EFA installer is documented to lay out its files: fi_info (and Open MPI) under /opt/amazon,
    # on PATH only through /etc/profile.d/efa.sh, which a non-login shell never reads.
    efa_script = (
        "#!/bin/bash\nset -e\n" + rec + 'mkdir -p "$GPUFORGE_ROOT/opt/amazon/openmpi/bin" "$GPUFORGE_ROOT/opt/amazon/efa/bin"\n'
        'cp "$FAKE_SCRIPT" "$GPUFORGE_ROOT/opt/amazon/efa/bin/fi_info"\n'
        'mkdir -p "$GPUFORGE_ROOT/etc/profile.d"\n'
        "echo 'PATH=$PATH:/opt/amazon/efa/bin:/opt/amazon/openmpi/bin' >\"$GPUFORGE_ROOT/etc/profile.d/efa.sh\"\n"
        f'echo "# EFA installer version: {v.efa_installer.version}" >"$GPUFORGE_ROOT/opt/amazon/efa_installed_packages"\n'
    )
    # aws-ofi-nccl's configure stops without hwloc.h (configure.ac CHECK_PKG_HWLOC's action-if-not-found,
    # aws/aws-ofi-nccl configure.ac @ 01f16dd350c8529b0a3674a9309882e3c7f23ef7, m4/check_pkg_hwloc.m4 @ 561c1b6e).
    configure = (
        "#!/bin/bash\nset -e\n" + rec + 'for a; do case "$a" in --prefix=*) echo "${a#--prefix=}" >.prefix;; esac; done\n'
        'echo "checking for hwloc.h... $([ -f "$GPUFORGE_ROOT/usr/include/hwloc.h" ] && echo yes || echo no)"\n'
        '[ -f "$GPUFORGE_ROOT/usr/include/hwloc.h" ] || { echo "configure: error: Could not find the hwloc library. '
        'Use --with-hwloc to provide the path to non-standard hwloc installation." >&2; exit 1; }\n'
    )
    ofi_dir = f"aws-ofi-nccl-{v.aws_ofi_nccl.version}"
    tests_dir = f"nccl-tests-{v.nccl_tests.version.lstrip('v')}"
    return {
        Path(v.efa_installer.resolved_url).name: _targz({"aws-efa-installer/efa_installer.sh": efa_script}),
        Path(v.aws_ofi_nccl.resolved_url).name: _targz({f"{ofi_dir}/configure": configure}),
        Path(v.nccl_tests.resolved_url).name: _targz({f"{tests_dir}/src/common.h": "/* fake */\n"}),
        # The fake gpg reports a key file's content as its fingerprint.
        v.cuda_repo.key_file: v.cuda_repo.key_fingerprint.encode(),
        **cloudwatch_agent_downloads(v),
        Path(v.nvidia_container_toolkit.key_url).name: v.nvidia_container_toolkit.key_fingerprint.encode(),
    }


def cloudwatch_agent_downloads(v: Versions, signed_by: str | None = None) -> dict[str, bytes]:
    """The agent .deb stand-in ("<package> <version>", read by the fake dpkg), its signing key
    (the fake gpg reads a key's content as its fingerprint) and a signature over the .deb."""
    cwa = v.cloudwatch_agent
    deb = f"amazon-cloudwatch-agent {cwa.version}\n".encode()
    sig = f"{signed_by or cwa.key_fingerprint} {hashlib.sha256(deb).hexdigest()}".encode()
    return {
        Path(cwa.resolved_url).name: deb,
        Path(cwa.signature_url).name: sig,
        Path(cwa.key_url).name: cwa.key_fingerprint.encode(),
    }


def pinned_to_fixtures(v: Versions, downloads: dict[str, bytes]) -> Versions:
    """The shipped manifest, with download digests replaced by the fixtures' (the digest check runs for real)."""

    def digest(url: str, algo: str) -> str:
        return hashlib.new(algo, downloads[Path(url).name]).hexdigest()

    return v.model_copy(
        update={
            "efa_installer": v.efa_installer.model_copy(update={"sha256": digest(v.efa_installer.resolved_url, "sha256")}),
            "aws_ofi_nccl": v.aws_ofi_nccl.model_copy(update={"sha512": digest(v.aws_ofi_nccl.resolved_url, "sha512")}),
            "nccl_tests": v.nccl_tests.model_copy(update={"sha256": digest(v.nccl_tests.resolved_url, "sha256")}),
        }
    )


@dataclass
class Sandbox:
    tmp: Path
    cfg: StackConfig
    node_name: str | None
    render_kwargs: dict[str, Any] = field(default_factory=dict)
    env_overrides: dict[str, str] = field(default_factory=dict)
    downloads: dict[str, bytes] | None = None
    head: bool = False  # the Slurm head's user data (bootstrap/slurm_head.py) instead of a GPU node's

    def __post_init__(self) -> None:
        self.root = self.tmp / "root"
        self.state = self.tmp / "fake-state"
        self.bin = self.tmp / "bin"
        self.dl = self.tmp / "downloads"
        base = load_versions()
        downloads = self.downloads if self.downloads is not None else fixture_downloads(base)
        self.versions = pinned_to_fixtures(base, fixture_downloads(base))
        # The gpuforge phase installs real wheels with a real pip, which the fakes cannot serve:
        # tests/bootstrap/test_node_install.py runs it on its own (tests/SUBSTITUTIONS.md).
        kwargs = {"gpuforge_install": False, **self.render_kwargs}
        self.rendered: RenderedBootstrap = (
            render_head_user_data(self.cfg) if self.head
            else render_user_data(self.cfg, self.node_name, versions=self.versions, **kwargs)
        )  # fmt: skip
        for d in (self.root, self.state, self.bin, self.dl):
            d.mkdir(parents=True, exist_ok=True)
        for name, data in downloads.items():
            (self.dl / name).write_bytes(data)
        for name in FAKED:
            (self.bin / name).symlink_to(FAKE)
        for name in REAL:
            real = shutil.which(name)
            assert real, f"sandbox needs {name} on this machine"
            (self.bin / name).symlink_to(real)
        self._install_user_data()
        self._make_devices()

    def _install_user_data(self) -> None:
        # What cloud-init's write_files does, from the user data itself (not from .files).
        doc = yaml.safe_load(self.rendered.files["user-data.yaml"])
        for entry in doc["write_files"]:
            path = self.root / entry["path"].lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(entry["content"])
            path.chmod(int(entry["permissions"], 8))
        self.runcmd: list[list[str]] = doc["runcmd"]
        (self.root / "etc").mkdir(exist_ok=True)
        (self.root / "etc/fstab").write_text("LABEL=cloudimg-rootfs / ext4 discard,errors=remount-ro 0 1\n")
        (self.root / "etc/hosts").write_text("127.0.0.1 localhost\n")

    def _make_devices(self) -> None:
        byid = self.root / "dev/disk/by-id"
        byid.mkdir(parents=True)
        dev = self.root / "dev"

        def disk(name: str, *links: str) -> None:
            (dev / name).touch()
            for link in links:
                (byid / link).symlink_to(f"../../{name}")

        disk("nvme0n1", "nvme-Amazon_Elastic_Block_Store_vol0root00000000000")
        (dev / "nvme0n1p1").touch()
        (byid / "nvme-Amazon_Elastic_Block_Store_vol0root00000000000-part1").symlink_to("../../nvme0n1p1")
        plan = self.rendered.plan
        n_store = int(self.env_overrides.get("FAKE_NVME", plan.nvme_count if plan else self.cfg.instance.nvme_count))
        for i in range(n_store):
            disk(f"nvme{i + 1}n1", f"nvme-Amazon_EC2_NVMe_Instance_Storage_AWS{i:016X}")
        if plan is not None and plan.data_volume is not None and self.env_overrides.get("FAKE_NO_DATA_VOLUME") != "1":
            disk(f"nvme{n_store + 1}n1", "nvme-Amazon_Elastic_Block_Store_vol0data1234567890ab")
        # The primary interface as the kernel shows it at first boot: EC2's default MTU 9001
        # (the fake's IMDS meta-data/mac answers this MAC), and docker's bridge beside it.
        for ifname, mac, mtu in (("ens5", "0a:1b:2c:3d:4e:5f", 9001), ("docker0", "02:42:ac:11:00:01", 1500)):
            net = self.root / "sys/class/net" / ifname
            net.mkdir(parents=True)
            (net / "address").write_text(mac + "\n")
            (net / "mtu").write_text(f"{mtu}\n")

    def env(self) -> dict[str, str]:
        env = {
            "PATH": str(self.bin),
            "HOME": str(self.tmp),
            "LANG": "C",
            "GPUFORGE_ROOT": str(self.root),
            "GPUFORGE_POLL_S": "0",
            "FAKE_STATE": str(self.state),
            "FAKE_SCRIPT": str(FAKE),
            "FAKE_DOWNLOADS": str(self.dl),
            "FAKE_GPU_NAME": self.rendered.plan.gpu_name if self.rendered.plan else "",
            "FAKE_GPU_COUNT": str(self.cfg.instance.gpu_count),
            "FAKE_EFA_DEVICES": str(self.cfg.instance.efa_interfaces),
            "FAKE_NAME_TAG": "tagged-node-7",
            **SECRETS,
        }
        env.update(self.env_overrides)
        return env

    def run(self, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.root / c.lstrip("/")) for c in self.runcmd[0]]
        self.calls_before = len(self.calls())
        return subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=timeout, check=False)

    def run_phase(self, name: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """One phase script as the runner starts it (GPUFORGE_PHASE set), without the runner."""
        (self.root / "var/lib/gpuforge").mkdir(parents=True, exist_ok=True)
        (self.root / "var/lib/gpuforge/last-error").unlink(missing_ok=True)
        (self.root / "var/lib/gpuforge/changed").unlink(missing_ok=True)
        script = self.root / "opt/gpuforge/phases" / f"{name}.sh"
        self.calls_before = len(self.calls())
        return subprocess.run(["bash", str(script)], env={**self.env(), "GPUFORGE_PHASE": name},
                              capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip

    def changed(self) -> bool:
        """Whether the last phase run said it changed the node."""
        return (self.root / "var/lib/gpuforge/changed").exists()

    def raw_calls(self) -> list[list[str]]:
        log = self.state / "calls.log"
        if not log.exists():
            return []
        return [line.split("\t") for line in log.read_text().splitlines()]

    def calls(self) -> list[list[str]]:
        """Calls as the tests compare them: apt-get without its leading `-o KEY=VALUE` options."""
        out = []
        for call in self.raw_calls():
            c = call
            while c[0] == "apt-get" and len(c) > 2 and c[1] == "-o":
                c = [c[0], *c[3:]]
            out.append(c)
        return out

    def last_run_calls(self) -> list[list[str]]:
        return self.calls()[self.calls_before :]

    def status(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((self.root / "var/lib/gpuforge/bootstrap-status.json").read_text())
        return doc

    def log(self) -> str:
        return (self.root / "var/log/gpuforge/bootstrap.log").read_text()


def installs(calls: list[list[str]]) -> list[str]:
    """Package specs passed to `apt-get install`, in order."""
    return [a for c in calls if c[:2] == ["apt-get", "install"] for a in c[2:] if not a.startswith("-")]
