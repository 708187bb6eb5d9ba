"""Idle GPUs cost money: a CloudWatch alarm when the stack's average GPU utilisation stays under
the seed's 70% (components/guardrails.yaml) for the configured minutes.

The metric comes from the CloudWatch agent's NVIDIA collector on each node. `agent_config`
is the agent configuration that produces it with the `gpuforge-stack` dimension the alarm
reads; the node bootstrap has to install it (not wired in yet, see the issue note).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from components.fleet import guardrails

PERIOD_S = 300  # the agent's 60 s samples averaged over 5 minutes


@dataclass(frozen=True)
class IdleAlarmArgs:
    stack: str
    util_percent: int
    minutes: int
    tags: dict[str, str] = field(default_factory=dict)


class IdleAlarm(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: IdleAlarmArgs, topic_arn: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("gpuforge:aws:IdleAlarm", name, None, opts)
        idle = guardrails()["idle"]
        alarm = aws.cloudwatch.MetricAlarm(
            f"{name}-gpu-idle",
            alarm_description=(
                f"average GPU utilisation of stack {args.stack} under {args.util_percent}% for "
                f"{args.minutes} min: scale down or stop it"
            ),
            namespace=idle["metric_namespace"],
            metric_name=idle["metric_name"],
            dimensions={"gpuforge-stack": args.stack},
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
    """CloudWatch agent config: NVIDIA GPU utilisation every 60 s, rolled up per stack."""
    return {
        "agent": {"metrics_collection_interval": 60},
        "metrics": {
            "namespace": guardrails()["idle"]["metric_namespace"],
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            "aggregation_dimensions": [["gpuforge-stack"]],
            "metrics_collected": {
                "nvidia_gpu": {
                    "measurement": ["utilization_gpu", "utilization_memory", "memory_used", "memory_total"],
                    "append_dimensions": {"gpuforge-stack": stack},
                }
            },
        },
    }
