"""A Slurm cluster, rehearsed (issue 19): cv-training as a Slurm stack, its head and two GPU
nodes booted from their rendered user data (nspawn, systemd as PID 1, cloud-init, the IMDS and
SSM stand-ins, the mirror serving Debian 12's real Slurm 22.05.8, munge and MariaDB), and the
bootstrap brings the cluster up by itself: munge, slurmdbd, MariaDB, slurmctld and slurmd through
their packaged units and the product's drop-ins, started by the bootstrap's own systemctl calls.
One cluster is shared by every test here (module fixture).

Shape: p3.16xlarge (8 x V100, no instance-store disk) in use1-az5, not cv-training's p4de: this
host's kernel has no md driver for p4de's eight-disk RAID0 (tests/rehearsal/README.md). What the
bed changes in the rendered files is listed in tests/rehearsal/slurm.py and tests/SUBSTITUTIONS.md.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.rehearsal.nodes import Node, Rehearsal
from tests.rehearsal.root import ensure_root, unavailable
from tests.rehearsal.slurm import Cluster, boot_cluster

pytestmark = [pytest.mark.rehearsal, pytest.mark.slow]
STACK, SHAPE, AZ = "cv-training", "p3.16xlarge", "use1-az5"
GRES = "gpu:v100:8"
USER = "vlee"  # stacks/teams: account vision (quota 16 GPUs), no per-user limit


@pytest.fixture(scope="module")
def rehearsal() -> Iterator[Rehearsal]:
    if why := unavailable():
        pytest.skip(why)
    with Rehearsal(ensure_root(), cuda_os="ubuntu-24.04", slurm=True).up() as r:
        yield r


@pytest.fixture(scope="module")
def cluster(rehearsal: Rehearsal) -> Cluster:
    return boot_cluster(rehearsal, STACK, 2, SHAPE, AZ)


def _ok(r: Rehearsal, node: Node, cmd: str, timeout: float = 120) -> str:
    res = r.ssh(node, cmd, timeout=timeout)
    assert res.returncode == 0, f"{node.name}: {cmd}: rc {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


def _unit(r: Rehearsal, node: Node, unit: str) -> dict[str, str]:
    out = _ok(r, node, f"systemctl show -p ActiveState -p FragmentPath -p DropInPaths -p UnitFileState {unit}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_the_bootstrap_brings_every_daemon_up_through_its_packaged_unit(rehearsal: Rehearsal, cluster: Cluster) -> None:
    for name, status in cluster.status.items():
        assert status["state"] == "succeeded", (name, status.get("error"))
    head = cluster.head
    for unit in ("munge", "mariadb", "slurmdbd", "slurmctld"):
        u = _unit(rehearsal, head, unit)
        assert (u["ActiveState"], u["UnitFileState"]) == ("active", "enabled"), (unit, u)
        assert u["FragmentPath"] == f"/lib/systemd/system/{unit}.service", "the packaged unit, not a test's"
    assert "[slurm-start] changed: started slurmctld" in head.log() and "started slurmdbd" in head.log()
    # MariaDB's datadir is the database's own EBS volume (a loop device here), not the root volume.
    assert _ok(rehearsal, head, "findmnt -n -o SOURCE /var/lib/mysql").strip() in head.disks
    for node in cluster.nodes:
        for unit in ("munge", "slurmd"):
            u = _unit(rehearsal, node, unit)
            assert (u["ActiveState"], u["FragmentPath"]) == ("active", f"/lib/systemd/system/{unit}.service"), (unit, u)
        # The configless node's drop-in (ConditionPathExists= reset) is what let systemd start it.
        assert "/etc/systemd/system/slurmd.service.d/gpuforge.conf" in _unit(rehearsal, node, "slurmd")["DropInPaths"]
        assert not node.root.joinpath("etc/slurm/slurm.conf").exists(), "configless: slurmd fetched it from slurmctld"
        # Started by the slurm-start phase, with --conf-server: never by the package's postinst
        # before /etc/default/slurmd existed (then "DNS SRV lookup failed" until systemd's restarts
        # caught up). A restart while slurmctld is still starting is the drop-in's Restart= at work.
        assert "[slurm-start] changed: started slurmd" in node.log()
        journal = _ok(rehearsal, node, "sudo journalctl -u slurmd --no-pager -o cat")
        assert "DNS SRV lookup failed" not in journal, journal


def test_every_node_registers_idle_with_its_typed_gres(rehearsal: Rehearsal, cluster: Cluster) -> None:
    for node in cluster.nodes:
        line = _ok(rehearsal, cluster.head, f"scontrol -o show node {node.name}")
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        assert fields["State"] == "IDLE", line
        assert fields["Gres"] == GRES, line
        assert fields["Version"] == "22.05.8", line  # Debian's, tests/SUBSTITUTIONS.md


def test_a_two_node_gpu_job_runs_as_a_team_user(rehearsal: Rehearsal, cluster: Cluster) -> None:
    """`sbatch --gres=gpu:v100:8 -N2` as vlee (team vision): each task sees the 8 GPUs it was
    given and runs inside the job's cgroups (task/cgroup, ConstrainDevices=yes)."""
    step = 'echo "$(hostname) gpus=$CUDA_VISIBLE_DEVICES $(grep -E ":devices:" /proc/self/cgroup)"'
    wrap = shlex.quote(f"srun bash -c {shlex.quote(step)}")
    out = _ok(rehearsal, cluster.head,
              f"cd /tmp && sudo -u {USER} sbatch --parsable --wait -N2 --gres={GRES} -o /tmp/gf-job-%j.out --wrap {wrap}",
              timeout=300)  # fmt: skip
    job = out.strip().splitlines()[-1]
    acct = _ok(rehearsal, cluster.head, f"sacct -X -n -P -j {job} -o User,Account,State,ExitCode,NNodes,AllocTRES")
    user, account, state, code, nnodes, tres = acct.strip().split("|")
    assert (user, account, state, code, nnodes) == (USER, "vision", "COMPLETED", "0:0", "2"), acct
    assert "gres/gpu=16" in tres, acct
    batch = cluster.nodes[0]  # the batch step runs on the first node of the allocation
    text = _ok(rehearsal, batch, f"sudo cat /tmp/gf-job-{job}.out")
    for node in cluster.nodes:
        [line] = [ln for ln in text.splitlines() if ln.startswith(node.name + " ")]
        assert "gpus=0,1,2,3,4,5,6,7" in line, text
        assert re.search(rf"devices:/.*/uid_\d+/job_{job}/step_0/", line), text


def test_accounting_on_the_units_quota_pends_and_cost_jobs_prices_the_job(rehearsal: Rehearsal, cluster: Cluster) -> None:
    """Issue 24 on the daemons the bootstrap started through their units (MariaDB on the head's
    EBS volume, slurmdbd, slurmctld): a 16-GPU job of team search (gpu_quota 8) pends with Slurm's
    own AssocGrpGRES; sacct holds vlee's finished 2-node job with gres/gpu=16; and the head's
    node-installed `gpuforge cost --jobs` (its pricing file from the user data) prices it at
    16 GPUs x ElapsedRaw, whole nodes (exclusive of nothing: 8 of 8 GPUs a node)."""
    head = cluster.head
    _ok(rehearsal, head, f"cd /tmp && sudo -u {USER} sbatch --parsable --wait -N2 --gres={GRES} --wrap 'sleep 3'", timeout=180)
    jid = _ok(rehearsal, head, f"cd /tmp && sudo -u sbo sbatch --parsable -N2 --gres={GRES} --wrap 'sleep 1'").strip()
    try:
        end, why = time.monotonic() + 60, ""
        while why != "AssocGrpGRES" and time.monotonic() < end:
            time.sleep(2)
            why = _ok(rehearsal, head, f"squeue -h -j {jid} -o %r").strip()
        assert why == "AssocGrpGRES", why
    finally:
        rehearsal.ssh(head, f"sudo scancel {jid}")
    # as root (the login user has no association); the window query lags a finished job by seconds
    end, rows = time.monotonic() + 60, list[str]()
    while not rows and time.monotonic() < end:
        out = _ok(rehearsal, head, f"sudo sacct -X -n -P -S today -u {USER} -o JobID,Account,AllocTRES,ElapsedRaw,State")
        rows = [ln for ln in out.split() if ln.endswith("|COMPLETED") and ln.split("|")[3] not in ("", "0")]
        time.sleep(0 if rows else 3)
    assert rows, f"sacct knows no finished job of vlee: {out}"
    last = rows[-1].split("|")
    assert last[1] == "vision" and "gres/gpu=16" in last[2], last
    doc = json.loads(_ok(rehearsal, head, "sudo /opt/gpuforge/venv/bin/gpuforge cost --jobs --since "
                                          "$(date -u +%Y-%m-%d) --format json"))  # fmt: skip
    job = next(j for j in doc["jobs"] if j["job_id"] == last[0])
    assert (job["user"], job["team"], job["gpus"], job["nodes"]) == (USER, "vision", 16, 2), job
    assert job["elapsed_s"] == int(last[3]) and job["gpu_hours"] == pytest.approx(16 * int(last[3]) / 3600, abs=1e-6)
    assert doc["empty"] is False and job["usd"] is not None and job["usd"] >= 0


def test_srun_mpi_pmix_starts_a_two_node_step(rehearsal: Rehearsal, cluster: Cluster) -> None:
    """validate's NCCL pairs run `srun --mpi=pmix`; Slurm's mpi/pmix plugin dlopens libpmix, which
    no Slurm package depends on (the slurm phase installs it on the head and the nodes)."""
    step = 'echo "$(hostname) rank=$PMIX_RANK"'
    cmd = f"cd /tmp && sudo -u {USER} srun -N2 --mpi=pmix --gres={GRES} bash -c {shlex.quote(step)}"
    out = _ok(rehearsal, cluster.head, cmd, timeout=180)
    assert sorted(out.split()) == sorted([n.name for n in cluster.nodes] + ["rank=0", "rank=1"]), out


def test_pyxis_is_loaded_where_srun_runs_and_enroot_paths_work_for_users(rehearsal: Rehearsal, cluster: Cluster) -> None:
    """Pyxis on the head (a submit host: SPANK options register where srun runs) and on the nodes;
    on a node, enroot's own code (v3.5.0's enroot.in) makes each user's paths under the rendered
    enroot.conf, and neither user can read the other's."""
    for node in [cluster.head, *cluster.nodes]:
        assert "--container-image" in _ok(rehearsal, node, "srun --help"), node.name
    node = cluster.nodes[0]
    for user in ("vlee", "vana"):
        _ok(rehearsal, node, f"cd /tmp && sudo -u {user} enroot list && sudo -u {user} enroot version")
    paths = "/run/enroot/user-* /var/lib/enroot/*/user-* /run/enroot /var/lib/enroot/data"
    listing = _ok(rehearsal, node, f"sudo stat -c '%U %a %n' {paths}")
    for user, uid in (("vlee", 20102), ("vana", 20101)):
        for path in (f"/run/enroot/user-{uid}", f"/var/lib/enroot/data/user-{uid}", f"/var/lib/enroot/cache/user-{uid}"):
            assert f"{user} 700 {path}" in listing, listing
    assert "root 1777 /run/enroot" in listing and "root 1777 /var/lib/enroot/data" in listing, listing
    other = rehearsal.ssh(node, "sudo -u vana ls /var/lib/enroot/data/user-20102")
    assert other.returncode != 0 and "Permission denied" in other.stderr


def test_the_heads_phases_ran_in_order(cluster: Cluster) -> None:
    """The database's volume mounted before MariaDB is installed; slurmdbd and the cluster
    registered before slurmctld starts; accounts once it runs."""
    phases = [(p["name"], p["state"]) for p in cluster.status[cluster.head.name]["phases"]]
    names = ["base", "gpuforge", "data-volume", "slurm", "pyxis", "slurm-accounting", "slurm-start", "slurm-accounts"]
    assert phases == [(n, "succeeded") for n in names], phases


# A failed GPU, replayed: the node's nvidia-smi stand-in answers from the "nvlink-down" scenario,
# real captured output of a GPU whose NVLinks are all inactive (tests/validate/fixtures
# nvlink_f5_all_inactive.txt, SOURCES.md), instead of its healthy V100 capture.
FAILED_SCENARIO = "nvlink-down"
# The checks whose nvidia-smi output the replay holds for a V100 node (topo -m, nvlink -s). Its
# --query-gpu and -q answers were never captured for V100 (gpu.inventory, gpu.health: unknown), and
# a container cannot read the kernel log (gpu.xid: unknown).
VALIDATE_CHECKS = "gpu.topology,gpu.nvlink"
UNKNOWN_HERE = {"gpu.inventory", "gpu.health", "gpu.xid"}


def _replay(node: Node, scenario: str) -> None:
    hw = node.dir / "hw" / "hardware.json"  # bound read-only into the node at /run/gpuforge-rehearsal
    doc = json.loads(hw.read_text())
    hw.write_text(json.dumps(doc | {"replay_scenario": scenario}))


def _sinfo(r: Rehearsal, head: Node, node: Node) -> tuple[str, str]:
    state, _, reason = _ok(r, head, f"sinfo -h -N -n {node.name} -o '%T|%E'").strip().partition("|")
    return state, reason


def _wait_state(r: Rehearsal, head: Node, node: Node, want: Callable[[str, str], bool], timeout: float) -> tuple[str, str]:
    end = time.monotonic() + timeout
    seen = _sinfo(r, head, node)
    while not want(*seen) and time.monotonic() < end:
        time.sleep(3)
        seen = _sinfo(r, head, node)
    return seen


def _validate(r: Rehearsal, cluster: Cluster, where: Node) -> tuple[int, list[dict[str, Any]]]:
    """`gpuforge validate --transport slurm` with the gpuforge the node install put on `where` (the
    head: srun and, since the rehearsal found it missing, the gpuforge phase), each node check as
    `srun -w NODE --gres=gpu:v100:8`. As root: under the rendered
    AccountingStorageEnforce=associations, srun by a user with no association (the login user
    `ubuntu`) is refused ("Invalid account or account/partition combination specified");
    slurmdbd gives root one when the cluster is registered."""
    inv = json.dumps(r.inventory(STACK, cluster.nodes, SHAPE))
    res = r.ssh(where, f"cd /tmp && printf '%s' {shlex.quote(inv)} >inv.json && "
                       "sudo /opt/gpuforge/venv/bin/gpuforge validate --inventory inv.json --transport slurm "
                       f"--checks {VALIDATE_CHECKS} --format json --out /tmp/gf-evidence",
                timeout=300)  # fmt: skip
    assert res.stdout.strip(), res.stderr
    return res.returncode, json.loads(res.stdout)["results"]


def test_validate_through_slurm_passes_healthy_nodes_and_names_a_failed_gpu(rehearsal: Rehearsal, cluster: Cluster) -> None:
    code, results = _validate(rehearsal, cluster, cluster.head)
    bad = [(x["check"], x["level"], x["message"]) for x in results if x["level"] not in ("pass", "info")]
    assert code == 0 and not bad, bad
    broken = cluster.nodes[1]
    _replay(broken, FAILED_SCENARIO)
    try:
        for _ in range(3):  # slurmd's own health check may drain it first (every 20 s): then srun cannot reach it
            code, results = _validate(rehearsal, cluster, cluster.head)
            if any(broken.name in json.dumps(x) and x["level"] == "error" for x in results):
                break
            _ok(rehearsal, cluster.head, f"sudo scontrol update nodename={broken.name} state=resume")
    finally:
        _replay(broken, broken.hardware["replay_scenario"])
    errors = [x for x in results if x["level"] == "error"]
    assert code != 0 and errors, results
    assert all(broken.name in json.dumps(x) for x in errors), errors
    assert any(x["check"] == "gpu.nvlink" for x in errors), errors
    healthy = [x for x in results if cluster.nodes[0].name in json.dumps(x)]
    assert healthy and all(x["level"] in ("pass", "info") for x in healthy), healthy


def _health_log(r: Rehearsal, node: Node) -> list[dict[str, Any]]:
    out = _ok(r, node, "sudo cat /var/log/gpuforge/health-check.log 2>/dev/null || true")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_slurmds_periodic_health_check_drains_a_failed_gpu_and_resumes_it(rehearsal: Rehearsal, cluster: Cluster) -> None:
    """HealthCheckProgram as rendered (/opt/gpuforge/bin/gpuforge-health-check exec'ing the
    node-installed /opt/gpuforge/venv/bin/gpuforge health-check), run by slurmd every
    HealthCheckInterval: the node with the failed GPU is drained with a gpuforge-health: reason
    naming the check, the healthy one stays idle. Once the GPU is back, slurmd's next run resumes it:
    the check its drain names passes again, and three checks that have no evidence in this bed
    (UNKNOWN_HERE) neither drained it nor keep it drained (tests/slurm/test_health_decide.py)."""
    head, good, broken = cluster.head, cluster.nodes[0], cluster.nodes[1]
    _ok(rehearsal, head, f"sudo scontrol update nodename={broken.name} state=resume || true")
    _replay(broken, FAILED_SCENARIO)
    try:
        state, reason = _wait_state(rehearsal, head, broken, lambda s, why: "drain" in s, timeout=180)
        assert "drain" in state and reason.startswith("gpuforge-health: ") and "gpu.nvlink" in reason, (state, reason)
        assert _sinfo(rehearsal, head, good)[0] == "idle"
    finally:
        seen = len(_health_log(rehearsal, broken))
        _replay(broken, broken.hardware["replay_scenario"])
    state, reason = _wait_state(rehearsal, head, broken, lambda s, why: s == "idle", timeout=180)
    assert state == "idle", (state, reason)
    resumed = [e for e in _health_log(rehearsal, broken)[seen:] if e["action"] == "resume"]
    assert resumed and resumed[-1]["reason"].startswith("gpu.nvlink passes again and no check fails"), resumed
    assert {f["check"] for f in resumed[-1]["failing"]} == UNKNOWN_HERE, resumed[-1]
