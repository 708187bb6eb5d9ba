"""Enroot's paths work for every user, not only root and the first comer (finding 6 of issue 19).

Enroot 3.5.0 reads /etc/enroot/enroot.conf and then, as the job's user, runs
`(umask 077 && mkdir -p "$ENROOT_CACHE_PATH" "$ENROOT_DATA_PATH" "$ENROOT_RUNTIME_PATH")`
(enroot.in). That code is ported below verbatim; it runs here as two unprivileged users against
the directories and enroot.conf that the GPU node's pyxis phase makes (its own lines, run with a
root of our own), and systemd-tmpfiles makes /run/enroot from the rendered tmpfiles.d line as
at every boot. Each user then writes into each of its three directories.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.components.userdata import stack_user_data
from tests.slurm.conftest import slurm_stack

# NVIDIA/enroot tag v3.5.0 (commit c7dc4a6b66e817af5ceb7d5315850696067b3f80), enroot.in: line 22
# (set -euo pipefail), lines 27-48 (config::export, config::load) and line 105, verbatim.
ENROOT_IN = r'''set -euo pipefail

config::export() {
    [ -n "${3-}" ] && export "$1=$2" || export "$1=${!1:-$2}"
}

config::load() {
    local -r file="$1" overwrite="${2-}"

    if [ -s "${file}" ] && ! "${BASH}" -n "${file}" > /dev/null 2>&1; then
        printf "Invalid configuration file: %s\n" "${file}"
        exit 1
    fi
    if [ -e "${file}" ]; then
        while IFS=$' \t=' read -r key value; do
            if [[ "${key}" =~ ^ENROOT_[[:upper:]_]+$ ]] ||
               [[ "${key}" =~ ^(MELLANOX_|NVIDIA_) ]] ||
               [[ "${key}" =~ ^SSL_CERT_(DIR|FILE)$ ]] ||
               [[ "${key}" =~ ^(all|no|http|https)_proxy$ ]]; then
                config::export "${key}" "$(eval echo "${value}")" "${overwrite}"
            fi
        done < "${file}"
   fi
}
'''
ENROOT_MKDIR = '(umask 077 && mkdir -p "${ENROOT_CACHE_PATH}" "${ENROOT_DATA_PATH}" "${ENROOT_RUNTIME_PATH}")\n'
USERS = (60001, 60002)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (the phase's directories, then two other users)"
    if shutil.which("setpriv") is None or shutil.which("systemd-tmpfiles") is None:
        return "needs setpriv (util-linux) and systemd-tmpfiles (systemd)"
    return None


@pytest.fixture
def root() -> Iterator[Path]:
    # Not under pytest's tmp_path: that is 0700 root's, and the users must reach their directories.
    top = Path(tempfile.mkdtemp(prefix="gf-enroot-"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _phase_lines(phase: str, lib: str) -> str:
    """The phase's enroot.conf, tmpfiles.d and directory lines, with lib.sh's own put()."""
    start = phase.index('put "$R/etc/enroot/enroot.conf"')
    end = phase.index("done\n", start) + len("done\n")
    put = re.search(r"^put\(\) \{.*?^\}\n", lib, flags=re.S | re.M)
    assert put is not None
    return 'changed() { echo "changed: $*"; }\n' + put.group(0) + phase[start:end]


def _as_user(uid: int, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "env", "-i",
                           f"HOME=/nonexistent-{uid}", "PATH=/usr/bin:/bin", "bash", "-c", script],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def test_every_user_gets_its_own_enroot_directories(root: Path) -> None:
    if why := _why_not():
        pytest.skip(why)
    node = stack_user_data(slurm_stack("cv-training", nodeCount="2"), account_id="123456789012")
    lines = _phase_lines(node.files["opt/gpuforge/phases/pyxis.sh"], node.files["opt/gpuforge/lib.sh"])
    made = subprocess.run(["bash", "-c", f"set -euo pipefail\nR={root}\n{lines}"], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    # The node's enroot.conf names the node's paths; here they live under this test's root.
    conf = (root / "etc/enroot/enroot.conf").read_text()
    assert "/cache/user-$(id -u)" in conf and "/data/user-$(id -u)" in conf and "/run/enroot/user-$(id -u)" in conf
    local = root / "enroot.conf"
    local.write_text(conf.replace("/run/", f"{root}/run/").replace(" /scratch/", f" {root}/scratch/"))
    # /run is a tmpfs: at the next boot systemd-tmpfiles makes /run/enroot from the rendered line
    shutil.rmtree(root / "run")
    tmpfiles = subprocess.run(["systemd-tmpfiles", "--create", f"--root={root}"], capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
    assert oct((root / "run/enroot").stat().st_mode & 0o7777) == "0o1777", tmpfiles.stderr
    script = (ENROOT_IN + f'config::load "{local}"\n' + ENROOT_MKDIR
              + 'for d in "$ENROOT_CACHE_PATH" "$ENROOT_DATA_PATH" "$ENROOT_RUNTIME_PATH"; do touch "$d/layer"; done\n'
              + 'echo "$ENROOT_DATA_PATH"\n')  # fmt: skip
    data = {}
    for uid in USERS:
        run = _as_user(uid, script)
        assert run.returncode == 0, f"user {uid}: {run.stderr}"
        data[uid] = Path(run.stdout.strip())
    assert data[USERS[0]] != data[USERS[1]]
    for uid, path in data.items():
        assert path.stat().st_uid == uid and oct(path.stat().st_mode & 0o777) == "0o700"
    # one user can neither read another's directory (0700) nor move it away (sticky parent)
    a = data[USERS[0]]
    peek = _as_user(USERS[1], f'ls "{a}" 2>/dev/null && exit 3; mv "{a}" "{a}.gone" 2>/dev/null && exit 4; exit 0')
    assert peek.returncode == 0, peek
    for parent in {p.parent for p in data.values()} | {root / "run/enroot", root / "scratch/enroot/cache"}:
        assert oct(parent.stat().st_mode & 0o7777) == "0o1777", parent


def test_the_head_loads_pyxis_for_srun_and_has_no_enroot() -> None:
    """SPANK options register where srun runs: the head (submit host) builds Pyxis and carries its
    plugstack.conf.d/pyxis.conf before slurmctld starts; Enroot is for the GPU nodes only."""
    head = render_head_user_data(slurm_stack("cv-training"))
    assert head.plan is not None
    assert [p.name for p in head.plan.phases] == [
        "base", "gpuforge", "data-volume", "slurm", "pyxis", "slurm-accounting", "slurm-start", "slurm-accounts",
    ]  # fmt: skip
    phase = head.files["opt/gpuforge/phases/pyxis.sh"]
    assert 'put "$R/etc/slurm/plugstack.conf.d/pyxis.conf" "required ${so#"$R"}"' in phase
    assert "enroot" not in phase.lower()
    assert "include /etc/slurm/plugstack.conf.d/*" in head.files["etc/slurm/plugstack.conf"]
