"""`gpuforge-slurm-accounting register` is done only when slurmctld enforces what it registered.

slurmctld answers slurmdbd's association update before applying it (Slurm 22.05
src/slurmctld/proc_req.c _slurm_rpc_accounting_update_msg, slurm-22-05-8-1: "Send message back to
the caller letting him know we got it"), so `sacctmgr add user` can return while slurmctld does
not know the user yet; a job submitted then is refused at submission. That was the accounting
bed's occasional `sbatch` exit 1 under load (it submits right after the bed's register step).

Here the rendered script runs against stand-ins for sacctmgr and scontrol (tests/SUBSTITUTIONS.md);
the stand-in scontrol prints association lines in the format slurmctld 22.05.8 printed them on the
accounting bed (`scontrol -o show assoc_mgr flags=assoc`). The accounting bed runs the same step
against the real daemons (tests/slurm/test_accounting_testbed.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gpuforge.bootstrap.slurm import ACCOUNTING_SCRIPT
from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.core.scheduler import SlurmSettings
from tests.slurm.conftest import slurm_stack

TRES = "cpu=N(0),mem=N(0),energy=N(0),node=N(0),billing=N(0),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu={g}(0),gres/gpu:a100=N(0)"
# one record as `scontrol -o show assoc_mgr flags=assoc` printed it (slurmctld 22.05.8, accounting bed)
LINE = ("ClusterName=cv-training Account={account} UserName={user} Partition= Priority=0 ID=6 "
        "SharesRaw/Norm/Level/Factor=1/18446744073709551616.00/1/0.00 UsageRaw/Norm/Efctv=0.00/1.00/0.00 "
        "ParentAccount= Lft=3 DefAssoc=Yes GrpJobs=N(0) GrpJobsAccrue=N(0) GrpSubmitJobs=N(0) GrpWall=N(0.00) "
        "GrpTRES={tres} GrpTRESMins={mins} GrpTRESRunMins={mins} MaxJobs= MaxJobsAccrue= MaxSubmitJobs= "
        "MaxWallPJ= MaxTRESPJ= MaxTRESPN= MaxTRESMinsPJ= MinPrioThresh=")  # fmt: skip

SACCTMGR = r"""#!/bin/bash
printf '%s\n' "$*" >>"$FAKE_DIR/sacctmgr.log"
arg() { local a; for a; do [[ $a == "$KEY"=* ]] && { echo "${a#*=}"; return; }; done; }
case "$*" in
  *"show tres"*) echo 1001 ;;
  *"show account"*) KEY=name arg "$@" ;;
  *"show association"*format=user) KEY=user arg "$@" ;;
esac
exit 0
"""
SCONTROL = r"""#!/bin/bash
n=$(( $(cat "$FAKE_DIR/scontrol.count" 2>/dev/null || echo 0) + 1 )); echo "$n" >"$FAKE_DIR/scontrol.count"
echo "Current Association Manager state"
echo "Association Records"
if [ "$n" -gt "$FAKE_CTLD_AFTER" ]; then cat "$FAKE_DIR/assocs"; else head -n1 "$FAKE_DIR/assocs"; fi
"""


def _records(slurm: SlurmSettings, wrong_user: str | None = None) -> str:
    acct = slurm.accounting
    assert acct is not None
    mins = TRES.format(g="N")
    lines = [LINE.format(account="root", user="", tres=mins, mins=mins)]
    lines += [LINE.format(account=a.name, user="", tres=TRES.format(g=a.gpu_quota), mins=mins) for a in acct.accounts]
    for u in acct.users:
        limit = "N" if u.gpu_limit is None or u.name == wrong_user else u.gpu_limit
        lines.append(LINE.format(account=u.account, user=f"{u.name}({u.uid})", tres=TRES.format(g=limit), mins=mins))
    return "\n".join(lines) + "\n"


def _register(tmp_path: Path, after: int, wrong_user: str | None = None) -> tuple[subprocess.CompletedProcess[str], int]:
    cfg = slurm_stack("cv-training")
    assert cfg.slurm is not None
    script = tmp_path / "gpuforge-slurm-accounting"
    script.write_text(render_head_user_data(cfg).files[ACCOUNTING_SCRIPT])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sacctmgr", SACCTMGR), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "assocs").write_text(_records(cfg.slurm, wrong_user))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path), "FAKE_CTLD_AFTER": str(after),
           "GPUFORGE_POLL_S": "0"}  # fmt: skip
    res = subprocess.run(["bash", str(script), "register"], env=env, capture_output=True, text=True, timeout=60, check=False)
    count = int((tmp_path / "scontrol.count").read_text()) if (tmp_path / "scontrol.count").exists() else 0
    return res, count


def test_register_returns_once_slurmctld_holds_every_association(tmp_path: Path) -> None:
    res, polls = _register(tmp_path, after=3)
    assert res.returncode == 0, res.stderr
    assert polls == 4  # three answers without the teams' associations, then the one with them
    assert "set user cluster=cv-training account=vision user=vana GrpTRES=gres/gpu=8" in res.stdout


def test_register_fails_when_slurmctld_never_enforces_them(tmp_path: Path) -> None:
    res, polls = _register(tmp_path, after=10_000)
    assert res.returncode == 1 and polls == 60
    assert res.stderr.startswith("gpuforge-slurm-accounting: slurmctld does not enforce the associations of")
    assert " vision " in res.stderr and " vision/vana " in res.stderr and " search/sbo " in res.stderr


def test_a_user_whose_limit_slurmctld_does_not_hold_yet_is_waited_for(tmp_path: Path) -> None:
    """vana's own GrpTRES=gres/gpu=8 (stacks/teams/vision.yaml) not yet in slurmctld: not done."""
    res, _ = _register(tmp_path, after=0, wrong_user="vana")
    assert res.returncode == 1
    assert res.stderr.strip().endswith("associations of vision/vana after 60 tries (scontrol show assoc_mgr)")
