"""Queue-fed node group: an Auto Scaling group from the nodes' launch template, in the cluster
placement group, scaled on the job queue's length (seed 001: add when more than 5 jobs wait,
min 4, max 32, 300 s cooldown), and scaled in while the queue stays empty.

The queue's publisher puts the number of waiting jobs into CloudWatch as
`<metric_namespace>/<metric_name>` with the dimension `gpuforge-stack=<stack>` once a minute.
On spot, the group's mixed-instances policy spreads over the compatible types with the
capacity-optimised strategy (core/guardrails.yaml `spot.allocation_strategy`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpuforge.core.fleet import Autoscaling, FleetConfig, guardrails

# Every member gets the one Name tag above; this tag tells the node's bootstrap (phases/base.sh.j2)
# and `gpuforge validate --discover` (validate/discover.py) to append the instance id, so hostnames,
# MPI hostfiles and validate's node names are unique and agree.
NAME_SUFFIX_TAG = "gpuforge-name-suffix"
QUEUE_PERIOD_S = 60  # the publisher's interval; one period over threshold is enough to add a node


@dataclass(frozen=True)
class NodeGroupArgs:
    stack: str
    fleet: FleetConfig
    scaling: Autoscaling
    launch_template_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    placement_group: pulumi.Input[str]
    # gpuforge:nodeTemplateVersion: the template version the group launches. Not "$Latest": a
    # template change would put a different driver or NCCL stack into the same placement group
    # as the running members at the next scale-out; the group moves when the stack raises it.
    template_version: int = 1
    tags: dict[str, str] = field(default_factory=dict)


class NodeGroup(pulumi.ComponentResource):
    group_name: pulumi.Output[str]

    def __init__(self, name: str, args: NodeGroupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuforge:aws:NodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        s, fleet = args.scaling, args.fleet
        spot = fleet.purchase_option == "spot"
        pinned = str(args.template_version)
        template = aws.autoscaling.GroupLaunchTemplateArgs(id=args.launch_template_id, version=pinned)
        group = aws.autoscaling.Group(
            f"{name}-asg",
            min_size=s.min_size,
            max_size=s.max_size,
            vpc_zone_identifiers=[args.subnet_id],
            placement_group=args.placement_group,
            default_cooldown=s.cooldown_s,
            capacity_rebalance=spot,  # replace a node on the rebalance signal, before the interruption
            launch_template=None if spot else template,
            mixed_instances_policy=_spot_policy(fleet, args.launch_template_id, pinned) if spot else None,
            tags=[
                aws.autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=True)
                for k, v in sorted({**args.tags, "Name": f"{args.stack}-node", NAME_SUFFIX_TAG: "instance-id"}.items())
            ],
            opts=child,
        )
        out = aws.autoscaling.Policy(
            f"{name}-scale-out",
            autoscaling_group_name=group.name,
            policy_type="SimpleScaling",
            adjustment_type="ChangeInCapacity",
            scaling_adjustment=s.scale_out_step,
            cooldown=s.cooldown_s,
            opts=child,
        )
        scale_in = aws.autoscaling.Policy(
            f"{name}-scale-in",
            autoscaling_group_name=group.name,
            policy_type="SimpleScaling",
            adjustment_type="ChangeInCapacity",
            scaling_adjustment=-s.scale_out_step,
            cooldown=s.cooldown_s,
            opts=child,
        )
        dims = {"gpuforge-stack": args.stack}
        aws.cloudwatch.MetricAlarm(
            f"{name}-queue-high",
            alarm_description=f"more than {s.queue_threshold} jobs wait: add {s.scale_out_step} node(s)",
            namespace=s.metric_namespace,
            metric_name=s.metric_name,
            dimensions=dims,
            statistic="Maximum",
            period=QUEUE_PERIOD_S,
            evaluation_periods=1,
            threshold=s.queue_threshold,
            comparison_operator="GreaterThanThreshold",
            treat_missing_data="notBreaching",  # no publisher, no growth
            alarm_actions=[out.arn],
            tags=args.tags,
            opts=child,
        )
        aws.cloudwatch.MetricAlarm(
            f"{name}-queue-empty",
            alarm_description=f"queue empty for {s.cooldown_s} s: remove {s.scale_out_step} node(s), down to {s.min_size}",
            namespace=s.metric_namespace,
            metric_name=s.metric_name,
            dimensions=dims,
            statistic="Maximum",
            period=QUEUE_PERIOD_S,
            evaluation_periods=max(1, s.cooldown_s // QUEUE_PERIOD_S),
            threshold=0,
            comparison_operator="LessThanOrEqualToThreshold",
            treat_missing_data="notBreaching",  # a silent publisher must not drain the group
            alarm_actions=[scale_in.arn],
            tags=args.tags,
            opts=child,
        )
        self.group_name = group.name
        self.register_outputs({"groupName": group.name})


def _spot_policy(fleet: FleetConfig, launch_template_id: pulumi.Input[str], version: str
                 ) -> aws.autoscaling.GroupMixedInstancesPolicyArgs:
    return aws.autoscaling.GroupMixedInstancesPolicyArgs(
        instances_distribution=aws.autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs(
            on_demand_base_capacity=0,
            on_demand_percentage_above_base_capacity=0,  # all spot
            spot_allocation_strategy=guardrails()["spot"]["allocation_strategy"],
            spot_max_price=fleet.spot_max_price or "",  # "" = capped at the on-demand price
        ),
        launch_template=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateArgs(
            launch_template_specification=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateLaunchTemplateSpecificationArgs(
                launch_template_id=launch_template_id, version=version
            ),
            overrides=[
                aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateOverrideArgs(instance_type=t)
                for t in fleet.spot_instance_types
            ],
        ),
    )
