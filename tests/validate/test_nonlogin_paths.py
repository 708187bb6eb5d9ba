"""What validate's node commands find in a non-login SSH session, where /etc/profile.d (and with
it the EFA installer's PATH entry) is never read."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from gpuforge.validate import collective
from gpuforge.validate.checks import Expectations
from gpuforge.validate.gpu.efa import EFA_FI_INFO, EfaProviderCheck
from gpuforge.validate.nccl import EFA_MPIRUN
from gpuforge.validate.stagehost import PairPlan

FI_INFO = "#!/bin/sh\nprintf 'provider: efa\\n    fabric: efa\\n    domain: rdmap16s27-rdm\\n    type: FI_EP_RDM\\n'\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a private mount namespace over /opt)")
def test_efa_check_finds_fi_info_where_the_installer_puts_it(tmp_path: Path) -> None:
    """/opt/amazon/efa/bin/fi_info exists, PATH is a non-login session's: the check still runs it."""
    (tmp_path / "fi_info").write_text(FI_INFO)
    (tmp_path / "fi_info").chmod(0o755)
    cmd = EfaProviderCheck().command()
    script = (
        "mount -t tmpfs gf-opt /opt && mkdir -p /opt/amazon/efa/bin && "
        f"cp {tmp_path}/fi_info {EFA_FI_INFO} && exec sh -c {shlex.quote(cmd)}"
    )
    r = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        env={"PATH": "/usr/local/bin:/usr/bin:/bin"}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    info = EfaProviderCheck().parse(r.stdout)
    assert info.installed and info.rdm_domains() == ["rdmap16s27-rdm"], r.stdout + r.stderr


def test_efa_pairs_call_the_efa_installers_mpirun_by_absolute_path() -> None:
    efa = collective.command(("10.0.0.1", "10.0.0.2"), Expectations(gpus_per_node=8, efa_interfaces=4), PairPlan())
    argv = shlex.split(efa[0].split("{ ", 1)[1])
    assert argv[2] == EFA_MPIRUN and EFA_MPIRUN.startswith("/")
    plain = collective.command(("10.0.0.1", "10.0.0.2"), Expectations(gpus_per_node=8), PairPlan())
    assert shlex.split(plain[0].split("{ ", 1)[1])[2] == "mpirun"
