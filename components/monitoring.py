"""Idle GPUs cost money: a CloudWatch alarm when the stack's average GPU utilisation stays under
the seed's 70% (core/guardrails.yaml) for the configured minutes.

The metric comes from the CloudWatch agent's NVIDIA collector on each node. `agent_config`
is the agent configuration that produces it with the `gpuforge-stack` dimension the alarm
reads; the node bootstrap installs the agent with it (bootstrap phase cloudwatch-agent) and the
node role may publish into that namespace only (components/compute.py). Alarm and agent both
read the namespace and metric from core/guardrails.yaml, so they cannot drift apart.

EKS stacks' nodes boot the EKS AMI instead, so that agent never runs there: their alarm reads the
Container Insights GPU metric that the Amazon CloudWatch Observability add-on publishes per
cluster (`container_insights_metric`; the add-on is declared in components/kubernetes/eks.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from gpuforge.core.fleet import guardrails

PERIOD_S = 300  # the agent's 60 s samples averaged over 5 minutes
STACK_DIMENSION = "gpuforge-stack"
# The agent names nvidia_gpu measurements nvidia_smi_<measurement> (utilization_gpu ->
# nvidia_smi_utilization_gpu), in the namespace of the `metrics` section.
AGENT_METRIC_PREFIX = "nvidia_smi_"
EXTRA_MEASUREMENTS = ("utilization_memory", "memory_used", "memory_total")


def alarm_dimensions(stack: str) -> dict[str, str]:
    """The one series the alarm reads: the agent's roll-up over every GPU of every node of the stack."""
    return {STACK_DIMENSION: stack}


def _idle_metric() -> tuple[str, str]:
    idle = guardrails()["idle"]
    name: str = idle["metric_name"]
    if not name.startswith(AGENT_METRIC_PREFIX):
        raise ValueError(f"core/guardrails.yaml: idle.metric_name {name!r} is not a CloudWatch agent nvidia_gpu metric")
    return idle["metric_namespace"], name


@dataclass(frozen=True)
class IdleMetric:
    """The one CloudWatch series the idle alarm reads."""

    namespace: str
    metric_name: str
    dimensions: Mapping[str, pulumi.Input[str]]


def agent_metric(stack: str) -> IdleMetric:
    """What the CloudWatch agent of gpuforge's bootstrap publishes (`agent_config`)."""
    namespace, metric = _idle_metric()
    return IdleMetric(namespace, metric, alarm_dimensions(stack))


def container_insights_metric(cluster_name: pulumi.Input[str]) -> IdleMetric:
    """What the CloudWatch Observability add-on publishes on an EKS cluster: the GPU utilisation
    of every node of the cluster, rolled up on the cluster-name dimension alone."""
    eks = guardrails()["idle"]["eks"]
    return IdleMetric(eks["metric_namespace"], eks["metric_name"], {eks["cluster_dimension"]: cluster_name})


@dataclass(frozen=True)
class IdleAlarmArgs:
    stack: str
    util_percent: int
    minutes: int
    tags: dict[str, str] = field(default_factory=dict)
    metric: IdleMetric | None = None  # None: the bootstrap agent's per-stack series (agent_metric)


class IdleAlarm(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: IdleAlarmArgs, topic_arn: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("gpuforge:aws:IdleAlarm", name, None, opts)
        metric = args.metric or agent_metric(args.stack)
        alarm = aws.cloudwatch.MetricAlarm(
            f"{name}-gpu-idle",
            alarm_description=(
                f"average GPU utilisation of stack {args.stack} under {args.util_percent}% for "
                f"{args.minutes} min: scale down or stop it"
            ),
            namespace=metric.namespace,
            metric_name=metric.metric_name,
            dimensions=dict(metric.dimensions),
            statistic="Average",
            period=PERIOD_S,
            evaluation_periods=max(1, args.minutes * 60 // PERIOD_S),
            threshold=args.util_percent,
            comparison_operator="LessThanThreshold",
            treat_missing_data="missing",  # no agent data is not "idle"; it shows as insufficient data
            alarm_actions=[topic_arn],
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"alarmName": alarm.name})


def agent_config(stack: str) -> dict[str, Any]:
    """CloudWatch agent config: NVIDIA GPU utilisation (and memory) every 60 s, rolled up per
    stack into exactly the namespace, metric and dimensions the idle alarm reads."""
    namespace, metric = _idle_metric()
    measured = metric.removeprefix(AGENT_METRIC_PREFIX)
    return {
        "agent": {"metrics_collection_interval": 60},
        "metrics": {
            "namespace": namespace,
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            # Besides the per-GPU series, publish one that carries only the alarm's dimensions.
            "aggregation_dimensions": [sorted(alarm_dimensions(stack))],
            "metrics_collected": {
                "nvidia_gpu": {
                    "measurement": [measured, *(m for m in EXTRA_MEASUREMENTS if m != measured)],
                    "append_dimensions": alarm_dimensions(stack),
                }
            },
        },
    }
