"""The stack's AWS Budget (monthly, filtered on the stack's cost-allocation tag) with alerts at
80% and 100% (components/guardrails.yaml), and the encrypted SNS topic that budget and idle
alerts go to. Cost-allocation tags must be activated once per account (Billing console or
`aws ce update-cost-allocation-tags-status`) before a tag filter sees any spend.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.fleet import guardrails

SNS_AWS_KEY = "alias/aws/sns"  # AWS-managed key: encrypted at rest by default, no key to manage


@dataclass(frozen=True)
class BudgetArgs:
    stack: str
    limit_usd: int
    emails: tuple[str, ...] = ()
    tags: dict[str, str] = field(default_factory=dict)


class AlertTopic(pulumi.ComponentResource):
    arn: pulumi.Output[str]

    def __init__(self, name: str, tags: dict[str, str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuforge:aws:AlertTopic", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        topic = aws.sns.Topic(f"{name}-alerts", kms_master_key_id=SNS_AWS_KEY, tags=tags, opts=child)
        aws.sns.TopicPolicy(
            f"{name}-alerts-policy",
            arn=topic.arn,
            policy=topic.arn.apply(_topic_policy),
            opts=child,
        )
        self.arn = topic.arn
        self.register_outputs({"arn": topic.arn})


def _topic_policy(arn: str) -> str:
    # Budgets and CloudWatch publish as services; nothing else may.
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "AlertPublishers",
                    "Effect": "Allow",
                    "Principal": {"Service": ["budgets.amazonaws.com", "cloudwatch.amazonaws.com"]},
                    "Action": "SNS:Publish",
                    "Resource": arn,
                }
            ],
        }
    )


class StackBudget(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: BudgetArgs, topic_arn: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("gpuforge:aws:StackBudget", name, None, opts)
        budget = aws.budgets.Budget(
            f"{name}-budget",
            name=f"gpuforge-{args.stack}",
            budget_type="COST",
            limit_amount=str(args.limit_usd),
            limit_unit="USD",
            time_unit="MONTHLY",
            cost_filters=[aws.budgets.BudgetCostFilterArgs(name="TagKeyValue", values=[f"user:stack${args.stack}"])],
            notifications=[
                aws.budgets.BudgetNotificationArgs(
                    comparison_operator="GREATER_THAN",
                    notification_type="ACTUAL",
                    threshold=percent,
                    threshold_type="PERCENTAGE",
                    subscriber_email_addresses=list(args.emails) or None,
                    subscriber_sns_topic_arns=[topic_arn],
                )
                for percent in guardrails()["budget"]["alert_percents"]
            ],
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"budgetName": budget.name})
