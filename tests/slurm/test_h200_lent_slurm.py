"""Slurm on a real GPU: what a lent H200 showed (fixtures/h200_lent/SOURCES.md).

The run took the product's cgroup.conf (CgroupPlugin=cgroup/v2, ConstrainDevices=yes) to a cgroup
v2 machine with a GPU, which the Slurm bed (cgroup v1, stand-in device files) cannot be: a step
with `--gres=gpu:h200:1` saw the H200, a step without saw none and was refused /dev/nvidia0, and
the node-installed gpuforge's `validate --transport slurm` passed the GPU through srun. These tests
hold that evidence to today's code: the cgroup.conf it ran must still be the one the product
renders (else rerun scripts/device/slurm_gpu_run.sh), and validate's parsers must still read what
srun brought back as one healthy H200. What the run showed beyond that (the steps' cgroups, the
refused /dev/nvidia0, slurmd's two starts) is the captured log itself, described in SOURCES.md: a
test that re-read a capture's own words could fail only if the capture were edited.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.common.results import Level
from gpuforge.validate.gpu.inventory import GpuInventoryCheck
from gpuforge.validate.slurm import _gpu_gres
from gpuforge.validate.thresholds import build_expectations
from tests.slurm.conftest import slurm_stack

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "h200_lent"


def _sections() -> dict[str, str]:
    """The run's log by its `== name` headers."""
    parts = re.split(r"^== (.+)$", (FIXTURES / "slurm-gpu.log").read_text(), flags=re.MULTILINE)
    return {name.strip(): body for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_the_cgroup_conf_the_h200_ran_is_the_one_the_product_renders() -> None:
    rendered = render_head_user_data(slurm_stack("cv-training", os="ubuntu-24.04", nodeCount="4")).files
    ours = rendered["etc/slurm/cgroup.conf"]
    config = _sections()["configuration"]
    start = config.index("# cgroup.conf of cluster cv-training")
    ran = config[start : config.index("# device run: PID 1", start)]
    assert ran == ours, "cgroup.conf changed since the lent-H200 run: rerun scripts/device/slurm_gpu_run.sh"
    assert "CgroupPlugin=cgroup/v2" in ran and "ConstrainDevices=yes" in ran


def test_the_transport_asks_for_the_gres_slurm_reported_on_the_h200() -> None:
    """validate's SlurmTransport reads sinfo's %G to build --gres (without an instance type): the
    H200 node's `gpu:h200:1` is the gres the step that saw the GPU asked for."""
    daemons = _sections()["daemons"]
    [line] = [ln for ln in daemons.splitlines() if ln.startswith("lent-h200 ")]
    assert _gpu_gres(line.split()[2]) == "gpu:h200:1"


def test_what_srun_brought_back_reads_as_one_healthy_h200() -> None:
    text = (FIXTURES / "srun-gpu.inventory.txt").read_text()
    stdout = text.split("--- stdout ---\n", 1)[1].split("\n--- stderr ---", 1)[0]
    expect = build_expectations(None, "p5en.48xlarge", {"gpus_per_node": 1, "interconnect": "none"})
    levels = {r.check: r.level for r in GpuInventoryCheck().run_on_output("lent-h200", stdout, expect)}
    assert levels and set(levels.values()) == {Level.PASS}, levels
