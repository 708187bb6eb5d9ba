"""What the Pulumi program needs from the engine, in one place."""

from __future__ import annotations

from typing import Any

from pulumi.runtime import config as runtime_config


def running_offline() -> bool:
    """Whether the program runs as the offline preview (gpuforge preview, most tests), where
    nothing is created, rather than as `pulumi up`. A mock engine run started with
    `run_program(..., as_pulumi_up=True)` takes the real engine's path: the tests of what
    `pulumi up` refuses (cli/offline/engine.py RecordingMonitor.offline_preview)."""
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import MockMonitor

    monitor = settings.SETTINGS.monitor
    return isinstance(monitor, MockMonitor) and bool(getattr(monitor, "offline_preview", True))


def newest_ami_for(config: Any) -> str | None:
    """Under `pulumi up` with no pinned AMI: the image the documented filter finds in the stack's
    region (components/ami.py newest_ami), so the refusal names the exact command. None offline,
    when pinned, or when the lookup fails (the refusal then shows the describe-images command)."""
    from gpuforge.components.deploygate import boots_gpuforge_nodes

    if config.ami_id or running_offline() or not boots_gpuforge_nodes(config):
        return None
    from gpuforge.components.ami import newest_ami

    profile = runtime_config.CONFIG.get().get("aws:profile") or None
    return newest_ami(config.region, config.os, config.driver_preinstalled, profile=profile)


def engine_config() -> dict[str, Any]:
    """Every config key the engine passed (`ns:key` -> value), as `pulumi.Config` would see them.

    pulumi.Config reads one key at a time; unknown-key detection needs the whole map. The
    language host sets it in the runtime map or in PULUMI_CONFIG; merge both like get_config does.
    """
    merged = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    return merged
