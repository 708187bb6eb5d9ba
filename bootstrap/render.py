"""Render EC2 user data for a node of a stack.

Interim implementation (issue 3 replaces it with the phase runner): a short real script that
logs and writes a marker file, so nodes from `pulumi up` show they booted.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from components.config import StackConfig

EC2_USER_DATA_LIMIT = 16 * 1024  # bytes, before base64 (EC2 API limit)


class BootstrapError(Exception):
    pass


@dataclass(frozen=True)
class RenderedBootstrap:
    user_data: bytes  # what EC2 receives (before base64)
    files: dict[str, str] = field(default_factory=dict)  # rendered scripts, for inspection

    @property
    def user_data_base64(self) -> str:
        return base64.b64encode(self.user_data).decode()


def render_user_data(cfg: StackConfig, node_name: str | None) -> RenderedBootstrap:
    """User data for `node_name` (None: a generic node of the launch template)."""
    name = node_name or "gpuforge-node"
    script = (
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        "exec >>/var/log/gpuforge-bootstrap.log 2>&1\n"
        f'echo "gpuforge: node {name} of stack {cfg.stack} (profile {cfg.profile.name}) booted at $(date -Is)"\n'
        "mkdir -p /var/lib/gpuforge\n"
        f"echo '{{\"node\": \"{name}\", \"stack\": \"{cfg.stack}\", \"state\": \"booted\"}}' "
        "> /var/lib/gpuforge/status.json\n"
    )
    data = script.encode()
    if len(data) > EC2_USER_DATA_LIMIT:
        raise BootstrapError(f"user data is {len(data)} bytes; EC2 allows {EC2_USER_DATA_LIMIT}")
    return RenderedBootstrap(user_data=data, files={"user-data": script})
