"""What a stack's nodes boot: the bootstrap rendered with everything the other components
declare around the nodes, in one place for the cluster and `gpuforge bootstrap render`.

- spot: the checkpoint command and the images it runs (pulled at bootstrap, components/purchase.py);
- an idle-GPU alarm: the CloudWatch agent with the config that publishes the alarm's metric
  (components/monitoring.py), and the namespace the node role may publish into.
"""

from __future__ import annotations

from typing import Any

from gpuforge.bootstrap.render import RenderedBootstrap, render_user_data
from gpuforge.bootstrap.versions import Versions
from gpuforge.components.monitoring import agent_config
from gpuforge.components.operations import idle_alarm_args
from gpuforge.components.purchase import checkpoint_command, checkpoint_images
from gpuforge.core.config import StackConfig


def node_agent_config(cfg: StackConfig) -> dict[str, Any] | None:
    """The CloudWatch agent config for the stack's nodes; None when the stack has no idle alarm."""
    idle = idle_alarm_args(cfg)
    return agent_config(idle.stack) if idle is not None else None


def metric_namespace(cfg: StackConfig) -> str | None:
    """The only CloudWatch namespace the node role may publish into (None: no PutMetricData)."""
    agent = node_agent_config(cfg)
    return str(agent["metrics"]["namespace"]) if agent is not None else None


def stack_user_data(
    cfg: StackConfig,
    node_name: str | None = None,
    account_id: str | None = None,
    versions: Versions | None = None,
    node_python: str | None = None,
) -> RenderedBootstrap:
    """`account_id` names a spot stack's checkpoint bucket (components/storage.py); others ignore it.
    `versions`: the manifest to render with (default bootstrap/versions.yaml; the first-boot
    rehearsal passes its own key fingerprints and stand-in digests). `node_python`: the gpuforge
    phase's lock for another interpreter than the OS's (the rehearsal's Debian 12 runs 3.11)."""
    return render_user_data(
        cfg,
        node_name,
        versions=versions,
        checkpoint_command=checkpoint_command(cfg, account_id),
        checkpoint_images=checkpoint_images(cfg),
        cloudwatch_agent=node_agent_config(cfg),
        node_python=node_python,
    )
