"""A package mirror for the node bootstrap (`gpuforge:mirror`): clusters in private subnets and
air-gapped sites install from an internal mirror instead of the vendors' sites.

The stack names one mirror location per upstream, as `NAME=LOCATION` entries (Pulumi project
config has no object type: sdk/go/common/workspace/project.json, simpleConfigType is string,
integer, boolean, array). A download's mirror URL is the mirror location followed by the rest of
the upstream URL after the upstream's base, so a mirror keeps the vendor's layout:

    efa-installer=http://mirror.internal/efa/
    https://efa-installer.amazonaws.com/aws-efa-installer-1.34.0.tar.gz
    -> http://mirror.internal/efa/aws-efa-installer-1.34.0.tar.gz

Pins and digests do not change: the node checks the same sha256/sha512 and the same signing-key
fingerprints against what the mirror serves. Images: `nvcr.io=registry.internal/nvcr` pulls
`registry.internal/nvcr/nvidia/pytorch:24.08-py3` and tags it as the upstream name, because
docker's own `registry-mirrors` only applies to Docker Hub.

Pure and dependency-free (core/config.py validates with it, bootstrap renders with it).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# name -> the upstream base that the mirror location replaces. Every URL versions.yaml pins
# starts with one of these (tests/bootstrap/test_mirror.py), so no download can bypass the mirror.
URL_UPSTREAMS: Mapping[str, str] = {
    "cuda": "https://developer.download.nvidia.com/compute/cuda/repos/",
    "nvidia-container-toolkit": "https://nvidia.github.io/libnvidia-container/",
    "efa-installer": "https://efa-installer.amazonaws.com/",
    "aws-ofi-nccl": "https://github.com/aws/aws-ofi-nccl/releases/download/",
    "nccl-tests": "https://github.com/NVIDIA/nccl-tests/archive/",
    "cloudwatch-agent": "https://amazoncloudwatch-agent.s3.amazonaws.com/",
    "enroot": "https://github.com/NVIDIA/enroot/releases/download/",  # gpuforge:scheduler slurm
    "pyxis": "https://github.com/NVIDIA/pyxis/archive/",
}
# The Ubuntu archive is set through cloud-init's apt module (primary and security), which
# rewrites the AMI's sources before any phase runs apt.
APT_ARCHIVE = "ubuntu"
# Image registries the bootstrap pulls from (ngc_images, aws_cli_image in versions.yaml).
REGISTRIES = ("nvcr.io", "public.ecr.aws")
# gpuforge's own node install (bootstrap/nodelock.py): with this entry the nodes take the wheel set
# from `<location><version>/<arch>/<python>/` instead of the stack's bucket (air-gapped sites);
# the same lock digest and wheel hashes are checked either way.
GPUFORGE_WHEELS = "gpuforge-wheels"
NAMES = (APT_ARCHIVE, *URL_UPSTREAMS, GPUFORGE_WHEELS, *REGISTRIES)

_URL = re.compile(r"^https?://[A-Za-z0-9.-]+(:\d{1,5})?(/[^\s'\"\\]*)?$")
_REGISTRY = re.compile(r"^[a-z0-9.-]+(:\d{1,5})?(/[a-z0-9._-]+)*$")


class MirrorError(ValueError):
    """A mirror entry that cannot be used; args: (message, fix)."""


@dataclass(frozen=True)
class Mirror:
    """Validated mirror locations by upstream name (empty: download from the vendors)."""

    entries: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def get(self, name: str) -> str | None:
        return dict(self.entries).get(name)

    def url(self, upstream_url: str) -> str:
        """The URL to download `upstream_url` from: on the mirror when one serves its upstream."""
        for name, base in URL_UPSTREAMS.items():
            where = self.get(name)
            if where and upstream_url.startswith(base):
                return where + upstream_url[len(base):]
        return upstream_url

    def image(self, ref: str) -> str | None:
        """Where to pull image `ref` from on the mirror, or None to pull it from its registry."""
        host, _, rest = ref.partition("/")
        where = self.get(host)
        return f"{where}/{rest}" if where and rest else None

    def to_dict(self) -> dict[str, str]:
        return dict(self.entries)


def parse_mirror(items: Iterable[str]) -> Mirror:
    """`NAME=LOCATION` entries -> Mirror; raises MirrorError naming the bad entry and the fix."""
    seen: dict[str, str] = {}
    for item in items:
        name, sep, where = str(item).partition("=")
        name, where = name.strip(), where.strip()
        if not sep or not where:
            raise MirrorError(f"{item!r} is not NAME=LOCATION", "write it like efa-installer=http://mirror.internal/efa/")
        if name not in NAMES:
            close = difflib.get_close_matches(name, NAMES, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise MirrorError(f"unknown upstream {name!r}{hint}", f"use one of {', '.join(NAMES)}")
        if name in seen:
            raise MirrorError(f"{name} is given twice", "keep one location per upstream")
        if name in REGISTRIES:
            if not _REGISTRY.fullmatch(where):
                raise MirrorError(
                    f"{name}={where!r} is not a registry location", "write it as host[:port][/path], e.g. registry.internal/nvcr"
                )
        else:
            if not _URL.fullmatch(where):
                raise MirrorError(f"{name}={where!r} is not an http(s) URL", "write it like http://mirror.internal/path/")
            where = where if where.endswith("/") else where + "/"
        seen[name] = where
    return Mirror(tuple(sorted(seen.items())))
