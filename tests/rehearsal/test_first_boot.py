"""First boot, rehearsed (issue 11): the rendered user data boots under systemd and cloud-init,
installs from the stack's mirror, and `gpuforge validate` proves the node over SSH as its
unprivileged login user.

One profile here (risk-sim's recipe: driver, CUDA + NCCL, EFA + aws-ofi-nccl, containers, NGC,
tools, CloudWatch agent, data volume, scratch), on p5.4xlarge: an EFA instance with one
instance-store disk, because this machine's kernel has no md driver for the RAID0 that p3dn's
two disks need (tests/rehearsal/README.md; bench/rehearsal.py rehearses the reference shapes).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.cli import main
from gpuforge.common.version import __version__
from gpuforge.components.userdata import stack_user_data
from gpuforge.core.config import parse_stack_config
from tests.rehearsal.mirror import NODE_PYTHON
from tests.rehearsal.nodes import Rehearsal
from tests.rehearsal.root import ensure_root, unavailable
from tests.rehearsal.stacks import ACCOUNT_ID, Booted, boot_stack
from tests.slurm.conftest import slurm_raw

pytestmark = [pytest.mark.rehearsal, pytest.mark.slow]
STACK, SHAPE = "risk-sim", "p5.4xlarge"
CHECKS = "bootstrap.status,efa.provider,system"
LOCK_S = 300  # at most: the stand-in lets go 5 s after the bootstrap says it waits (22 s into boot measured)


@pytest.fixture(scope="module")
def rehearsal() -> Iterator[Rehearsal]:
    if why := unavailable():
        pytest.skip(why)
    with Rehearsal(ensure_root()).up() as r:
        yield r


@pytest.fixture(scope="module")
def healthy(rehearsal: Rehearsal) -> Booted:
    # unattended-upgrades' stand-in holds the dpkg/apt locks for the first LOCK_S seconds of boot
    return boot_stack(rehearsal, STACK, "risk-1", SHAPE, dpkg_lock_s=LOCK_S)


def _failed_phase(status: dict) -> tuple[str | None, str]:
    err = status.get("error") or {}
    return err.get("phase"), str(err.get("message"))


def test_first_boot_runs_every_phase_from_the_mirror(rehearsal: Rehearsal, healthy: Booted) -> None:
    status = healthy.status
    assert status["state"] == "succeeded", _failed_phase(status)
    assert {p["state"] for p in status["phases"]} == {"succeeded"}
    assert status["node"] == "risk-1", "the name comes from the Name tag, read from IMDSv2"
    assert status["versions"]["observed"]["efa_installer"] == rehearsal.versions.efa_installer.version
    assert rehearsal.mirror is not None
    got = {a.path for a in rehearsal.mirror.downloads(healthy.node.ip)}
    v = rehearsal.versions
    for wanted in (f"/efa-installer/aws-efa-installer-{v.efa_installer.version}.tar.gz",
                   f"/aws-ofi-nccl/v{v.aws_ofi_nccl.version}/aws-ofi-nccl-{v.aws_ofi_nccl.version}.tar.gz",
                   "/cuda/ubuntu2204/x86_64/InRelease", "/nvidia-container-toolkit/gpgkey",
                   "/v2/nvcr/nvidia/cuda/manifests/12.4.1-devel-ubuntu22.04"):  # fmt: skip
        assert wanted in got, f"{wanted} not fetched from the mirror"
    assert rehearsal.imds is not None
    assert any(m == "PUT" and s == 200 for c, m, _, s in rehearsal.imds.requests if c == healthy.node.ip)


def test_bootstrap_waits_for_the_dpkg_lock_held_at_boot(healthy: Booted) -> None:
    """Finding 3: apt-get exits 100 at once while unattended-upgrades holds the lock; the
    bootstrap must wait. The log shows that the lock was held when the bootstrap wanted it."""
    first_run = healthy.node.log().split("] bootstrap run 2 ", 1)[0]
    assert "waiting for /var/lib/dpkg/lock-frontend by pid" in first_run, "the lock was not held when apt ran"
    assert healthy.status["state"] == "succeeded", _failed_phase(healthy.status)


def test_login_user_reads_the_status_in_a_non_login_session(rehearsal: Rehearsal, healthy: Booted) -> None:
    """Finding 5: the state directory was 0750; the login user (no sudo) must read the status."""
    res = rehearsal.ssh(healthy.node, "cat /var/lib/gpuforge/bootstrap-status.json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["run"] >= 1


def test_efa_tools_and_libraries_in_a_non_login_session(rehearsal: Rehearsal, healthy: Booted) -> None:
    """Finding 1: the EFA installer stand-in puts fi_info only under /opt/amazon/efa/bin and on PATH
    only through /etc/profile.d/efa.sh; the efa phase still ran under cloud-init, and the login
    user's non-login SSH session (what validate runs) finds fi_info, nccl-tests and the plugin."""
    res = rehearsal.ssh(
        healthy.node,
        'echo "PATH=$PATH"; command -v fi_info; readlink -f "$(command -v fi_info)"; command -v all_reduce_perf; '
        "/sbin/ldconfig -p | grep -c 'libnccl-net.so '",
    )
    assert res.returncode == 0, res.stderr
    path, fi, fi_real, perf, plugin = res.stdout.splitlines()
    assert "/opt/amazon/efa/bin" not in path, "not found through a login shell's profile.d"
    assert (fi, fi_real) == ("/usr/local/bin/fi_info", "/opt/amazon/efa/bin/fi_info")
    assert perf == "/usr/local/bin/all_reduce_perf"
    assert int(plugin) >= 1, "the NCCL plugin is in the dynamic linker's cache (ld.so.conf.d)"


def test_ptrace_between_ranks_is_allowed(rehearsal: Rehearsal, healthy: Booted) -> None:
    """Finding 6: Ubuntu's 10-ptrace.conf sets kernel.yama.ptrace_scope=1, which stops Open MPI's
    intra-node single copy; the efa phase sets 0 now and in sysctl.d (the node's sysctl stand-in
    keeps the value as the kernel would, tests/rehearsal/nodes.py YAMA_SYSCTL)."""
    res = rehearsal.ssh(healthy.node, "PATH=/usr/local/sbin:/usr/sbin:/sbin:$PATH sysctl -n kernel.yama.ptrace_scope")
    assert (res.returncode, res.stdout.strip()) == (0, "0"), res.stderr
    assert "changed: kernel.yama.ptrace_scope=0 (was 1)" in healthy.node.log()


def test_nccl_environment_survives_a_shell(rehearsal: Rehearsal, healthy: Booted) -> None:
    """Finding 4: sourcing the profile.d script leaves NCCL_NET set to the plugin's name (the old
    env-file-as-script ran a command named `Libfabric` and left it unset), with no LD_LIBRARY_PATH."""
    show = "printf '%s|%s' \"$NCCL_NET\" \"${LD_LIBRARY_PATH-unset}\""
    res = rehearsal.ssh(healthy.node, f". /etc/profile.d/gpuforge-nccl.sh && {show}")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "AWS Libfabric|unset", res.stdout
    env = rehearsal.ssh(healthy.node, "cat /etc/gpuforge/nccl.env").stdout.splitlines()
    assert "NCCL_NET=AWS Libfabric" in env and not [ln for ln in env if ln.startswith("LD_LIBRARY_PATH=")]


def _validate(r: Rehearsal, booted: Booted, tmp: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict]]:
    """`gpuforge validate` as a user runs it: real SSH as the login user (non-login sessions),
    strict host keys. GPU checks beyond the inventory gate are left out: the stand-in driver
    replays captures of other machines for them (tests/rehearsal/README.md)."""
    inv = tmp / f"inventory-{booted.node.name}.json"
    inv.write_text(json.dumps(r.inventory(STACK, [booted.node], booted.cfg.instance.name)))
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--inventory", str(inv), "--checks", CHECKS, "--format", "json", "--out", str(tmp / "ev")])
    out = capsys.readouterr().out
    return int(exc.value.code or 0), json.loads(out)["results"]


def test_validate_passes_the_healthy_node_over_ssh(
    rehearsal: Rehearsal, healthy: Booted, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, results = _validate(rehearsal, healthy, tmp_path, capsys)
    by_check = {r["check"]: r for r in results}
    status = by_check["bootstrap.status"]
    assert code == 0, [(r["check"], r["level"], r["message"]) for r in results if r["level"] != "pass"]
    assert status["level"] == "pass" and by_check["efa.provider"]["level"] == "pass"


def test_the_node_runs_the_operators_gpuforge_and_the_health_check_wrapper_runs_it(
    rehearsal: Rehearsal, healthy: Booted
) -> None:
    """Issue 18: the gpuforge phase installed the base gpuforge into /opt/gpuforge/venv from the
    mirror's wheel set (hashed lock, the wheel built from this checkout): the node's version is the
    operator's, and Slurm's HealthCheckProgram wrapper, as the bootstrap renders it, runs it (it
    exited 127 on every node before). This node runs no Slurm: the wrapper is the one rendered for
    the same stack with gpuforge:scheduler slurm (tests/SUBSTITUTIONS.md), and health-check stops
    at its first Slurm call with one `error:` line."""
    res = rehearsal.ssh(healthy.node, "/opt/gpuforge/venv/bin/gpuforge --version")
    assert (res.returncode, res.stdout.strip()) == (0, f"gpuforge, version {__version__}"), res.stderr
    assert healthy.status["versions"]["observed"]["gpuforge"] == __version__
    assert rehearsal.mirror is not None
    fetched = {a.path.rsplit("/", 1)[1] for a in rehearsal.mirror.downloads(healthy.node.ip) if "/gpuforge-wheels/" in a.path}
    assert f"gpuforge-{__version__}-py3-none-any.whl" in fetched and "node-x86_64-py311.txt" in fetched
    raw = slurm_raw(STACK)
    raw["gpuforge:mirror"] = rehearsal.mirror_entries()
    slurm_cfg = parse_stack_config(raw, STACK)
    wrapper = stack_user_data(slurm_cfg, None, account_id=ACCOUNT_ID, versions=rehearsal.pins, node_python=NODE_PYTHON)
    path = healthy.node.root / "opt/gpuforge/bin/gpuforge-health-check"
    path.write_text(wrapper.files["opt/gpuforge/bin/gpuforge-health-check"])
    path.chmod(0o755)
    run = rehearsal.ssh(healthy.node, "sudo -n /opt/gpuforge/bin/gpuforge-health-check; echo rc=$?", timeout=300)
    # The node's gpuforge ran (not exit 127, "not found"): with no Slurm on this node it stops at
    # its first Slurm call, in gpuforge's own words, and changes nothing.
    assert run.stdout.strip() == "rc=2", run.stdout + run.stderr
    assert run.stderr.splitlines()[0] == "error: sinfo: no such file or directory", run.stderr


def test_a_reboot_is_a_no_op_for_bootstrap(rehearsal: Rehearsal, healthy: Booted) -> None:
    """Stop/start (the root disk kept): the boot-time unit reruns the bootstrap; every phase is
    unchanged and nothing is downloaded again (the mirror's access log for this node)."""
    assert rehearsal.mirror is not None
    before = len(rehearsal.mirror.downloads(healthy.node.ip))
    rehearsal.stop(healthy.node)
    rehearsal.start(healthy.node)
    status = rehearsal.wait_bootstrap(healthy.node, run=2, timeout=600)
    assert status["state"] == "succeeded", _failed_phase(status)
    run2 = healthy.node.log().split("] bootstrap run 2 ", 1)[1]
    changes = [line.split("changed: ", 1)[1] for line in run2.splitlines() if "] changed: " in line]
    # A container has no udev: systemd never sees the disks' UUID= device units, so it cannot
    # mount /scratch and /data at boot (nofail: it gives up), and the phases mount them. On EC2
    # systemd mounts them; that those mounts are not ordered before the bootstrap unit stays unverified.
    no_udev = {"mounted /scratch", "mounted /data"}
    assert [c for c in changes if c not in no_udev] == [], f"a reboot changed the node: {changes}"
    again = rehearsal.mirror.downloads(healthy.node.ip)[before:]
    assert again == [], [a.path for a in again]
    # The node's own systemd orders the boot-time run after the nofail scratch/data mount jobs.
    after = rehearsal.ssh(healthy.node, "systemctl show -p After gpuforge-bootstrap.service").stdout
    assert {"scratch.mount", "data.mount"} <= set(after.strip().removeprefix("After=").split()), after


def test_a_failed_driver_install_names_the_phase_and_validate_fails_the_node(
    rehearsal: Rehearsal, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = boot_stack(rehearsal, STACK, "risk-2", SHAPE, broken_driver=True)
    assert broken.status["state"] == "failed"
    phase, msg = _failed_phase(broken.status)
    assert phase == "driver", msg
    code, results = _validate(rehearsal, broken, tmp_path, capsys)
    status = next(r for r in results if r["check"] == "bootstrap.status")
    assert code == 1
    assert status["level"] == "error" and "bootstrap failed in phase 'driver'" in status["message"]


def test_spot_notice_from_imds_runs_the_checkpoint_once(rehearsal: Rehearsal) -> None:
    """A spot stack's node: the watcher polls spot/instance-action with IMDSv2 tokens; when the
    stand-in IMDS starts answering, it runs the checkpoint command once, with the image it
    pre-pulled through the registry mirror (`docker run --pull never` finds it locally)."""
    spot = boot_stack(rehearsal, "vision-cv-training", "spot-1", SHAPE)
    assert spot.status["state"] == "succeeded", _failed_phase(spot.status)
    assert rehearsal.imds is not None
    polled = [s for c, m, p, s in rehearsal.imds.requests if c == spot.node.ip and p.endswith("spot/instance-action")]
    assert polled and set(polled) == {404}, "the watcher polls, and there is no notice yet"
    rehearsal.set_spot_notice(spot.node)
    end = time.monotonic() + 120
    # wait for the command's end, not its start: its output follows the start line (a race under load)
    while not re.search(r"checkpoint command (finished|FAILED)", spot.node.log()) and time.monotonic() < end:
        time.sleep(2)
    log = spot.node.log()
    assert log.count("spot interruption notice") == 1, log[-1500:]
    assert "would run public.ecr.aws/aws-cli/aws-cli:" in log, "the checkpoint image was not pre-pulled"
    time.sleep(12)  # two more poll intervals: the done-flag stops the watcher
    assert spot.node.log().count("spot interruption notice") == 1
    # Stopped and started again (a `stop` interruption), a later notice must checkpoint again:
    # the done-flag may not survive the stop (issue 11 finding 6; it lives in /run now).
    rehearsal.stop(spot.node)
    rehearsal.start(spot.node)
    rehearsal.wait_bootstrap(spot.node, run=2, timeout=600)
    end = time.monotonic() + 120
    while spot.node.log().count("spot interruption notice") < 2 and time.monotonic() < end:
        time.sleep(2)
    assert spot.node.log().count("spot interruption notice") == 2, "no checkpoint after a stop/start"
