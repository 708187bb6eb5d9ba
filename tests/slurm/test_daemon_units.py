"""The rendered pid files against the units Ubuntu 24.04's packages start the daemons with.

Slurm 23.11.4's slurmctld.service and slurmdbd.service (Debian's slurm-wlm 23.11.4-1.2, which
Ubuntu 24.04 ships; SchedMD's own etc/*.service.in at slurm-23-11-4-1 alike) run the daemon as
User=slurm with RuntimeDirectory=<daemon>: systemd makes /run/<daemon>, owned by that user, and
the unit has no PIDFile=. A PidFile directly under /run is root's: the daemon, as slurm, logs
"Unable to open pidfile" (src/common/daemonize.c create_pidfile, slurm-23-11-4-1) and runs without
one. The ported units are in tests/slurm/units/ with their source and commit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuforge.bootstrap.slurm_head import render_head_user_data
from tests.slurm.conftest import slurm_stack

UNITS = Path(__file__).resolve().parent / "units"


def _service(unit: Path) -> dict[str, str]:
    """The [Service] section's Key=Value lines (the last one wins, as systemd reads single-value keys)."""
    section, out = "", {}
    for line in unit.read_text().splitlines():
        if line.startswith("["):
            section = line.strip()
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def _conf(text: str) -> dict[str, str]:
    return {m[1]: m[2] for m in re.finditer(r"^([A-Za-z]+)=(\S+)$", text, re.M)}


@pytest.mark.parametrize(("daemon", "conf", "pid_key"), [
    ("slurmdbd", "etc/slurm/slurmdbd.conf.in", "PidFile"),
    ("slurmctld", "etc/slurm/slurm.conf", "SlurmctldPidFile"),
])  # fmt: skip
def test_pid_files_are_in_the_runtime_directory_the_packaged_unit_gives_its_user(
    daemon: str, conf: str, pid_key: str
) -> None:
    unit = _service(UNITS / f"debian-23.11.4-1.2-{daemon}.service")
    assert unit["User"] == "slurm" and unit["RuntimeDirectory"] == daemon and "PIDFile" not in unit
    files = render_head_user_data(slurm_stack("cv-training")).files
    rendered = _conf(files[conf])
    # the daemon runs as the unit's user, which is the SlurmUser the rendered files name ...
    assert rendered["SlurmUser"] == unit["User"]
    # ... and writes its pid file in the directory systemd makes for that user
    assert Path(rendered[pid_key]).parent == Path("/run") / unit["RuntimeDirectory"]
