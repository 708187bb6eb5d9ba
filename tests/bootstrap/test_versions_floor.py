"""Security floors for pinned versions: a pin below a fixed CVE is refused by the suite."""

from __future__ import annotations

from gpuforge.bootstrap.versions import load_versions

# CVE-2025-23266: NVIDIA Container Toolkit "all versions up to and including 1.17.7" (CVE record,
# CVEProject/cvelistV5 cves/2025/23xxx/CVE-2025-23266.json); CVE-2025-23359 is fixed below that.
CONTAINER_TOOLKIT_FLOOR = (1, 17, 8)


def _upstream(deb_version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in deb_version.rsplit(":", maxsplit=1)[-1].split("-", maxsplit=1)[0].split("."))


def test_container_toolkit_is_past_the_2025_cves() -> None:
    got = _upstream(load_versions().nvidia_container_toolkit.version)
    assert got >= CONTAINER_TOOLKIT_FLOOR, f"nvidia-container-toolkit {got} is exposed to CVE-2025-23266 (fixed in 1.17.8)"


def test_24_04_pins_build_on_current_noble_kernels() -> None:
    """Ubuntu 24.04's kernel is 7.0 by 2026-09 (DLAMI release notes). The driver must be an R580
    (the last branch with Volta) at or after 580.159.04, whose notes fix the build on 7.1 (earlier
    580.x fail on 6.17/7.0/7.1: versions.yaml names the reports); the EFA installer the one the
    24.04 DLAMI runs on 7.0. The 22.04 row keeps its own pins."""
    v = load_versions()
    noble = v.for_os("ubuntu-24.04")
    assert noble.nvidia_driver.branch == "580"
    assert _upstream(noble.nvidia_driver.version) >= (580, 159, 4)
    assert _upstream(noble.efa_installer.version) >= (1, 50, 0)
    jammy = v.for_os("ubuntu-22.04")
    assert (jammy.nvidia_driver, jammy.efa_installer) == (v.nvidia_driver, v.efa_installer)
