"""The boot-time bootstrap unit waits for the scratch/data mount jobs (ordering only): both are
`nofail` in fstab, so nothing else orders them before it, and a phase racing systemd's own
mount of the same path fails with "already mounted"."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gpuforge.bootstrap.render import mount_unit
from gpuforge.components.userdata import stack_user_data
from gpuforge.core.config import StackConfig

UNIT = "etc/systemd/system/gpuforge-bootstrap.service"


@pytest.mark.skipif(shutil.which("systemd-escape") is None, reason="systemd-escape (systemd) not installed")
@pytest.mark.parametrize("path", ["/scratch", "/data", "/mnt/fast-scratch", "/opt/dlami/nvme", "/a b/.x", "/.hidden"])
def test_mount_unit_names_match_systemd(path: str) -> None:
    real = subprocess.run(["systemd-escape", "--path", "--suffix=mount", path],
                          capture_output=True, text=True, check=True, timeout=10).stdout.strip()  # fmt: skip
    assert mount_unit(path) == real


def test_bootstrap_unit_is_ordered_after_its_mounts(stack_cfg: dict[str, StackConfig]) -> None:
    risk = stack_user_data(stack_cfg["risk-sim"], "risk-1", account_id="123456789012").files[UNIT]
    assert "After=scratch.mount data.mount" in risk  # p3dn instance store + the st1 data volume
    # a failed mount (stale UUID after stop/start) must not keep the bootstrap from rebuilding it
    assert "\nRequires" not in risk and "RequiresMountsFor" not in risk
    nlp = stack_user_data(stack_cfg["nlp-inference"], "nlp-1").files[UNIT]
    assert "After=scratch.mount\n" in nlp
