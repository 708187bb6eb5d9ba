"""The embedded accounting database on its own EBS volume: the head runs the GPU nodes' data-volume
phase at MariaDB's datadir, before MariaDB is installed; a blank volume is formatted once, a volume
with a filesystem (the one a replaced head leaves) is kept; a declared volume that never attaches
fails the boot rather than letting MariaDB write to the root volume; MariaDB requires the mount.

The phase runs in the bootstrap sandbox (tests/bootstrap/bootstrap_sandbox.py: the rendered script,
with stand-ins for blkid, mkfs.ext4 and mount; tests/SUBSTITUTIONS.md). The stack side (volume,
attachment, retain-on-delete, cost) is in test_slurm_stack.py."""

from __future__ import annotations

from pathlib import Path

from gpuforge.bootstrap.slurm_head import render_head_user_data
from tests.bootstrap.bootstrap_sandbox import Sandbox
from tests.slurm.conftest import slurm_stack

DATADIR = "/var/lib/mysql"
DB_DEV = "dev/nvme1n1"  # the sandbox's one non-root EBS disk (m6i has no instance store)
DROPIN = "etc/systemd/system/mariadb.service.d/gpuforge-datadir.conf"
EXT = {"accountingDbEndpoint": "acct.cluster-x.us-east-1.rds.amazonaws.com:3307",
       "accountingDbPasswordParameter": "/site/slurm/db-password"}  # fmt: skip


def _head(tmp_path: Path, **env: str) -> Sandbox:
    return Sandbox(tmp_path, slurm_stack("cv-training"), "cv-training-head", head=True, env_overrides=env)


def test_the_volume_is_mounted_at_the_datadir_before_mariadb_is_installed() -> None:
    r = render_head_user_data(slurm_stack("cv-training"))
    assert r.plan is not None and r.plan.data_volume is not None
    assert (r.plan.data_volume.type, r.plan.data_volume.size_gib, r.plan.data_volume.mount) == ("gp3", 50, DATADIR)
    names = [p.name for p in r.plan.phases]
    assert names.index("base") < names.index("data-volume") < names.index("slurm-accounting")
    assert "apt_install slurmdbd mariadb-server" in r.files["opt/gpuforge/phases/slurm-accounting.sh"]
    assert r.files["opt/gpuforge/phases/data-volume.sh"].count(f"mnt={DATADIR}\n") == 1
    assert f"datadir = {DATADIR}\n" in r.files["etc/mysql/mariadb.conf.d/90-gpuforge.cnf"]
    # MariaDB needs the mount: at a reboot without the volume it does not start on the root volume
    assert f"[Unit]\nRequiresMountsFor={DATADIR}\n" in r.files[DROPIN]
    # and the runner waits for the mount unit at later boots, as for the GPU nodes' data volume
    assert "After=var-lib-mysql.mount\n" in r.files["etc/systemd/system/gpuforge-bootstrap.service"]


def test_an_existing_database_gets_no_volume_and_no_mount_requirement() -> None:
    r = render_head_user_data(slurm_stack("cv-training", **EXT))
    assert r.plan is not None and r.plan.data_volume is None
    assert "data-volume" not in [p.name for p in r.plan.phases]
    assert DROPIN not in r.files and "opt/gpuforge/phases/data-volume.sh" not in r.files


def test_a_blank_volume_is_formatted_and_mounted_once(tmp_path: Path) -> None:
    sb = _head(tmp_path)
    first = sb.run_phase("data-volume")
    assert first.returncode == 0, first.stderr[-2000:]
    assert sb.changed()
    dev = str(sb.root / DB_DEV)
    assert [c for c in sb.calls() if c[0] == "mkfs.ext4"] == [["mkfs.ext4", "-q", "-L", "gpuforge-data", dev]]
    fstab = (sb.root / "etc/fstab").read_text()
    [line] = [ln for ln in fstab.splitlines() if f" {DATADIR} " in ln]
    assert line.startswith("UUID=fake-uuid-") and line.endswith(" ext4 defaults,nofail,x-systemd.device-timeout=30s 0 2")
    assert (sb.state / "mounts" / DATADIR.replace("/", "_")).exists()
    # a second boot: nothing formatted, no second fstab line, nothing changed
    second = sb.run_phase("data-volume")
    assert second.returncode == 0, second.stderr[-2000:]
    assert not sb.changed()
    assert not [c for c in sb.last_run_calls() if c[0] in ("mkfs.ext4", "mount")]
    assert (sb.root / "etc/fstab").read_text() == fstab


def test_a_volume_with_a_filesystem_is_kept(tmp_path: Path) -> None:
    """The volume a replaced head leaves behind carries the database: it is never formatted."""
    sb = _head(tmp_path)
    (sb.state / "fs").mkdir(parents=True, exist_ok=True)
    (sb.state / "fs" / f"/{DB_DEV}".replace("/", "_")).write_text("old-db-uuid\n")
    done = sb.run_phase("data-volume")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not [c for c in sb.calls() if c[0] == "mkfs.ext4"]
    assert f"UUID=old-db-uuid {DATADIR} ext4 defaults,nofail" in (sb.root / "etc/fstab").read_text()


def test_a_declared_volume_that_never_attaches_fails_the_phase(tmp_path: Path) -> None:
    """Never silently on the root volume: no volume, no mount, and the boot stops here."""
    sb = _head(tmp_path, FAKE_NO_DATA_VOLUME="1")
    done = sb.run_phase("data-volume")
    assert done.returncode != 0
    assert (sb.root / "var/lib/gpuforge/last-error").read_text().strip() == "no EBS data volume attached after 60 tries"
    assert not (sb.state / "mounts" / DATADIR.replace("/", "_")).exists()
    assert f" {DATADIR} " not in (sb.root / "etc/fstab").read_text()
