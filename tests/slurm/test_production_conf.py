"""The slurm.conf/gres.conf/topology.conf a stack renders, read by a real slurmctld (Debian 12's
22.05): it starts as primary controller with no configuration error, and reports the nodes,
gres, partition and switch as gpuforge meant them. Only paths, the port, the user and munge's
socket are changed (the daemon runs as root in a temp dir); node names resolve through a hosts
file, as the head's slurm phase writes /etc/hosts from the hosts parameter before slurmctld starts.
Ubuntu's 21.08 and 23.11 (what nodes install) are not run here."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.bootstrap.slurm import layout_for, render_slurm
from tests.slurm.conftest import slurm_stack

pytestmark = pytest.mark.slow
# What slurmctld logs as "error:" on any first start: no state saved yet. Anything else fails.
FIRST_START = ("Could not open", "NOTE: Trying backup state save file")


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (slurmctld as root, a UTS and mount namespace for its name and hosts file)"
    absent = [t for t in ("slurmctld", "munged", "scontrol", "unshare") if shutil.which(t) is None]
    return f"missing {', '.join(absent)} (scripts/setup.sh --with-test-hosts)" if absent else None


@pytest.fixture(scope="module", params=["nvml", "files"])  # the stacks' gres.conf, and the device-file one the bed runs
def controller(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    why = _missing()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurmprod")
    root.chmod(0o700)  # munged refuses a world-writable socket directory
    # run/slurmctld: what systemd makes for the packaged unit (RuntimeDirectory=slurmctld; tests/SUBSTITUTIONS.md)
    for sub in ("etc", "state", "log", "run", "run/slurmctld"):
        (root / sub).mkdir()
    cfg = slurm_stack("cv-training", nodeCount="4")
    assert cfg.slurm is not None
    layout = layout_for(cfg.slurm, request.param)
    port = 30000 + os.getpid() % 20000 + (1 if request.param == "files" else 0)
    paths = dataclasses.replace(
        layout.paths, slurm_user="root", state_save=str(root / "state"), log_dir=str(root / "log"),
        run_dir=str(root / "run"), slurmctld_port=port, munge_socket=str(root / "munge.sock"),
    )  # fmt: skip
    # Without the accounting lines: with AccountingStorageEnforce=associations slurmctld will not start
    # without a slurmdbd ("fatal: slurmdbd and/or database must be up at slurmctld start time"). Those
    # lines run, with slurmdbd and MariaDB, on the accounting bed (tests/slurm/test_accounting_testbed.py).
    files = render_slurm(dataclasses.replace(layout, paths=paths, accounting=None))
    for rel, text in files.items():
        (root / "etc" / Path(rel).name).write_text(text)
    # The head is this machine; the GPU nodes get documentation addresses (TEST-NET-1): they
    # resolve, and nothing is ever sent to them (no slurmd runs; slurmctld only pings them).
    hosts = root / "hosts"
    hosts.write_text(f"127.0.0.1 localhost {cfg.slurm.head_name}\n" + "".join(
        f"192.0.2.{i} {n}\n" for i, n in enumerate(cfg.slurm.node_names, start=11)))  # fmt: skip
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    subprocess.run(["munged", "--force", f"--socket={root}/munge.sock", f"--key-file={key}", f"--pid-file={root}/munged.pid",
                    f"--log-file={root}/log/munged.log", f"--seed-file={root}/seed"], check=True, timeout=30)  # fmt: skip
    conf = root / "etc" / "slurm.conf"
    script = f"mount --bind {hosts} /etc/hosts && hostname {cfg.slurm.head_name} && exec slurmctld -f {conf}"
    subprocess.run(["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script], check=True, timeout=30)
    env = {**os.environ, "SLURM_CONF": str(conf), "GF_HOSTS": str(hosts)}
    pids = []
    try:
        for _ in range(150):  # 15 s at most
            pidfile = Path(paths.slurmctld_pidfile)
            if pidfile.is_file() and pidfile.read_text().strip():
                pids.append(int(pidfile.read_text()))
                break
            time.sleep(0.1)
        log = root / "log" / "slurmctld.log"
        for _ in range(300):  # 30 s at most to be the primary controller
            if log.is_file() and "Running as primary controller" in log.read_text():
                break
            time.sleep(0.1)
        yield root, env
    finally:
        for pidfile in (Path(paths.slurmctld_pidfile), root / "munged.pid"):
            if pidfile.is_file() and pidfile.read_text().strip():
                try:
                    os.kill(int(pidfile.read_text()), signal.SIGTERM)
                except ProcessLookupError:
                    pass


def test_slurmctld_starts_on_the_rendered_files_without_error(controller: tuple[Path, dict[str, str]]) -> None:
    root, _ = controller
    log = (root / "log" / "slurmctld.log").read_text()
    assert "Running as primary controller" in log, log[-3000:]
    errors = [ln for ln in log.splitlines() if "error:" in ln and not any(k in ln for k in FIRST_START)]
    assert errors == [], "\n".join(errors)


def test_slurmctld_reads_the_nodes_partition_and_switch_as_rendered(controller: tuple[Path, dict[str, str]]) -> None:
    _, env = controller

    def scontrol(*args: str) -> str:  # with the same hosts file, so the head's name resolves
        script = 'mount --bind "$GF_HOSTS" /etc/hosts && exec scontrol "$@"'
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "scontrol", *args]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, check=True).stdout

    node = scontrol("show", "node", "cv-training-node03")
    for want in ("Gres=gpu:a100:8", "CfgTRES=cpu=96,mem=1120665M", "RealMemory=1120665", "Partitions=train"):
        assert want in node, node
    # EC2's 48 cores x 2 threads of a p4de (catalog), not 96 one-thread sockets: CR_Core_Memory
    # allocates cores, and a task's two hyperthreads are one core
    for want in ("CPUTot=96", "CoresPerSocket=48", "ThreadsPerCore=2"):
        assert want in node, node
    part = scontrol("show", "partition", "train")
    assert "Nodes=cv-training-node[01-04]" in part and "OverSubscribe=EXCLUSIVE" in part and "Default=YES" in part
    assert "SwitchName=cv-training-pg" in scontrol("show", "topology")
    config = scontrol("show", "config")
    assert "HealthCheckProgram      = /opt/gpuforge/bin/gpuforge-health-check" in config
    assert "enable_configless" in config and "topology/tree" in config
