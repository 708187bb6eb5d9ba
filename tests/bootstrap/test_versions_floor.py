"""Security floors for pinned versions: a pin below a fixed CVE is refused by the suite."""

from __future__ import annotations

from bootstrap.versions import load_versions

# CVE-2025-23266: NVIDIA Container Toolkit "all versions up to and including 1.17.7" (CVE record,
# CVEProject/cvelistV5 cves/2025/23xxx/CVE-2025-23266.json); CVE-2025-23359 is fixed below that.
CONTAINER_TOOLKIT_FLOOR = (1, 17, 8)


def _upstream(deb_version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in deb_version.rsplit(":", maxsplit=1)[-1].split("-", maxsplit=1)[0].split("."))


def test_container_toolkit_is_past_the_2025_cves() -> None:
    got = _upstream(load_versions().nvidia_container_toolkit.version)
    assert got >= CONTAINER_TOOLKIT_FLOOR, f"nvidia-container-toolkit {got} is exposed to CVE-2025-23266 (fixed in 1.17.8)"
