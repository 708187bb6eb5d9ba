"""The running-cost side of a cluster, declared next to its nodes: the queue-scaled node group
(when autoscaling is on), the alert topic, the idle-GPU alarm and the stack's budget."""

from __future__ import annotations

import pulumi

from components.autoscaling import NodeGroup, NodeGroupArgs
from components.budget import AlertTopic, BudgetArgs, StackBudget
from components.config import StackConfig
from components.monitoring import IdleAlarm, IdleAlarmArgs


def idle_alarm_args(cfg: StackConfig) -> IdleAlarmArgs | None:
    """The stack's idle-GPU alarm (every stack has one today). The node bootstrap installs the
    CloudWatch agent only where this is not None (components/userdata.py): no alarm, no agent."""
    fleet = cfg.fleet
    return IdleAlarmArgs(stack=cfg.stack, util_percent=fleet.idle_util_percent, minutes=fleet.idle_minutes, tags=cfg.tags)


def declare_operations(
    name: str,
    cfg: StackConfig,
    launch_template_id: pulumi.Input[str],
    subnet_id: pulumi.Input[str],
    placement_group: pulumi.Input[str],
    parent: pulumi.Resource,
) -> NodeGroup | None:
    child = pulumi.ResourceOptions(parent=parent)
    fleet, tags = cfg.fleet, cfg.tags
    group = None
    if fleet.autoscaling is not None:
        group = NodeGroup(
            name,
            NodeGroupArgs(
                stack=cfg.stack,
                fleet=fleet,
                scaling=fleet.autoscaling,
                launch_template_id=launch_template_id,
                subnet_id=subnet_id,
                placement_group=placement_group,
                tags=tags,
            ),
            opts=child,
        )
    topic = AlertTopic(name, tags, opts=child)
    if (idle := idle_alarm_args(cfg)) is not None:
        IdleAlarm(name, idle, topic.arn, opts=child)
    if fleet.budget_usd is not None:
        StackBudget(
            name,
            BudgetArgs(stack=cfg.stack, limit_usd=fleet.budget_usd, emails=fleet.budget_emails, tags=tags),
            topic.arn,
            opts=child,
        )
    return group
