"""First-boot findings of issue 11, each against the real counterpart where it runs here: real
bash/sh/dash for what a shell does with the files, real curl against a server that never
answers, real mode bits for a non-root reader, and docker's env-file rule ported from its source."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.bootstrap.ncclenv import env_file, nccl_env, profile_script
from gpuforge.bootstrap.versions import load_versions
from gpuforge.core.config import StackConfig
from tests.bootstrap.bootstrap_sandbox import Sandbox, installs

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (setpriv / unshare)")


def docker_env_file(text: str) -> dict[str, str]:
    """docker/cli opts/file.go parseKeyValueFile @ 06f64c00f7679c4881e891db2c0ccd7d3694f136, ported:
    leading whitespace trimmed, '#' lines skipped, split at the first '=', key must hold no
    whitespace, the value passed through untouched (quotes included)."""
    out: dict[str, str] = {}
    for raw in text.removeprefix("\ufeff").split("\n"):
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.lstrip(" \t")
        if any(c in key for c in " \t") or not key:
            raise ValueError(f"poorly formatted environment: variable '{key}' contains whitespaces")
        if sep:
            out[key] = value
        elif key in os.environ:  # a bare name is passed through from the caller's environment
            out[key] = os.environ[key]
    return out


def test_docker_env_file_port_matches_docker_on_its_own_examples() -> None:
    # The parser above is the rule docker applies; these are the cases its source spells out.
    assert docker_env_file('  A="quoted"\n# c\nB=x y \n') == {"A": '"quoted"', "B": "x y "}
    with pytest.raises(ValueError):
        docker_env_file("NCCL NET=x\n")


@pytest.fixture(scope="module")
def efa_run(stack_cfg: dict[str, StackConfig], tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    """One bootstrap run of an EFA node (cv-training), shared by the tests that read its result."""
    # Ubuntu's default ptrace_scope (/etc/sysctl.d/10-ptrace.conf), as the kernel shows it.
    sb = Sandbox(tmp_path_factory.mktemp("efa"), stack_cfg["cv-training"], "n1",
                 env_overrides={"FAKE_SYSCTL_kernel_yama_ptrace_scope": "1"})  # fmt: skip
    assert not (sb.bin / "fi_info").exists(), "no fi_info on PATH, as under cloud-init"
    r = sb.run()
    assert r.returncode == 0, sb.log()[-3000:]
    return sb


def test_nccl_env_reads_the_same_in_docker_and_in_sh_and_bash(efa_run: Sandbox, tmp_path: Path) -> None:
    env = nccl_env(load_versions(), gpudirect_rdma=efa_run.cfg.instance.gpudirect_rdma)
    assert env["NCCL_NET"] == "AWS Libfabric" and "LD_LIBRARY_PATH" not in env
    assert env_file(env) == (efa_run.root / "etc/gpuforge/nccl.env").read_text().rstrip("\n")
    assert profile_script(env) == (efa_run.root / "etc/profile.d/gpuforge-nccl.sh").read_text().rstrip("\n")
    # docker --env-file: exactly the list, the plugin name with its space, no host LD_LIBRARY_PATH.
    assert docker_env_file((efa_run.root / "etc/gpuforge/nccl.env").read_text()) == env
    # A command named Libfabric on PATH records whether sourcing ran it (it did, before the fix).
    trap = tmp_path / "bin" / "Libfabric"
    trap.parent.mkdir()
    trap.write_text(f"#!/bin/sh\ntouch {tmp_path}/ran-Libfabric\n")
    trap.chmod(0o755)
    profile = efa_run.root / "etc/profile.d/gpuforge-nccl.sh"
    for shell in ("sh", "dash", "bash"):
        real = shutil.which(shell)
        assert real, shell
        out = subprocess.run(
            [real, "-c", f". {profile} && env"],
            env={"PATH": f"{trap.parent}:/usr/bin:/bin", "LD_LIBRARY_PATH": "/image/own/lib"},
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        got = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        assert {k: got.get(k) for k in env} == env, shell
        assert got["LD_LIBRARY_PATH"] == "/image/own/lib", "the caller's library path is left alone"
    assert not (tmp_path / "ran-Libfabric").exists()


def test_efa_phase_works_without_login_shell_path(efa_run: Sandbox) -> None:
    """fi_info exists only under /opt/amazon/efa/bin (the sandbox has no fi_info on PATH, as
    cloud-init has not): the phase finds it there and links it where `ssh node cmd` looks."""
    sb = efa_run
    link = sb.root / "usr/local/bin/fi_info"
    assert link.is_symlink() and not os.readlink(link).startswith("/"), "relative: valid on the node and here"
    assert link.resolve() == (sb.root / "opt/amazon/efa/bin/fi_info").resolve()
    for perf in ("all_reduce_perf", "all_gather_perf"):
        assert (sb.root / "usr/local/bin" / perf).resolve() == (sb.root / "opt/nccl-tests/bin" / perf).resolve()
    ld = (sb.root / "etc/ld.so.conf.d/gpuforge-efa.conf").read_text().split()
    assert ld == ["/opt/aws-ofi-nccl/lib", "/opt/amazon/efa/lib", "/opt/amazon/openmpi/lib"]
    assert any(c[0] == "ldconfig" for c in sb.calls())
    assert sb.status()["versions"]["observed"]["efa_devices"] == str(sb.cfg.instance.efa_interfaces)
    # hwloc headers are installed before aws-ofi-nccl's configure, which refuses without them.
    names = [c[0] for c in sb.calls()]
    assert "libhwloc-dev" in installs(sb.calls())
    hwloc_at = next(i for i, c in enumerate(sb.calls()) if c[:2] == ["apt-get", "install"] and "libhwloc-dev" in c)
    assert hwloc_at < names.index("configure")
    assert sb.run().returncode == 0
    assert not [c for c in sb.last_run_calls() if c[0] in ("ldconfig", "configure")], "a rerun changes nothing"


def test_ofi_configure_failure_is_reported_by_its_own_words(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    """die inside the configure subshell names the reason; the parent's ERR trap (set -E) must not
    overwrite it with "exit 1 from: ( cd ... )"."""
    sb = Sandbox(tmp_path, stack_cfg["cv-training"], "n1")
    # hwloc.h missing although the package is "installed" (a broken -dev package, say).
    (sb.state / "dpkg").mkdir(parents=True, exist_ok=True)
    (sb.state / "dpkg" / "libhwloc-dev").write_text("2.7.0-2\n")
    assert sb.run().returncode != 0
    err = sb.status()["error"]
    assert err["phase"] == "efa"
    assert err["message"].startswith("aws-ofi-nccl 1.9.1-aws: configure failed: configure: error: Could not find the hwloc")


def _lib(tmp: Path) -> Path:
    sb_lib = tmp / "opt/gpuforge/lib.sh"
    sb_lib.parent.mkdir(parents=True)
    from gpuforge.bootstrap.render import _env

    sb_lib.write_text(_env().get_template("lib.sh.j2").render())
    (tmp / "var/lib/gpuforge").mkdir(parents=True)
    return sb_lib


@pytest.mark.parametrize(
    "body",
    [
        '( die "the specific reason" )',
        '( cd / && die "the specific reason" )\necho unreachable',
        'x=$(die "the specific reason")',
    ],
)
def test_a_subshell_die_is_not_overwritten_by_the_parent_trap(body: str, tmp_path: Path) -> None:
    lib = _lib(tmp_path)
    script = f". {lib}\n{body}\n"
    r = subprocess.run(
        ["bash", "-c", script], env={"PATH": os.environ["PATH"], "GPUFORGE_ROOT": str(tmp_path)},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert r.returncode == 1 and "unreachable" not in r.stdout
    assert (tmp_path / "var/lib/gpuforge/last-error").read_text() == "the specific reason\n"


@ROOT_ONLY
def test_imds_that_never_answers_fails_the_call_instead_of_hanging(tmp_path: Path) -> None:
    """In a private network namespace 169.254.169.254 is a local address whose server accepts
    and never answers, like an IMDS hop limit gone wrong or a wedged proxy. Real curl."""
    lib = _lib(tmp_path)
    server = (
        "import socket,time\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('169.254.169.254', 80)); s.listen(8); conns=[]\n"
        "while True:\n    c,_=s.accept(); conns.append(c)\n"
    )
    (tmp_path / "server.py").write_text(server)
    script = (
        "set -u; ip link set lo up && ip addr add 169.254.169.254/32 dev lo\n"
        f"python3 {tmp_path}/server.py & srv=$!\n"
        "for _ in $(seq 50); do (exec 3<>/dev/tcp/169.254.169.254/80) 2>/dev/null && break; sleep 0.1; done\n"
        f". {lib}; trap - ERR; set +e\n"
        "imds meta-data/spot/instance-action; echo \"rc=$?\"\n"
        "kill $srv\n"
    )
    try:
        r = subprocess.run(
            ["unshare", "--net", "bash", "-c", script], env={"PATH": os.environ["PATH"], "GPUFORGE_ROOT": str(tmp_path)},
            capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("imds() hung on an IMDS that accepts and never answers (no curl --max-time)")
    assert "rc=28" in r.stdout, r.stdout + r.stderr  # curl: operation timed out


@pytest.fixture
def world_traversable_tmp() -> Iterator[Path]:
    """A temp dir whose parents a non-root user can traverse (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="gf-boot-fixes-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@ROOT_ONLY
def test_status_file_is_readable_by_the_unprivileged_login_user(
    stack_cfg: dict[str, StackConfig], world_traversable_tmp: Path
) -> None:
    sb = Sandbox(world_traversable_tmp, stack_cfg["nlp-inference"], "n1")
    assert sb.run().returncode == 0, sb.log()[-2000:]
    status = sb.root / "var/lib/gpuforge/bootstrap-status.json"
    # validate's own command (validate/gpu/bootstrap_status.py), run as nobody under the real mode bits.
    from gpuforge.validate.gpu.bootstrap_status import PATH

    cmd = f"if [ -e {status} ]; then cat {status}; else echo missing; fi"
    assert PATH == "/var/lib/gpuforge/bootstrap-status.json"
    r = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", cmd],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert r.returncode == 0 and '"state": "succeeded"' in r.stdout, r.stdout + r.stderr
    log = sb.root / "var/log/gpuforge/bootstrap.log"
    denied = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", str(log)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert denied.returncode != 0, "the log stays private to root"


def test_spot_watcher_checkpoints_again_after_a_stop_start(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    marker = tmp_path / "checkpointed"
    sb = Sandbox(tmp_path, stack_cfg["nlp-inference"], "n1", render_kwargs={"checkpoint_command": f"echo saved >> {marker}"})
    assert sb.run().returncode == 0, sb.log()[-2000:]
    watcher = [str(sb.root / "opt/gpuforge/bin/gpuforge-spot-watcher")]
    env = {**sb.env(), "GPUFORGE_SPOT_MAX_POLLS": "2"}
    (sb.state / "spot-notice").write_text('{"action": "stop", "time": "2026-12-01T08:00:00Z"}')
    subprocess.run(watcher, env=env, capture_output=True, text=True, timeout=30, check=True)
    subprocess.run(watcher, env=env, capture_output=True, text=True, timeout=30, check=True)
    assert marker.read_text() == "saved\n", "once per boot"
    # Stop/start: the OS boots again and /run is a fresh tmpfs; /var/lib survives.
    shutil.rmtree(sb.root / "run")
    (sb.state / "spot-notice").write_text('{"action": "stop", "time": "2026-12-02T08:00:00Z"}')
    subprocess.run(watcher, env=env, capture_output=True, text=True, timeout=30, check=True)
    assert marker.read_text() == "saved\nsaved\n", "the next interruption checkpoints again"



def test_every_apt_get_of_a_run_waits_for_the_dpkg_lock(efa_run: Sandbox) -> None:
    """No phase calls apt-get around lib.sh's lock handling (test_dpkg_lock.py shows what it does)."""
    apt = [c for c in efa_run.raw_calls() if c[0] == "apt-get"]
    assert apt and all(c[1:3] == ["-o", "DPkg::Lock::Timeout=1800"] for c in apt), apt
    conf = (efa_run.root / "etc/apt/apt.conf.d/90gpuforge-dpkg-lock").read_text()
    assert conf.strip() == 'DPkg::Lock::Timeout "1800";'


def test_efa_node_allows_ptrace_between_ranks(efa_run: Sandbox, stack_cfg: dict[str, StackConfig]) -> None:
    conf = (efa_run.root / "etc/sysctl.d/90-gpuforge-efa-ptrace.conf").read_text()
    assert conf.strip() == "kernel.yama.ptrace_scope = 0"
    assert ["sysctl", "-q", "-w", "kernel.yama.ptrace_scope=0"] in efa_run.calls()
    assert (efa_run.state / "sysctl/kernel.yama.ptrace_scope").read_text().strip() == "0"
    # The name sorts after Ubuntu's 10-ptrace.conf, so `sysctl --system` at every boot ends with 0.
    # A node without EFA keeps Ubuntu's default.
    assert "ptrace" not in render_text(stack_cfg["nlp-inference"])


def render_text(cfg: StackConfig) -> str:
    from gpuforge.bootstrap.render import render_user_data

    return render_user_data(cfg, "n1").files["user-data.yaml"]


def test_nouveau_is_blacklisted_and_unloaded(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, stack_cfg["nlp-inference"], "n1")
    (sb.root / "proc").mkdir()
    (sb.root / "proc/modules").write_text("nouveau 2334720 0 - Live 0x0000000000000000\ndrm 622592 1 nouveau, Live 0x0\n")
    assert sb.run().returncode == 0, sb.log()[-2000:]
    assert (sb.root / "etc/modprobe.d/blacklist-nouveau.conf").read_text() == "blacklist nouveau\noptions nouveau modeset=0\n"
    calls = sb.calls()
    assert ["modprobe", "-r", "nouveau"] in calls and ["update-initramfs", "-u"] in calls
    assert calls.index(["modprobe", "-r", "nouveau"]) < next(
        i for i, c in enumerate(calls) if c[:2] == ["apt-get", "install"] and any(a.startswith("cuda-drivers") for a in c)
    ), "nouveau is gone before the nvidia module is built and loaded"
    (sb.root / "proc/modules").write_text("drm 622592 0 - Live 0x0\n")
    assert sb.run().returncode == 0
    assert not [c for c in sb.last_run_calls() if c[0] in ("update-initramfs", "modprobe")]


def test_nouveau_in_use_asks_for_a_reboot(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, stack_cfg["nlp-inference"], "n1", env_overrides={"FAKE_FAIL": "modprobe"})
    (sb.root / "proc").mkdir()
    (sb.root / "proc/modules").write_text("nouveau 2334720 1 - Live 0x0\n")
    assert sb.run().returncode != 0
    err = sb.status()["error"]
    assert err["phase"] == "driver" and "reboot the node" in err["message"]


def test_kernel_is_held_with_the_pinned_driver(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, stack_cfg["nlp-inference"], "n1")
    kernel = os.uname().release
    (sb.state / "dpkg").mkdir(parents=True, exist_ok=True)
    for pkg in ("linux-aws", "linux-image-aws", "linux-headers-aws", f"linux-image-{kernel}", f"linux-modules-{kernel}"):
        (sb.state / "dpkg" / pkg).write_text("6.8.0.1030.31\n")
    assert sb.run().returncode == 0, sb.log()[-2000:]
    held = set((sb.state / "held").read_text().split())
    want = {"linux-aws", "linux-image-aws", "linux-headers-aws", f"linux-image-{kernel}", f"linux-headers-{kernel}",
            f"linux-modules-{kernel}"}  # fmt: skip
    assert want <= held, want - held
    pre = Sandbox(tmp_path / "pre", stack_cfg["nlp-inference"].model_copy(update={"driver_preinstalled": True}), "n1")
    (pre.state / "driver-version").write_text("570.86.15\n")
    (pre.state / "dpkg").mkdir(parents=True, exist_ok=True)
    (pre.state / "dpkg" / "linux-aws").write_text("6.8.0.1030.31\n")
    assert pre.run().returncode == 0, pre.log()[-2000:]
    assert "linux-aws" not in (pre.state / "held").read_text().split(), "the AMI's driver: the AMI's kernel policy"


def test_preinstalled_driver_is_refused_for_volta(stack_cfg: dict[str, StackConfig]) -> None:
    from gpuforge.bootstrap.plan import BootstrapError
    from gpuforge.bootstrap.render import render_user_data

    cfg = stack_cfg["risk-sim"].model_copy(update={"driver_preinstalled": True})
    assert cfg.instance.gpu_model.startswith("V100")
    with pytest.raises(BootstrapError) as exc:
        render_user_data(cfg, "n1")
    assert "driverPreinstalled" in str(exc.value) and "V100" in str(exc.value)
    # The pinned driver path still serves V100, and the AMI path still serves Ampere.
    render_user_data(stack_cfg["risk-sim"], "n1")
    render_user_data(stack_cfg["cv-training"].model_copy(update={"driver_preinstalled": True}), "n1")


def test_dlami_instance_store_is_bound_not_rebuilt(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    """A Deep Learning AMI has already put the instance store under /opt/dlami/nvme: scratch
    becomes a bind mount of it; no second RAID over disks that are in use."""
    cfg = stack_cfg["cv-training"].model_copy(update={"driver_preinstalled": True})
    sb = Sandbox(tmp_path, cfg, "n1")
    (sb.state / "driver-version").write_text("570.86.15\n")
    (sb.state / "fm-version").write_text("570.86.15\n")
    (sb.state / "mounts").mkdir(parents=True, exist_ok=True)
    (sb.state / "mounts" / "_opt_dlami_nvme").touch()
    assert sb.run().returncode == 0, sb.log()[-2000:]
    mnt = cfg.profile.storage.scratch_mount
    fstab = (sb.root / "etc/fstab").read_text()
    assert f"/opt/dlami/nvme {mnt} none bind,nofail,x-systemd.requires-mounts-for=/opt/dlami/nvme 0 0" in fstab
    assert not [c for c in sb.calls() if c[:2] == ["mdadm", "--create"] or c[0] == "mkfs.ext4"]
    assert sb.run().returncode == 0
    assert next(p for p in sb.status()["phases"] if p["name"] == "scratch")["changed"] is False


def test_ptrace_scope_without_yama_and_after_a_later_change(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    """A kernel without Yama passes untouched (nothing restricts ptrace); a value changed later
    (an admin, a hardening baseline) is put back to 0 by the next run (the boot-time unit)."""
    sb = Sandbox(tmp_path, stack_cfg["risk-sim"], "n1")  # no FAKE_SYSCTL_...: no Yama
    assert sb.run().returncode == 0, sb.log()[-2000:]
    assert not [c for c in sb.calls() if c[:2] == ["sysctl", "-q"]]
    (sb.state / "sysctl").mkdir(exist_ok=True)
    (sb.state / "sysctl/kernel.yama.ptrace_scope").write_text("2\n")
    assert sb.run().returncode == 0, sb.log()[-2000:]
    assert (sb.state / "sysctl/kernel.yama.ptrace_scope").read_text().strip() == "0"
    assert "changed: kernel.yama.ptrace_scope=0 (was 2)" in sb.log()
