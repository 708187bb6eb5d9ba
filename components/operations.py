"""The running-cost side of a cluster, declared next to its nodes: the queue-scaled node group
(when autoscaling is on), the alert topic, the idle-GPU alarm and the stack's budget."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from gpuforge.components.autoscaling import NodeGroup, NodeGroupArgs
from gpuforge.components.budget import AlertTopic, BudgetArgs, StackBudget
from gpuforge.components.monitoring import IdleAlarm, IdleAlarmArgs, container_insights_metric
from gpuforge.core.config import StackConfig


def on_eks(cfg: StackConfig) -> bool:
    """Whether an EKS managed node group runs the stack's GPU nodes (components/kubernetes/eks.py)."""
    return cfg.kubernetes is not None and cfg.kubernetes.mode == "eks"


def idle_alarm_args(cfg: StackConfig, eks_cluster_name: pulumi.Input[str] | None = None) -> IdleAlarmArgs | None:
    """The stack's idle-GPU alarm (every stack has one today). The node bootstrap installs the
    CloudWatch agent, and EKS stacks the CloudWatch Observability add-on, only where this is not
    None (components/userdata.py, components/kubernetes/component.py): no alarm, no agent.

    With `eks_cluster_name` the alarm reads that cluster's Container Insights GPU metric instead
    of the bootstrap agent's series."""
    fleet = cfg.fleet
    metric = container_insights_metric(eks_cluster_name) if eks_cluster_name is not None else None
    return IdleAlarmArgs(stack=cfg.stack, util_percent=fleet.idle_util_percent, minutes=fleet.idle_minutes,
                         tags=cfg.tags, metric=metric)


@dataclass(frozen=True)
class Operations:
    """What declare_operations made that other components build on."""

    group: NodeGroup | None
    alert_topic_arn: pulumi.Output[str]


def declare_operations(
    name: str,
    cfg: StackConfig,
    launch_template_id: pulumi.Input[str] | None,
    subnet_id: pulumi.Input[str],
    placement_group: pulumi.Input[str],
    parent: pulumi.Resource,
) -> Operations:
    child = pulumi.ResourceOptions(parent=parent)
    fleet, tags = cfg.fleet, cfg.tags
    group = None
    if fleet.autoscaling is not None:
        if launch_template_id is None:
            raise ValueError("an autoscaled stack needs GpuNodes' launch template for its Auto Scaling group")
        group = NodeGroup(
            name,
            NodeGroupArgs(
                stack=cfg.stack,
                fleet=fleet,
                scaling=fleet.autoscaling,
                launch_template_id=launch_template_id,
                template_version=cfg.node_template_version,
                subnet_id=subnet_id,
                placement_group=placement_group,
                tags=tags,
            ),
            opts=child,
        )
    topic = AlertTopic(name, tags, opts=child)
    # On EKS the alarm's series names the EKS cluster, which the Kubernetes layer declares after
    # the cluster: GpuKubernetes declares that alarm, on this topic (components/kubernetes/component.py).
    if not on_eks(cfg) and (idle := idle_alarm_args(cfg)) is not None:
        IdleAlarm(name, idle, topic.arn, opts=child)
    if fleet.budget_usd is not None:
        StackBudget(
            name,
            BudgetArgs(stack=cfg.stack, limit_usd=fleet.budget_usd, emails=fleet.budget_emails, tags=tags),
            topic,
            opts=child,
        )
    return Operations(group, topic.arn)
