"""Real Slurm (Debian 12's slurmctld/slurmd 22.05 and munge) on network-namespace hosts, configured
by gpuforge's templates (tests/slurm/slurmbed.py): a job across two nodes runs, `validate`
through Slurm reaches the verdicts `validate` over SSH reaches, and the health check drains a
node whose replayed nvidia-smi lost its GPU, then resumes it when the replay is healthy again.

Needs root; every wait is bounded. The GPU tools replay real captures (tests/validate/fixtures,
SOURCES.md); node2's "missing GPU" capture is the derived one (a GPU row deleted).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuforge.validate.inventory import Node
from gpuforge.validate.slurm import SlurmClient, SlurmControl, SlurmTransport
from gpuforge.validate.transport import Outcome
from tests.slurm.slurmbed import SlurmBed, slurm_missing

pytestmark = [pytest.mark.netns, pytest.mark.slow]
MISSING = "h100-590-gpu-missing"
HEALTHY = "h100-590"


@pytest.fixture(scope="module")
def bed() -> Iterator[SlurmBed]:
    why = slurm_missing()
    if why:
        pytest.skip(why)
    b = SlurmBed(3, scenarios={2: MISSING}).up()
    try:
        (b.root / "inventory.json").write_text(json.dumps(b.tb.inventory(expect={"gpus_per_node": 1, "gpu_memory_gib": 80})))
        b.wait_for("three idle nodes", lambda s: len(s) == 3 and all(v[0] == "idle" for v in s.values()), 60)
        yield b
    finally:
        b.down()


def test_the_rendered_conf_is_what_slurmctld_runs(bed: SlurmBed) -> None:
    """slurmctld parsed gpuforge's slurm.conf/gres.conf/topology.conf, the nodes fetched them
    (configless) and registered valid."""
    for h in bed.tb.hosts:
        cached = bed.root / "spool" / h.name / "conf-cache"
        assert {"slurm.conf", "gres.conf", "topology.conf"} <= {p.name for p in cached.iterdir()}, h.name
    show = bed.client("scontrol", "show", "node", "node1").stdout
    assert "Gres=gpu:a100:8" in show and "State=IDLE" in show and "RealMemory=500" in show, show
    topo = bed.client("scontrol", "show", "topology").stdout
    assert "SwitchName=gfbed-pg" in topo and "Nodes=node[1-3]" in topo, topo
    part = bed.client("scontrol", "show", "partition", "train").stdout
    assert "Default=YES" in part and "OverSubscribe=EXCLUSIVE" in part, part


def test_an_sbatch_job_runs_across_two_nodes(bed: SlurmBed) -> None:
    out = bed.root / "job-%j.out"
    res = bed.client(
        "sbatch", "--wait", "--nodes=2", "--nodelist=node1,node3", "--gres=gpu:a100:8", f"--output={out}",
        "--wrap", "srun --ntasks-per-node=1 sh -c 'echo $(hostname) $SLURM_JOB_NUM_NODES $SLURM_PROCID'",
        timeout=90,
    )  # fmt: skip
    job = res.stdout.split()[-1]
    text = (bed.root / f"job-{job}.out").read_text()
    assert sorted(text.split("\n")[:2]) == ["node1 2 0", "node3 2 1"] or sorted(text.split()) == sorted(
        ["node1", "2", "0", "node3", "2", "1"]
    ), text


# How many of the node's GPU device files a step may open: the stand-ins have no driver behind
# them (ENXIO), a device the cgroup fences off fails with EPERM first.
PROBE = ("python3 -c 'import errno, glob, os\n"
         "def ok(p):\n try: os.close(os.open(p, os.O_RDONLY))\n"
         " except OSError as e: return e.errno != errno.EPERM\n return True\n"
         "print(sum(ok(p) for p in glob.glob(\"{prefix}*\")))'")  # fmt: skip


def test_constrain_devices_fences_the_gpus_and_validate_asks_for_them(bed: SlurmBed) -> None:
    """The rendered cgroup.conf (ConstrainDevices=yes) on real slurmd with task/cgroup: a step
    that asks for no GPU can open none of them; validate's own srun asks for every one."""
    probe = PROBE.format(prefix=bed.layout().gpu_device_prefix)
    bare = bed.client("srun", "--nodelist=node1", "--nodes=1", "--quiet", "sh", "-c", probe, timeout=60)
    gres = bed.client("srun", "--nodelist=node1", "--nodes=1", "--quiet", "--gres=gpu:a100:8", "sh", "-c", probe,
                      timeout=60)  # fmt: skip
    assert (bare.stdout.strip(), gres.stdout.strip()) == ("0", "8"), (bare, gres)
    transport = SlurmTransport(SlurmClient(env=bed.env))
    res = transport.run(Node(name="node3", host="node3"), probe, 30)  # no instance type: Slurm's Gres= is asked
    assert res.outcome is Outcome.OK and res.stdout.strip() == "8", res


def _validate(bed: SlurmBed, tmp: Path, transport: str, capsys: pytest.CaptureFixture[str],
              monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:  # fmt: skip
    from gpuforge.cli import main

    monkeypatch.setenv("SLURM_CONF", bed.env["SLURM_CONF"])
    args = ["validate", "--inventory", str(bed.root / "inventory.json"), "--checks", "gpu", "--format", "json",
            "--out", str(tmp / transport), "--transport", transport, "--connect-timeout", "3"]  # fmt: skip
    with pytest.raises(SystemExit) as ex:
        main(args)
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    doc["exit"] = ex.value.code
    return doc


def _verdicts(doc: dict[str, Any]) -> tuple[dict[str, str], set[tuple[str, str, tuple[str, ...]]]]:
    states = {n: s["state"] for n, s in doc["context"]["nodes"].items()}
    # The message of node.reachable names the transport; every check's level and targets must agree.
    results = {(r["check"], r["level"], tuple(r["targets"])) for r in doc["results"]}
    return states, results


def test_validate_through_slurm_reaches_the_ssh_verdicts(
    bed: SlurmBed, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bed.enable_health_check(False)
    ssh = _validate(bed, tmp_path, "ssh", capsys, monkeypatch)
    slurm = _validate(bed, tmp_path, "slurm", capsys, monkeypatch)
    ssh_states, ssh_results = _verdicts(ssh)
    slurm_states, slurm_results = _verdicts(slurm)
    assert ssh_states == {"node1": "ok", "node2": "failed_gates", "node3": "ok"}
    assert slurm_states == ssh_states
    assert slurm_results == ssh_results, (slurm_results ^ ssh_results)
    assert ssh["exit"] == slurm["exit"] == 1
    assert slurm["context"]["transport"] == "slurm"
    # evidence: the same raw outputs, one file per node and check
    ev = sorted(p.relative_to(tmp_path / "slurm").as_posix() for p in (tmp_path / "slurm" / "evidence").rglob("*.txt"))
    assert ev and any("node2" in e and "gpu.inventory" in e for e in ev)


def _health_inventory(bed: SlurmBed, node2_type: str) -> None:
    """p5.4xlarge: one H100 80GB, as the replayed capture shows; node2 as `node2_type`."""
    nodes = [{"name": h.name, "host": h.ip, "instance_type": node2_type if h.index == 2 else "p5.4xlarge"}
             for h in bed.tb.hosts]  # fmt: skip
    bed.health_inventory.write_text(json.dumps({**bed.tb.inventory(), "nodes": nodes}))


def _log(bed: SlurmBed) -> list[dict[str, Any]]:
    log = bed.root / "log" / "health-check.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_health_check_holds_on_missing_evidence_drains_a_failed_node_and_resumes_it(bed: SlurmBed) -> None:
    """slurmd's own periodic HealthCheckProgram on three nodes. node2's nvidia-smi replays no GPU
    row: missing evidence, never a drain. Then node2's inventory says p5.48xlarge (8 GPUs) while
    its nvidia-smi shows one: `gpu.count` fails, and with one node allowed (max(1, floor(3 x 50 %)))
    it is drained with the check's reason, and resumed when the expectation holds again."""
    _health_inventory(bed, "p5.4xlarge")
    bed.enable_health_check(True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not [e for e in _log(bed) if e["node"] == "node2" and e["action"] == "held"]:
            time.sleep(1)
        held = [e for e in _log(bed) if e["node"] == "node2" and e["action"] == "held"]
        assert held and "never drains" in held[0]["reason"], _log(bed)
        assert bed.states()["node2"][0] == "idle"  # missing evidence drained nothing
        bed.set_scenario(2, HEALTHY)
        _health_inventory(bed, "p5.48xlarge")
        states = bed.wait_for(
            "node2 drained by the health check",
            lambda s: s.get("node2", ("", ""))[0] in ("drained", "draining") and s["node2"][1].startswith("gpuforge-health:"),
            90,
        )
        assert states["node2"][1].startswith("gpuforge-health: gpu.count: 1 GPUs visible, expected 8"), states
        assert states["node1"][0] == states["node3"][0] == "idle"  # healthy nodes are left alone
        # validate through Slurm cannot reach a drained node: its own outcome, fast, not a GPU failure
        transport = SlurmTransport(SlurmClient(env=bed.env, immediate_s=5))
        res = transport.run(Node(name="node2", host="node2"), "true", 10)
        # (Slurm 22.05 says "Requested nodes are busy" for a drained node under --immediate)
        assert res.outcome is Outcome.UNREACHABLE and "Unable to allocate resources" in res.detail, res.stderr
        assert res.duration_s < 30
        _health_inventory(bed, "p5.4xlarge")
        bed.wait_for("node2 resumed", lambda s: s.get("node2", ("", ""))[0] == "idle", 90)
    finally:
        bed.enable_health_check(False)
        bed.set_scenario(2, MISSING)
    actions = [(e["node"], e["action"]) for e in _log(bed) if e["action"] in ("drain", "resume")]
    assert actions[:2] == [("node2", "drain"), ("node2", "resume")], _log(bed)
    assert all(e["node"] == "node2" for e in _log(bed) if e["action"] in ("drain", "resume"))


def test_three_nodes_failing_at_once_under_a_bound_of_one_drain_exactly_one(bed: SlurmBed) -> None:
    """slurmctld asks every node for its health check at once (ping_nodes.c run_health_check).
    Every node's inventory says p5.48xlarge (8 GPUs) while its nvidia-smi shows one: `gpu.count`
    fails on all three in the same round. The bound is one node (max(1, floor(3 x 50 %))): exactly
    one is drained, and stays the only one over the next rounds; the others hold (or undo a drain
    that came after the first in the controller's order). The bed holds each node's first sinfo
    until all three have read (SUBSTITUTIONS.md), the interleaving in which every node drained
    before the drain was confirmed against the controller."""
    bed.enable_health_check(False)
    for i in (1, 2, 3):
        bed.set_scenario(i, HEALTHY)
    bed.health_inventory.write_text(json.dumps({**bed.tb.inventory(), "nodes": [
        {"name": h.name, "host": h.ip, "instance_type": "p5.48xlarge"} for h in bed.tb.hosts]}))  # fmt: skip
    start = len(_log(bed))
    bed.force_race(True)  # every node reads sinfo before any drains: certain, not left to timing
    bed.enable_health_check(True)
    try:
        deadline = time.monotonic() + 120
        rounds: dict[str, int] = {}
        while time.monotonic() < deadline and (len(rounds) < 3 or min(rounds.values()) < 3):
            time.sleep(1)
            rounds = {}
            for e in _log(bed)[start:]:
                if e["action"] != "drain":  # one entry a round: drain+undo is one round, a kept drain logs "none" after
                    rounds[e["node"]] = rounds.get(e["node"], 0) + 1
        assert len(rounds) == 3 and min(rounds.values()) >= 3, (rounds, _log(bed)[start:])
        bed.enable_health_check(False)
        time.sleep(3)  # a round that was under way finishes (its drain confirmed or undone)
        states = bed.states()
    finally:
        bed.enable_health_check(False)
        bed.force_race(False)
    log = _log(bed)[start:]
    drained = sorted(n for n, (st, _) in states.items() if st in ("drained", "draining"))
    assert len(drained) == 1, (states, log)
    assert states[drained[0]][1].startswith("gpuforge-health: gpu.count: 1 GPUs visible, expected 8"), states
    others = {e["action"] for e in log if e["node"] not in drained}
    assert others <= {"drain", "undo", "held"} and others & {"undo", "held"}, log
    # the race was played: all three drained in the first round, two undid their own drain
    assert {e["node"] for e in log if e["action"] == "drain"} == {"node1", "node2", "node3"}, log
    assert sorted(e["node"] for e in log if e["action"] == "undo") == sorted({"node1", "node2", "node3"} - {drained[0]})
    # the order came from slurmctld's reason times, read as epoch seconds (sinfo %H, SLURM_TIME_FORMAT=%s)
    kept = SlurmControl(SlurmClient(env=bed.env)).nodes()[drained[0]]
    assert kept.reason_time is not None and abs(kept.reason_time - time.time()) < 300, kept
    bed.client("scontrol", "update", f"nodename={drained[0]}", "state=resume")
    bed.set_scenario(2, MISSING)
    bed.wait_for("three idle nodes", lambda s: len(s) == 3 and all(v[0] == "idle" for v in s.values()), 30)


def test_nccl_pairs_through_one_srun_allocation_reach_the_ssh_verdict(
    bed: SlurmBed, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """NCCL between two nodes: over SSH an mpirun on the first node, through Slurm one
    `srun --mpi=pmix --nodes=2 --ntasks-per-node=8` allocation; both replay the same real capture
    (a 2-node p4de all_reduce_perf, nccl_f1_p4de_2node_srun.txt) and must judge it alike."""
    from gpuforge.cli import main

    bed.enable_health_check(False)
    for i in (1, 3):
        bed.set_scenario(i, "a100-nvswitch")
    inv = tmp_path / "p4de.json"
    nodes = [{"name": h.name, "host": h.ip, "instance_type": "p4de.24xlarge"} for h in bed.tb.hosts if h.index in (1, 3)]
    # efa_interfaces 0: the SSH path then runs `mpirun` (replayed), not the EFA installer's
    # /opt/amazon/openmpi/bin/mpirun, which no test host has.
    inv.write_text(json.dumps({**bed.tb.inventory(expect={"efa_interfaces": 0}), "profile": "cv-training",
                               "nodes": nodes}))  # fmt: skip
    monkeypatch.setenv("SLURM_CONF", bed.env["SLURM_CONF"])
    # Eight ranks a node on this 2-CPU machine (CPUs=8 by config_overrides): the rendered
    # task/affinity cannot bind 8 tasks to 2 CPUs ("only 2 bits in avail_map for 8 tasks"), so
    # these steps bind none (SUBSTITUTIONS.md). A p4de has 96 vCPUs for its 8 ranks.
    monkeypatch.setenv("SLURM_CPU_BIND", "none")
    docs = {}
    try:
        for transport in ("ssh", "slurm"):
            args = ["validate", "--inventory", str(inv), "--checks", "nccl.pair", "--format", "json",
                    "--out", str(tmp_path / transport), "--transport", transport, "--connect-timeout", "3"]  # fmt: skip
            with pytest.raises(SystemExit):
                main(args)
            docs[transport] = json.loads(capsys.readouterr().out)
    finally:
        for i in (1, 3):
            bed.set_scenario(i, HEALTHY)

    def pair(doc: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...], Any]]:
        return {(r["check"], r["level"], tuple(r["targets"]), json.dumps(r["observed"])) for r in doc["results"]
                if r["check"].startswith("nccl")}  # fmt: skip

    assert pair(docs["slurm"]) == pair(docs["ssh"]), [r["message"] for r in docs["slurm"]["results"]]
    # not two equal unknowns: the capture was measured and judged (78.33 GB/s bus bandwidth)
    assert ("nccl.busbw.inter", "pass", ("node1<->node3",), "78.33") in pair(docs["slurm"])
    [ev] = (tmp_path / "slurm" / "evidence" / "nccl").rglob("*.txt")
    assert '"outcome": "ok"' in ev.read_text() and "nccl_f1_p4de_2node_srun.txt" in ev.read_text()


def test_the_self_check_fails_a_node_whose_slurmd_has_not_registered(bed: SlurmBed) -> None:
    """The rendered self-check's Slurm lines, run against the bed's real slurmctld with only the
    node's name and the wait given: a registered idle node passes, a name no slurmd registered
    (a skipped or dead slurmd) is a miss, and a drained node is a miss that names the reason."""
    from gpuforge.components.userdata import stack_user_data
    from tests.slurm.conftest import slurm_stack

    phase = stack_user_data(slurm_stack("cv-training", nodeCount="2"), account_id="123456789012").files[
        "opt/gpuforge/phases/self-check.sh"]  # fmt: skip
    end = 'observe slurm_node "${slurm_state#State=}" ;;\nesac\n'
    lines = phase[phase.index('slurm_state=""'):phase.index(end) + len(end)]

    def self_check(name: str) -> list[str]:
        """On node1 as a node runs it: its namespaces, no SLURM_CONF (scontrol finds the files
        through the /run/slurm/conf link its slurmd made); `name` stands for the node's hostname."""
        script = ("set -euo pipefail\nmiss=()\nobserve() { echo \"observed $*\"; }\nsleep() { :; }\n"
                  f"hostname() {{ echo {name}; }}\n{lines}"
                  'for m in "${miss[@]}"; do echo "miss: $m"; done\n')  # fmt: skip
        pid = str(bed.tb.hosts[0].sshd_pid)
        env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
        run = subprocess.run(["nsenter", "-t", pid, "-n", "-u", "-m", "bash", "-c", script], env=env,
                             capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
        return run.stdout.splitlines()

    assert self_check("node1") == ["observed slurm_node IDLE"]
    [gone] = self_check("node9")
    assert gone.startswith("miss: slurmd has not registered with cv-training-head (no answer"), gone
    bed.client("scontrol", "update", "nodename=node3", "state=drain", "reason=admin: test drain")
    try:
        [drained] = self_check("node3")
        assert drained.startswith("miss: slurmd registered but the node is IDLE+DRAIN") and "admin: test drain" in drained
    finally:
        bed.client("scontrol", "update", "nodename=node3", "state=resume")
