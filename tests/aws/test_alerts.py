"""Item 7 of issue 10: alerts that arrive. CloudWatch alarms and AWS Budgets cannot publish to a
topic under the AWS-managed key alias/aws/sns (its key policy cannot grant them kms:Decrypt /
kms:GenerateDataKey*); see components/budget.py for the sources."""

from __future__ import annotations

import json

from tests.aws.conftest import one
from tests.components.stackcfg import base_config

PUBLISHERS = {"cloudwatch.amazonaws.com", "budgets.amazonaws.com"}


def test_topic_uses_a_customer_managed_key_the_publishers_may_use(record) -> None:
    run = record(base_config()).run
    topic = one(run, "aws:sns/topic:Topic").inputs
    key = one(run, "aws:kms/key:Key")
    assert not topic["kmsMasterKeyId"].startswith("alias/aws/")  # AWS-managed keys cannot be granted
    assert topic["kmsMasterKeyId"].startswith("arn:aws:kms:") and key.name in topic["kmsMasterKeyId"]
    assert key.inputs["enableKeyRotation"] is True
    statements = json.loads(key.inputs["policy"])["Statement"]
    granted = {
        svc
        for st in statements
        if st["Effect"] == "Allow" and {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(st["Action"])
        for svc in st["Principal"].get("Service", [])
    }
    assert PUBLISHERS <= granted
    # the account keeps administering its key (without the root statement it becomes unmanageable)
    assert any(st["Principal"].get("AWS") == "arn:aws:iam::000000000000:root" for st in statements)


def test_topic_policy_names_the_source_account(record) -> None:
    run = record(base_config()).run
    policy = json.loads(one(run, "aws:sns/topicPolicy:TopicPolicy").inputs["policy"])
    (st,) = policy["Statement"]
    assert set(st["Principal"]["Service"]) == PUBLISHERS
    assert st["Condition"] == {"StringEquals": {"aws:SourceAccount": "000000000000"}}


def test_budget_waits_for_the_topic_policy(record) -> None:
    run = record(base_config()).run
    budget = one(run, "aws:budgets/budget:Budget")
    policy = one(run, "aws:sns/topicPolicy:TopicPolicy")
    assert policy.urn in budget.dependencies
