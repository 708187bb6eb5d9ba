"""The stack's AWS Budget (monthly, filtered on the stack's cost-allocation tag) with alerts at
80% and 100% (core/guardrails.yaml), and the encrypted SNS topic that budget and idle
alerts go to. Cost-allocation tags must be activated once per account (Billing console or
`aws ce update-cost-allocation-tags-status`) before a tag filter sees any spend.

The topic is encrypted with a customer-managed KMS key, not `alias/aws/sns`: the AWS-managed
key's policy cannot be edited and does not let CloudWatch alarms or AWS Budgets call
kms:GenerateDataKey*/kms:Decrypt, so their notifications are dropped ("CloudWatch Alarms does not
have authorization to access the SNS topic encryption key" - AWS re:Post knowledge center
cloudwatch-configure-alarm-sns; SNS developer guide, sns-key-management.html#compatibility-with-aws-services;
AWS Budgets user guide, budgets-sns-policy.html). The topic policy carries aws:SourceAccount
(confused-deputy protection, Budgets guide), and the Budget waits for that policy, so its
notifications never point at a topic that budgets.amazonaws.com may not yet publish to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpuforge.core.fleet import guardrails

ALERT_PUBLISHERS = ("budgets.amazonaws.com", "cloudwatch.amazonaws.com")


@dataclass(frozen=True)
class BudgetArgs:
    stack: str
    limit_usd: int
    emails: tuple[str, ...] = ()
    tags: dict[str, str] = field(default_factory=dict)


class AlertTopic(pulumi.ComponentResource):
    arn: pulumi.Output[str]
    policy: aws.sns.TopicPolicy  # what a publisher must wait for (the Budget does)

    def __init__(self, name: str, tags: dict[str, str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuforge:aws:AlertTopic", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account = aws.get_caller_identity_output(opts=pulumi.InvokeOptions(parent=self)).account_id
        key = aws.kms.Key(
            f"{name}-alerts-key",
            description="gpuforge alert topic: CloudWatch alarms and AWS Budgets may encrypt with it",
            enable_key_rotation=True,
            policy=account.apply(alert_key_policy),
            tags=tags,
            opts=child,
        )
        topic = aws.sns.Topic(f"{name}-alerts", kms_master_key_id=key.arn, tags=tags, opts=child)
        self.policy = aws.sns.TopicPolicy(
            f"{name}-alerts-policy",
            arn=topic.arn,
            policy=pulumi.Output.all(topic.arn, account).apply(lambda v: topic_policy(v[0], v[1])),
            opts=child,
        )
        self.arn = topic.arn
        self.register_outputs({"arn": topic.arn})


def alert_key_policy(account_id: str) -> str:
    """The account administers the key (the default key policy's root statement; without it the
    key becomes unmanageable); the two alert publishers may only use it to publish."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "AccountAdministersKey",
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:aws:iam::{account_id}:root"},
                    "Action": "kms:*",
                    "Resource": "*",
                },
                {
                    "Sid": "AlertPublishersEncrypt",
                    "Effect": "Allow",
                    "Principal": {"Service": list(ALERT_PUBLISHERS)},
                    "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                    "Resource": "*",
                },
            ],
        }
    )


def topic_policy(arn: str, account_id: str) -> str:
    # Budgets and CloudWatch publish as services, on behalf of this account only; nothing else may.
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "AlertPublishers",
                    "Effect": "Allow",
                    "Principal": {"Service": list(ALERT_PUBLISHERS)},
                    "Action": "SNS:Publish",
                    "Resource": arn,
                    "Condition": {"StringEquals": {"aws:SourceAccount": account_id}},
                }
            ],
        }
    )


class StackBudget(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: BudgetArgs, topic: AlertTopic, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("gpuforge:aws:StackBudget", name, None, opts)
        topic_arn = topic.arn
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
            # The topic must let budgets.amazonaws.com publish before the budget names it.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[topic.policy]),
        )
        self.register_outputs({"budgetName": budget.name})
