"""`gpuforge-slurm-accounting dbd-conf` writes slurmdbd.conf through a 0600 temporary file beside
it. A run that fails after making that file (no slurmdbd.conf.in yet, a chown to a user that does
not exist) must not leave it behind: it can hold the database password, and every retry of the
phase would add one. Found as an empty /etc/slurm/slurmdbd.conf.XXXXXX on a build machine."""

from __future__ import annotations

import dataclasses
import getpass
import subprocess
from pathlib import Path

from gpuforge.bootstrap.slurm import ACCOUNTING_SCRIPT, layout_for, render_accounting
from tests.slurm.conftest import slurm_stack

PASSWORD = "Zq3k9Lm2Xw8Rt5Yv\n"


def _script(tmp_path: Path, slurm_user: str) -> Path:
    cfg = slurm_stack("cv-training")
    assert cfg.slurm is not None
    base = layout_for(cfg.slurm, "files")
    conf = tmp_path / "etc"
    conf.mkdir()
    layout = dataclasses.replace(base, paths=dataclasses.replace(base.paths, conf_dir=str(conf), slurm_user=slurm_user))
    script = tmp_path / "gpuforge-slurm-accounting"
    script.write_text(render_accounting(layout)[ACCOUNTING_SCRIPT])
    return script


def _dbd_conf(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), "dbd-conf"], input=PASSWORD, capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip


def test_a_write_that_fails_on_a_missing_template_leaves_no_temporary_file(tmp_path: Path) -> None:
    res = _dbd_conf(_script(tmp_path, getpass.getuser()))  # no slurmdbd.conf.in: cat fails after mktemp
    assert res.returncode != 0 and "slurmdbd.conf.in" in res.stderr
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == []


def test_a_write_that_fails_on_chown_leaves_no_file_with_the_password(tmp_path: Path) -> None:
    script = _script(tmp_path, "no-such-user-gf")
    (tmp_path / "etc" / "slurmdbd.conf.in").write_text("DbdHost=localhost\n")
    res = _dbd_conf(script)  # the password is in the temporary file when chown fails
    assert res.returncode != 0 and "no-such-user-gf" in res.stderr
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == ["slurmdbd.conf.in"]


def test_a_good_write_is_private_and_says_so_once(tmp_path: Path) -> None:
    script = _script(tmp_path, getpass.getuser())
    (tmp_path / "etc" / "slurmdbd.conf.in").write_text("DbdHost=localhost\n")
    first, again = _dbd_conf(script), _dbd_conf(script)
    assert (first.returncode, again.returncode) == (0, 0), first.stderr + again.stderr
    conf = tmp_path / "etc" / "slurmdbd.conf"
    assert first.stdout == f"wrote {conf}\n" and again.stdout == ""
    assert conf.read_text() == "DbdHost=localhost\nStoragePass=Zq3k9Lm2Xw8Rt5Yv\n"
    assert conf.stat().st_mode & 0o077 == 0
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == ["slurmdbd.conf", "slurmdbd.conf.in"]
