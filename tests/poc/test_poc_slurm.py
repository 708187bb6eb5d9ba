"""`gpuforge poc --transport slurm` on the Slurm bed (tests/slurm/slurmbed.py): the run is one srun
step on node1 (every GPU of the node requested by gres), as validate's checks run there. The node's
nvidia-smi replays an H100 (the bed's replay shims), so the command asks docker for `--gpus all`;
the docker stand-in runs the shipped script with this machine's CPU torch, and the script itself
finds no CUDA: the result is a labelled CPU run (tests/SUBSTITUTIONS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.validate.poc import load_results
from tests.poc.standins import install_docker, torch_available

pytestmark = [pytest.mark.netns, pytest.mark.slow,
              pytest.mark.skipif(torch_available() is not None, reason=str(torch_available()))]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bed() -> Iterator[object]:
    from tests.slurm.slurmbed import SlurmBed, slurm_missing

    why = slurm_missing()
    if why:
        pytest.skip(why)
    system = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2])"],
                            capture_output=True, text=True, check=False).stdout.strip()
    if system != str(sys.version_info[:2]):
        pytest.skip(f"/usr/bin/python3 is {system or 'absent'}, the venv {sys.version_info[:2]}: torch would not load")
    b = SlurmBed(1).up()
    try:
        b.wait_for("one idle node", lambda s: len(s) == 1 and all(v[0] == "idle" for v in s.values()), 60)
        yield b
    finally:
        b.down()


def test_poc_through_srun_on_the_slurm_bed(bed: object, tmp_path: Path) -> None:
    from tests.slurm.slurmbed import SlurmBed

    assert isinstance(bed, SlurmBed)
    bin_dir, log = tmp_path / "bin", tmp_path / "docker.jsonl"
    install_docker(bin_dir, log, "/usr/bin/python3", sysconfig.get_paths()["purelib"])
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps(bed.tb.inventory(profile="cv-training")))
    # srun exports the caller's environment to the step: PATH finds the stand-in on the node
    env = {**os.environ, **bed.env, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "gpuforge.cli", "--project-dir", str(ROOT), "poc", "--stack", "cv-training",
                           "--inventory", str(inv), "--transport", "slurm", "--workload", "mc-fp64", "--quick",
                           "--out", str(tmp_path / "out"), "--format", "plain"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "node1\tmc-fp64\tok\tCPU (" in proc.stdout and "# cost of 1e9 paths: $" in proc.stdout
    [asked] = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert asked["options"]["--gpus"] == "all"  # the node's nvidia-smi (replayed) listed GPUs
    [doc] = load_results(tmp_path / "out")
    assert doc["run"]["transport"] == "slurm" and doc["run"]["gpus_seen"] >= 1 and doc["label"] == "measured-cpu"
    assert doc["provenance"]["host"] == "node1"
