"""validate through Slurm asks for the node's GPUs (finding 3 of issue 19).

The stacks render `ConstrainDevices=yes` (cgroup.conf): a step that asks for no GPU is fenced off
every GPU, and each node check would judge a node with none. The argv of every srun that
`validate --transport slurm` starts, node checks and NCCL pairs alike, is recorded here as the
client would run it (the command line, not the daemons: tests/slurm/test_slurm_testbed.py runs
these steps on real slurmd).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.validate import slurm
from gpuforge.validate.inventory import Node
from gpuforge.validate.slurm import SlurmClient, SlurmTransport, gres_by_node
from tests.slurm.conftest import slurm_stack


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    seen: list[list[str]] = []

    def fake_run(argv: Sequence[str], settings: SlurmClient, deadline_s: float) -> tuple[int, str, str, float]:
        seen.append(list(argv))
        if argv[0] == "sinfo":  # Slurm's own view of a node's Gres, as sinfo --format=%G prints it
            return 0, "gpu:a100:8(S:0-1)\n", "", 0.1
        return 0, "ok\n", "", 0.1

    monkeypatch.setattr(slurm, "_run", fake_run)
    return seen


def _srun(calls: list[list[str]]) -> list[list[str]]:
    return [c for c in calls if c[0] == "srun"]


@pytest.mark.parametrize("stack,itype,gres", [("cv-training", "p4de.24xlarge", "gpu:a100:8"),
                                               ("risk-sim", "p3dn.24xlarge", "gpu:v100:8")])  # fmt: skip
def test_node_checks_and_nccl_pairs_ask_for_every_gpu_of_the_node(
    calls: list[list[str]], stack: str, itype: str, gres: str
) -> None:
    nodes = [Node(name=f"{stack}-node0{i}", host=f"10.0.0.{i}", instance_type=itype) for i in (1, 2)]
    t = SlurmTransport(SlurmClient(gres=gres_by_node(nodes)))
    t.run(nodes[0], "nvidia-smi -L", 10)
    t.run_allocation([n.name for n in nodes], 8, ["all_reduce_perf", "-b", "8"], 60)
    node_check, pair = _srun(calls)
    assert f"--gres={gres}" in node_check and f"--nodelist={nodes[0].name}" in node_check
    assert f"--gres={gres}" in pair and "--ntasks-per-node=8" in pair and "--mpi=pmix" in pair
    assert [c for c in calls if c[0] == "sinfo"] == []  # the catalog answered, Slurm was not asked
    # the request is exactly the Gres= the stack's slurm.conf gives its nodes: it can be granted
    conf = render_head_user_data(slurm_stack(stack, os="ubuntu-24.04")).files["etc/slurm/slurm.conf"]
    assert f"Gres={gres} " in conf


def test_a_node_of_unknown_shape_asks_slurm_for_its_gres(calls: list[list[str]]) -> None:
    t = SlurmTransport(SlurmClient())
    t.run(Node(name="onprem1", host="onprem1"), "true", 10)
    t.run(Node(name="onprem1", host="onprem1"), "true", 10)
    sinfo = [c for c in calls if c[0] == "sinfo"]
    assert sinfo == [["sinfo", "--noheader", "--Node", "--nodes=onprem1", "--format=%G"]]  # once, then cached
    assert all("--gres=gpu:a100:8" in c for c in _srun(calls))


def test_the_rendered_cgroup_conf_constrains_devices() -> None:
    """Why the request matters: the stacks fence devices (a step sees only the GPUs it was given)."""
    files = render_head_user_data(slurm_stack("cv-training", os="ubuntu-24.04")).files
    assert "ConstrainDevices=yes" in files["etc/slurm/cgroup.conf"].splitlines()


# What real srun (Slurm 22.05.8) printed when a step asked for more GPUs than the node has: the dry
# run of scripts/device/slurm_gpu_run.sh on the build machine (real slurmctld and slurmd, one node
# configured gpu:h200:1), with the inventory's instance_type p5en.48xlarge (the catalog's eight).
_REFUSED = "srun: error: Unable to allocate resources: Requested node configuration is not available\n"


@pytest.mark.parametrize("slurm_has,hint", [("gpu:h200:1(S:0)\n", True), ("gpu:h200:8(S:0-1)\n", False)])
def test_a_step_refused_for_its_shape_says_what_was_asked_and_what_slurm_has(
    monkeypatch: pytest.MonkeyPatch, slurm_has: str, hint: bool
) -> None:
    def fake_run(argv: Sequence[str], settings: SlurmClient, deadline_s: float) -> tuple[int, str, str, float]:
        if argv[0] == "sinfo":
            return 0, slurm_has, "", 0.1
        return 1, "", _REFUSED, 0.2

    monkeypatch.setattr(slurm, "_run", fake_run)
    node = Node(name="lent-h200", host="127.0.0.1", instance_type="p5en.48xlarge")
    res = SlurmTransport(SlurmClient(gres=gres_by_node([node]))).run(node, "nvidia-smi", 10)
    assert res.outcome.value == "unreachable"
    assert res.detail.startswith("slurm: Unable to allocate resources: Requested node configuration is not available")
    if hint:  # the catalog's eight against the one Slurm knows: the mismatch is named, with the fix
        assert "asked for --gres=gpu:h200:8" in res.detail and "Slurm configures gpu:h200:1 on lent-h200" in res.detail
    else:  # same gres: the refusal has another cause, and no guess is added
        assert "asked for" not in res.detail
