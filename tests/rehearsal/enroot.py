"""Enroot for the rehearsal mirror: NVIDIA's enroot and enroot+caps .debs (the pyxis phase fetches
them from the GitHub release, versions.yaml) imitated by packages that carry enroot's REAL shell
code at v3.5.0 (NVIDIA/enroot tag commit c7dc4a6b66e817af5ceb7d5315850696067b3f80): `enroot.in`
with the Makefile's substitutions (@sysconfdir@ /etc/enroot, @libdir@ /usr/lib/enroot,
@version@), src/{common,bundle,docker,runtime}.sh and conf/enroot.conf.in, as `make install` lays
them out. vendor/enroot-3.5.0-scripts.tar.gz is `git archive --prefix=enroot-3.5.0/ v3.5.0
enroot.in src conf/enroot.conf.in LICENSE`. What is not there: the C helpers (enroot-switchroot,
-nsenter, -mount, -aufs2ovlfs, -mksquashovlfs) and makeself, so no container starts; the
configuration, the per-user paths (enroot.in's `(umask 077 && mkdir -p ...)`) and `enroot version`
/ `enroot list` run enroot's own code. enroot+caps sets no file capabilities (no helpers to set them on).
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from gpuforge.bootstrap.versions import Versions
from tests.rehearsal.standins import Deb

SCRIPTS = Path(__file__).parent / "vendor" / "enroot-3.5.0-scripts.tar.gz"


def _members() -> dict[str, str]:
    with tarfile.open(SCRIPTS) as tar:
        out = {}
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                assert f is not None
                out[m.name.split("/", 1)[1]] = f.read().decode()
        return out


def _subst(text: str, version: str) -> str:
    return text.replace("@sysconfdir@", "/etc/enroot").replace("@libdir@", "/usr/lib/enroot").replace("@version@", version)


def enroot_deb(v: Versions) -> Deb:
    ver = v.enroot.version
    src = _members()
    files: dict[str, str | bytes] = {"/usr/bin/enroot": _subst(src["enroot.in"], ver),
                                     "/etc/enroot/enroot.conf": _subst(src["conf/enroot.conf.in"], ver)}  # fmt: skip
    for name in ("common", "bundle", "docker", "runtime"):
        files[f"/usr/lib/enroot/{name}.sh"] = src[f"src/{name}.sh"]
    for d in ("environ.d", "mounts.d", "hooks.d", "enroot.conf.d"):
        files[f"/etc/enroot/{d}/.keep"] = ""
    return Deb("enroot", f"{ver}-1", f"enroot_{ver}-1_amd64.deb (NVIDIA/enroot release): enroot.in and src/*.sh at v{ver}",
               files=files, depends="bash, jq, parallel, squashfs-tools")  # fmt: skip


def enroot_caps_deb(v: Versions) -> Deb:
    ver = v.enroot_caps.version
    return Deb("enroot+caps", f"{ver}-1", f"enroot+caps_{ver}-1_amd64.deb (NVIDIA/enroot release): setcap on the helpers",
               depends=f"enroot (= {ver}-1)")  # fmt: skip
