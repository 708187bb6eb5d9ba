"""The node install's wheel set, uploaded to the stack's checkpoint bucket by the deploy.

One object per file under `gpuforge-node/<version>/<arch>/<python>/` (bootstrap/nodelock.py): the
committed hashed lock of the base dependencies, `gpuforge.txt` (gpuforge's own wheel, by sha256)
and every wheel they name. The `gpuforge` bootstrap phase reads them with the node's instance
role, which may read that prefix and write none of it (components/compute.py node_policy).

Under `pulumi up` (and a real `pulumi preview`, which hashes the assets) the set is staged first
in `<project>/.gpuforge/node-wheels/...`: the locked wheels downloaded by pip with
--require-hashes through the operator's own pip configuration, gpuforge's wheel built from this
checkout. Under the SDK's mock engine the same objects are declared and no file is touched. A stack whose
`gpuforge:mirror` has `gpuforge-wheels=` uploads nothing: its nodes read the mirror.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_aws as aws

from gpuforge.bootstrap.nodelock import BUCKET_PREFIX, GPUFORGE_LINE, parse_lock, target_for_os, wheelhouse
from gpuforge.common.version import __version__
from gpuforge.core.config import StackConfig
from gpuforge.core.mirror import GPUFORGE_WHEELS

# Relative to the Pulumi project directory, the working directory of `pulumi up` (so the preview's
# asset paths do not depend on the operator's home directory). .gitignore'd.
STAGE_DIR = Path(".gpuforge") / "node-wheels"


def engine_reads_assets() -> bool:
    """Whether a Pulumi engine will read the objects' files (`pulumi preview` hashes them, `pulumi up`
    uploads them). Under the SDK's mock monitor (the offline preview, and the tests that take
    `pulumi up`'s path under mocks) nothing reads them, so nothing is downloaded or built."""
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import MockMonitor

    return not isinstance(settings.SETTINGS.monitor, MockMonitor)


def uploads_node_wheels(cfg: StackConfig) -> bool:
    return cfg.mirror.get(GPUFORGE_WHEELS) is None


def node_install_prefix(cfg: StackConfig) -> str:
    """The bucket prefix this stack's nodes install from (and the only one of it they may read)."""
    return f"{BUCKET_PREFIX}/{target_for_os(cfg.os).prefix(__version__)}"


def node_wheel_files(cfg: StackConfig) -> list[str]:
    """The files of the set, in upload order: the lock, gpuforge.txt, the locked wheels, gpuforge's wheel."""
    t = target_for_os(cfg.os)
    wheels = [e.wheel for e in parse_lock(t.lock_file.read_text())]
    return [t.lock_name, GPUFORGE_LINE, *wheels, f"gpuforge-{__version__}-py3-none-any.whl"]


class NodeWheels(pulumi.ComponentResource):
    def __init__(
        self, name: str, cfg: StackConfig, bucket: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("gpuforge:aws:NodeWheels", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        t = target_for_os(cfg.os)
        stage = STAGE_DIR / t.prefix(__version__)
        if engine_reads_assets():
            wheelhouse(t, stage)
        prefix = node_install_prefix(cfg)
        for file in node_wheel_files(cfg):
            aws.s3.BucketObjectv2(
                f"{name}-node-{file}",
                bucket=bucket,
                key=prefix + file,
                source=pulumi.FileAsset(str(stage / file)),
                content_type="text/plain" if file.endswith(".txt") else "application/octet-stream",
                # S3 keeps a SHA-256 of each object; the node checks its own digests regardless.
                checksum_algorithm="SHA256",
                tags=cfg.tags,
                opts=child,
            )
        self.prefix = prefix
        self.register_outputs({"prefix": prefix})
