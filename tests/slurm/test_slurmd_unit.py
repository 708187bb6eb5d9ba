"""slurmd starts on a configless GPU node: systemd itself evaluates the packaged slurmd.service
with the drop-in the node's user data carries (finding 1 of issue 19).

Debian's and Ubuntu's unit keep `ConditionPathExists=/etc/slurm/slurm.conf`; a configless node
has no slurm.conf, so systemd skips the start and `systemctl start slurmd` exits 0. SchedMD's own
unit comments the line out. `systemd-analyze condition --unit` loads the unit and its drop-ins
from the given root and evaluates its conditions as systemd's manager does on this machine's
file system, which (like a configless node) has no /etc/slurm/slurm.conf.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuforge.bootstrap.render import SLURMD_DROPIN
from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.components.userdata import stack_user_data
from tests.slurm.conftest import slurm_stack

UNITS = Path(__file__).resolve().parent / "units"
PACKAGED = UNITS / "debian-22.05.8-slurmd.service"


def _why_not() -> str | None:
    if shutil.which("systemd-analyze") is None:
        return "systemd-analyze not installed (package systemd)"
    if Path("/etc/slurm/slurm.conf").exists():
        return "this machine has /etc/slurm/slurm.conf: the condition would hold here without the drop-in"
    return None


def _condition(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "condition", f"--root={root}", "--unit=slurmd.service"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _root(tmp: Path, dropin: str | None) -> Path:
    root = tmp / ("with" if dropin is not None else "without")
    unit = root / "lib/systemd/system/slurmd.service"
    unit.parent.mkdir(parents=True)
    shutil.copy(PACKAGED, unit)
    if dropin is not None:
        (root / SLURMD_DROPIN).parent.mkdir(parents=True)
        (root / SLURMD_DROPIN).write_text(dropin)
    return root


def test_the_ported_unit_is_the_one_this_machine_has() -> None:
    """The fixture is the packaged file, not a paraphrase: compared with the installed one when there."""
    installed = Path("/lib/systemd/system/slurmd.service")
    if not installed.exists():
        pytest.skip("Debian's slurmd is not installed here (scripts/setup.sh --with-test-hosts)")
    ported = "".join(line for line in PACKAGED.read_text().splitlines(keepends=True) if not line.startswith("# "))
    assert ported == installed.read_text()
    assert "ConditionPathExists=/etc/slurm/slurm.conf\n" in ported


@pytest.mark.parametrize("stack,os_name", [("cv-training", "ubuntu-24.04"), ("risk-sim", "ubuntu-24.04")])
def test_systemd_starts_the_packaged_slurmd_with_the_nodes_drop_in(tmp_path: Path, stack: str, os_name: str) -> None:
    if why := _why_not():
        pytest.skip(why)
    bare = _condition(_root(tmp_path, None))
    # the packaged unit alone: systemd would skip slurmd on this node, silently
    assert bare.returncode != 0, bare.stdout + bare.stderr
    assert "ConditionPathExists=/etc/slurm/slurm.conf failed" in bare.stdout + bare.stderr
    node = stack_user_data(slurm_stack(stack, os=os_name, nodeCount="2"), account_id="123456789012")
    res = _condition(_root(tmp_path, node.files[SLURMD_DROPIN]))
    assert res.returncode == 0, res.stdout + res.stderr
    # cloud-init writes the drop-in before the bootstrap's own systemctl calls start slurmd
    assert f"/{SLURMD_DROPIN}" in node.files["user-data.yaml"]
    start = node.files["opt/gpuforge/phases/slurm-start.sh"]
    assert "systemctl start slurmd" in start and "systemctl daemon-reload" in node.files["opt/gpuforge/phases/slurm.sh"]


def test_the_head_keeps_the_packaged_unit_and_carries_slurm_conf() -> None:
    """slurmctld's unit has the same condition; the head's user data writes /etc/slurm/slurm.conf."""
    head = render_head_user_data(slurm_stack("cv-training", os="ubuntu-24.04"))
    assert "etc/slurm/slurm.conf" in head.files and SLURMD_DROPIN not in head.files
