"""The driver pin (apt preferences written by the driver phase) read by real apt: with NVIDIA's
repository offering the pinned driver and a newer one, every driver package's candidate is the
pinned version, libxnvctrl0 included, and the container toolkit is left to its own pin.

The repository is a local flat repo whose Packages index lists the package names and version
shapes of NVIDIA's CUDA repository for Ubuntu (cuda-drivers-550 550.90.07-1, nvidia-*/libxnvctrl0
550.90.07-0ubuntu1); apt runs with Dir pointed at a temp root (no lock, nothing of this machine's
apt state read or written).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuforge.bootstrap.render import render_user_data
from gpuforge.bootstrap.versions import load_versions
from gpuforge.core.config import StackConfig

pytestmark = pytest.mark.skipif(not shutil.which("apt-cache"), reason="needs apt (Debian)")

NEWER = "575.57.08"


def _packages(driver: str) -> str:
    entries = []
    for ver_driver in (driver, NEWER):
        branch = ver_driver.split(".")[0]
        for name, ver in (
            (f"cuda-drivers-{branch}", f"{ver_driver}-1"),
            ("cuda-drivers", f"{ver_driver}-1"),
            (f"nvidia-driver-{branch}", f"{ver_driver}-0ubuntu1"),
            ("nvidia-settings", f"{ver_driver}-0ubuntu1"),
            ("nvidia-modprobe", f"{ver_driver}-0ubuntu1"),
            ("libxnvctrl0", f"{ver_driver}-0ubuntu1"),
            (f"libnvidia-compute-{branch}", f"{ver_driver}-0ubuntu1"),
            (f"nvidia-fabricmanager-{branch}", f"{ver_driver}-1"),
        ):
            entries.append((name, ver))
    entries += [("libnvidia-container1", "1.17.8-1"), ("libnvidia-container1", "1.18.0-1")]
    return "\n".join(
        f"Package: {n}\nVersion: {v}\nArchitecture: all\nMaintainer: t <t@example.invalid>\n"
        f"Filename: ./{n}_{v}_all.deb\nSize: 1\nSHA256: {'0' * 64}\nDescription: stand-in index entry\n"
        for n, v in entries
    )


def _preferences(files: dict[str, str]) -> str:
    m = re.search(r'put "\$R/etc/apt/preferences\.d/gpuforge-nvidia-driver" "([^"]*)"', files["opt/gpuforge/phases/driver.sh"])
    assert m, "the driver phase writes the driver pin"
    return m.group(1)


def test_every_driver_package_candidate_is_the_pinned_version(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    v = load_versions()
    root = tmp_path
    for d in ("etc/apt/apt.conf.d", "etc/apt/preferences.d", "etc/apt/sources.list.d", "var/lib/apt/lists/partial",
              "var/cache/apt/archives/partial", "var/lib/dpkg", "repo"):  # fmt: skip
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").write_text("")
    (root / "repo/Packages").write_text(_packages(v.nvidia_driver.version))
    (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] file:{root}/repo ./\n")
    (root / "etc/apt/preferences.d/gpuforge-nvidia-driver").write_text(
        _preferences(render_user_data(stack_cfg["cv-training"], "n1").files) + "\n"
    )
    opts = ["-o", f"Dir={root}", "-o", f"Dir::State::status={root}/var/lib/dpkg/status",
            "-o", f"Dir::Etc::Parts={root}/etc/apt/apt.conf.d", "-o", "Debug::NoLocking=1"]  # fmt: skip
    subprocess.run(["apt-get", *opts, "update", "-q"], capture_output=True, text=True, timeout=120, check=True)
    names = ["cuda-drivers", "nvidia-settings", "nvidia-modprobe", "libxnvctrl0", "libnvidia-compute-550", "libnvidia-container1"]
    out = subprocess.run(["apt-cache", *opts, "policy", *names], capture_output=True, text=True, timeout=120, check=True)
    candidate = dict(re.findall(r"^(\S+):\n\s+Installed: .*\n\s+Candidate: (\S+)", out.stdout, re.M))
    assert set(candidate) == set(names), out.stdout
    for name in names[:-1]:
        assert candidate[name].startswith(v.nvidia_driver.version + "-"), (name, candidate[name])
    assert candidate["libnvidia-container1"] == "1.18.0-1", "the toolkit is not tied to the driver's version"
