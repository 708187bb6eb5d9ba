"""The bootstrap's apt calls wait for a held dpkg lock (canonical/cloud-init#2908): real apt-get,
real dpkg, a real package built with dpkg-deb, and a lock held the way apt and dpkg hold it
(fcntl), all in a private mount namespace whose /var/lib/dpkg, /var/lib/apt, /var/cache/apt,
/var/log/apt and /etc/apt are temp directories, so this machine's own dpkg is never touched.

Observed here with apt 2.6 (the same rule the fix is built on): a plain `apt-get install`
exits 100 at once on a held frontend lock; with DPkg::Lock::Timeout it waits; `apt-get update`
ignores DPkg::Lock::Timeout for the lists lock. Ubuntu 22.04 ships apt 2.4 and 24.04 apt 2.7/2.8;
their behaviour is assumed to match (not run here).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuforge.bootstrap.render import render_user_data
from gpuforge.core.config import StackConfig

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "apt-get", "dpkg-deb", "dpkg-query")),
    reason="needs root, unshare, apt-get, dpkg-deb (a private mount namespace over apt's and dpkg's state)",
)

BOUND = ("/var/lib/dpkg", "/var/lib/apt", "/var/cache/apt", "/var/log/apt", "/etc/apt")
# Holds the locks until the test has seen the waiter wait (the file `release` appears) or for
# argv[1] seconds. A fixed hold raced apt-get's start-up on a loaded machine: apt-get reached the
# lock after the holder had let go and never waited (a full `make test` next to other work).
HOLDER = """import fcntl, os, sys, time
fds = []
for p in sys.argv[3:]:
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o640); fcntl.lockf(fd, fcntl.LOCK_EX); fds.append(fd)
open(sys.argv[2], "w").write("locked")
release = os.path.join(os.path.dirname(sys.argv[2]), "release")
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end and not os.path.exists(release):
    time.sleep(0.05)
"""


def _deb(root: Path, name: str) -> str:
    """An empty package (control file only: dpkg unpacks nothing onto the real filesystem)."""
    src = root / "pkgsrc" / name
    (src / "DEBIAN").mkdir(parents=True)
    (src / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: gpuforge tests <t@example.invalid>\n"
        "Description: lock probe for the gpuforge bootstrap tests\n"
    )
    deb = root / "repo" / f"{name}_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(src), str(deb)], check=True, capture_output=True)
    data = deb.read_bytes()
    control = (src / "DEBIAN/control").read_text()
    return control + f"Filename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"


def _apt_root(root: Path) -> None:
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "var/lib/apt/lists/partial",
              "var/cache/apt/archives/partial", "var/log/apt", "etc/apt/apt.conf.d", "etc/apt/preferences.d",
              "etc/apt/sources.list.d", "etc/apt/trusted.gpg.d", "repo", "var/lib/gpuforge"):  # fmt: skip
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").write_text("")
    (root / "repo/Packages").write_text(_deb(root, "gpuforge-lock-probe") + "\n" + _deb(root, "gpuforge-vendor-probe"))
    (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] file:{root}/repo ./\n")
    # dpkg's own log would go to the host's /var/log/dpkg.log.
    (root / "etc/apt/apt.conf.d/00gpuforge-test").write_text('DPkg::Options:: "--log=/dev/null";\n')


def _run(root: Path, body: str) -> subprocess.CompletedProcess[str]:
    (root / "holder.py").write_text(HOLDER)
    mounts = " && ".join(f"mount --bind {root}{d} {d}" for d in BOUND)
    hold = (
        f"lockfor() {{ rm -f {root}/locked {root}/release; python3 {root}/holder.py \"$1\" {root}/locked "
        "/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock & "
        f"for _ in $(seq 100); do [ -e {root}/locked ] && break; sleep 0.1; done; }}\n"
        # waitlog PATTERN FILE: until the waiter says it waits (at most 60 s), then let go of the locks
        f"waitlog() {{ for _ in $(seq 600); do grep -q \"$1\" \"$2\" && break; sleep 0.1; done; touch {root}/release; }}\n"
    )
    script = f"set -u\n{mounts}\n{hold}{body}"
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
        env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GPUFORGE_ROOT": str(root),
             "GPUFORGE_POLL_S": "0", "LANG": "C"},
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip


def test_bootstrap_apt_waits_for_a_held_dpkg_lock(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    files = render_user_data(stack_cfg["nlp-inference"], "n1").files
    (tmp_path / "opt/gpuforge").mkdir(parents=True)
    (tmp_path / "opt/gpuforge/lib.sh").write_text(files["opt/gpuforge/lib.sh"])
    _apt_root(tmp_path)
    # The base phase's apt.conf.d line, as rendered: it makes a vendor installer's own plain
    # apt-get (the EFA installer's) wait as well.
    base = files["opt/gpuforge/phases/base.sh"]
    conf = [ln for ln in base.splitlines() if "/etc/apt/apt.conf.d/" in ln and ln.startswith("put ")]
    assert len(conf) == 1, "the base phase writes the lock timeout into apt.conf.d"
    log = tmp_path / "waiter.log"
    body = (
        f". {tmp_path}/opt/gpuforge/lib.sh\nGPUFORGE_LOCK_WAIT_S=60\n"
        f"lockfor 60; apt_install gpuforge-lock-probe 2>>{log} & w=$!\n"
        f"waitlog 'waiting for ' {log}; wait $w\n"
        "dpkg-query -W -f='probe: ${Status}\\n' gpuforge-lock-probe\n"
        f"{conf[0]}\n"
        f"wait; lockfor 60; apt-get install -y -q gpuforge-vendor-probe >>{log} 2>&1 & w=$!\n"
        f"waitlog 'Waiting for cache lock' {log}; wait $w\n"
        "dpkg-query -W -f='vendor: ${Status}\\n' gpuforge-vendor-probe\n"
    )
    r = _run(tmp_path, body)
    out = r.stdout + r.stderr + (log.read_text() if log.exists() else "")
    assert r.returncode == 0, out
    assert "probe: install ok installed" in r.stdout and "vendor: install ok installed" in r.stdout, out
    assert re.search(r"waiting for .*/var/lib/(dpkg/lock-frontend|apt/lists/lock) by pid \d+ \(python3\)", out), out
    assert "Waiting for cache lock" in out, "the plain apt-get waited through the apt.conf.d timeout"


def test_plain_apt_get_fails_at_once_on_a_held_lock(tmp_path: Path) -> None:
    """The counterpart's own rule, so the test above means something: without a timeout, apt-get
    exits 100 at once while another process holds the frontend lock."""
    _apt_root(tmp_path)
    r = _run(tmp_path, "lockfor 10\napt-get install -y -q gpuforge-lock-probe; echo \"rc=$?\"\n")
    assert "rc=100" in r.stdout and "Could not get lock /var/lib/dpkg/lock-frontend" in r.stderr, r.stdout + r.stderr


def _conffile_deb(root: Path, name: str, path: str) -> str:
    """A package shipping `path` as a conffile (as slurm-wlm-basic-plugins ships /etc/slurm/plugstack.conf)."""
    src = root / "pkgsrc" / name
    (src / "DEBIAN").mkdir(parents=True)
    (src / path.lstrip("/")).parent.mkdir(parents=True)
    (src / path.lstrip("/")).write_text("# the package's own\n")
    (src / "DEBIAN/conffiles").write_text(path + "\n")
    (src / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: gpuforge tests <t@example.invalid>\n"
        "Description: conffile probe for the gpuforge bootstrap tests\n"
    )
    deb = root / "repo" / f"{name}_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(src), str(deb)], check=True, capture_output=True)
    data = deb.read_bytes()
    control = (src / "DEBIAN/control").read_text()
    return control + f"Filename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"


def test_apt_install_keeps_a_config_file_the_user_data_wrote_first(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    """The Slurm head's user data writes /etc/slurm/plugstack.conf before the slurm phase installs
    slurm-wlm-basic-plugins, which ships that path as a conffile. dpkg then asks which to keep and,
    with no terminal, the install fails: "end of file on stdin at conffile prompt" (the first-boot
    rehearsal of a cv-training head, Debian's 22.05.8-4+deb12u3). apt_install keeps ours. Here a
    package with a conffile under /etc/apt (bound to this test's directory) meets a file written first."""
    files = render_user_data(stack_cfg["nlp-inference"], "n1").files
    (tmp_path / "opt/gpuforge").mkdir(parents=True)
    (tmp_path / "opt/gpuforge/lib.sh").write_text(files["opt/gpuforge/lib.sh"])
    _apt_root(tmp_path)
    conf = "/etc/apt/gpuforge-conffile-probe.conf"
    (tmp_path / "repo/Packages").write_text(_conffile_deb(tmp_path, "gpuforge-conffile-probe", conf))
    body = (
        f". {tmp_path}/opt/gpuforge/lib.sh\nGPUFORGE_LOCK_WAIT_S=5\n"
        f"echo '# ours, from the user data' >{conf}\n"
        "apt_install gpuforge-conffile-probe </dev/null\n"
        "dpkg-query -W -f='probe: ${Status}\\n' gpuforge-conffile-probe\n"
        f"cat {conf}\n"
    )
    r = _run(tmp_path, body)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "probe: install ok installed" in r.stdout, out
    assert "# ours, from the user data" in r.stdout and "the package's own" not in r.stdout, out
