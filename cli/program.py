"""What the Pulumi program needs from the engine, in one place."""

from __future__ import annotations

from typing import Any

from pulumi.runtime import config as runtime_config


def running_offline() -> bool:
    """Whether the program runs under the SDK's mock engine (gpuforge preview, the tests), where
    nothing is created, rather than under the Pulumi CLI."""
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import MockMonitor

    return isinstance(settings.SETTINGS.monitor, MockMonitor)


def engine_config() -> dict[str, Any]:
    """Every config key the engine passed (`ns:key` -> value), as `pulumi.Config` would see them.

    pulumi.Config reads one key at a time; unknown-key detection needs the whole map. The
    language host sets it in the runtime map or in PULUMI_CONFIG; merge both like get_config does.
    """
    merged = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    return merged
