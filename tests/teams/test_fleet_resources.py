"""Purchase options, the queue-scaled group, budget, idle alarm and cost tags in the graph the
mock engine records for the real program (tests/policy/conftest.py `record`)."""

from __future__ import annotations

import base64
import gzip
import importlib
import inspect

import pytest

from gpuforge.bootstrap.render import render_user_data
from gpuforge.common.errors import ConfigError
from gpuforge.components.purchase import checkpoint_command
from gpuforge.offline.mocks import MOCK_ACCOUNT

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
INSTANCE = "aws:ec2/instance:Instance"
COST_TAGS = ("project", "team", "owner", "profile", "stack")


def _maybe_gunzip(data: bytes) -> bytes:
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def one(run, token):
    found = run.of_type(token)
    assert len(found) == 1, [r.name for r in found]
    return found[0]


def test_on_demand_has_no_market_options(record) -> None:
    lt = one(record().run, LT).inputs
    assert "instanceMarketOptions" not in lt and "capacityReservationSpecification" not in lt


def test_spot_fixed_nodes_via_launch_template(record) -> None:
    result = record("vision-spot", purchaseOption="spot", spotMaxPrice="20")
    market = one(result.run, LT).inputs["instanceMarketOptions"]
    assert market == {
        "marketType": "spot",
        "spotOptions": {"spotInstanceType": "one-time", "instanceInterruptionBehavior": "terminate", "maxPrice": "20"},
    }
    # the watcher copies checkpoints to this stack's checkpoint bucket on the interruption notice
    # the name carries the deploying account (here the mock engine's caller identity), in the
    # account's regional namespace: another account's stack of the same name cannot collide
    command = checkpoint_command(result.config, MOCK_ACCOUNT)
    assert command is not None and f"s3://gpuforge-vision-spot-ckpt-{MOCK_ACCOUNT}-us-east-1-an/vision-spot" in command
    bucket = one(result.run, "aws:s3/bucket:Bucket").inputs
    assert bucket["bucket"] == f"gpuforge-vision-spot-ckpt-{MOCK_ACCOUNT}-us-east-1-an"
    assert bucket["bucketNamespace"] == "account-regional"
    lt_user_data = base64.b64decode(one(result.run, LT).inputs["userData"])
    assert f"gpuforge-vision-spot-ckpt-{MOCK_ACCOUNT}-us-east-1-an".encode() in _maybe_gunzip(lt_user_data)
    files = render_user_data(result.config, None, checkpoint_command=command).files
    assert "opt/gpuforge/bin/gpuforge-spot-watcher" in files
    assert checkpoint_command(record().config, MOCK_ACCOUNT) is None  # on-demand: no watcher


def test_spot_autoscaling_uses_capacity_optimised_mixed_instances(record) -> None:
    run = record("vision-spot-asg", purchaseOption="spot", autoscaling=True, budgetUsd=900000, gpuQuota=None,
                 publicIps=False).run  # multi-card nodes in a group get no public IP: NAT gateway
    assert "instanceMarketOptions" not in one(run, LT).inputs  # EC2 refuses it in a mixed group
    asg = one(run, ASG).inputs
    dist = asg["mixedInstancesPolicy"]["instancesDistribution"]
    assert dist["spotAllocationStrategy"] == "capacity-optimized"
    assert dist["onDemandPercentageAboveBaseCapacity"] == 0 and dist["onDemandBaseCapacity"] == 0
    overrides = [o["instanceType"] for o in asg["mixedInstancesPolicy"]["launchTemplate"]["overrides"]]
    # p4de's compatible types in use1-az4: same A100 count and EFA cards (p4d.24xlarge)
    assert overrides[0] == "p4de.24xlarge" and "p4d.24xlarge" in overrides
    assert asg["capacityRebalance"] is True


def test_capacity_reservation_and_block(record) -> None:
    res = record("vision-cr", purchaseOption="capacity-reservation", capacityReservationId="cr-0123456789abcdef0")
    spec = one(res.run, LT).inputs["capacityReservationSpecification"]
    assert spec == {"capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}}
    block = record(
        "vision-cb", purchaseOption="capacity-block", capacityReservationId="cr-0123456789abcdef1",
        instanceType="p4d.24xlarge", azId="use1-az6",
    )  # fmt: skip
    lt = one(block.run, LT).inputs
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"].endswith("f1")


def test_autoscaling_group_and_queue_alarms_follow_the_seed(record) -> None:
    # seed 001: min 4, max 32, add when more than 5 jobs wait, cooldown 300 s
    run = record("vision-asg32", autoscaling=True, budgetUsd=700000, gpuQuota=None, publicIps=False).run
    assert run.of_type(INSTANCE) == []  # the group launches the nodes
    asg = one(run, ASG).inputs
    assert (asg["minSize"], asg["maxSize"], asg["defaultCooldown"]) == (4, 32, 300)
    # the pinned gpuforge:nodeTemplateVersion, not $Latest (tests/aws/test_eks_ready.py, issue 21 item 3)
    assert asg["launchTemplate"]["version"] == "1" and asg["placementGroup"] == "vision-asg32-pg"
    assert len(asg["vpcZoneIdentifiers"]) == 1
    alarms = {a.name: a.inputs for a in run.of_type(ALARM)}
    high, empty = alarms["vision-asg32-queue-high"], alarms["vision-asg32-queue-empty"]
    assert (high["threshold"], high["comparisonOperator"]) == (5, "GreaterThanThreshold")
    assert (empty["threshold"], empty["comparisonOperator"]) == (0, "LessThanOrEqualToThreshold")
    assert empty["evaluationPeriods"] * empty["period"] == 300
    assert high["dimensions"] == {"gpuforge-stack": "vision-asg32"}
    policies = {p.name: p.inputs for p in run.of_type("aws:autoscaling/policy:Policy")}
    assert policies["vision-asg32-scale-out"]["scalingAdjustment"] == 1
    assert policies["vision-asg32-scale-in"]["scalingAdjustment"] == -1
    assert {p["cooldown"] for p in policies.values()} == {300}
    tags = {t["key"]: t for t in asg["tags"]}
    assert all(tags[k]["propagateAtLaunch"] for k in COST_TAGS)


def test_budget_alerts_at_80_and_100_percent(record) -> None:
    run = record(budgetEmails=["vision-leads@example.com"]).run
    budget = one(run, "aws:budgets/budget:Budget").inputs
    assert (budget["limitAmount"], budget["timeUnit"], budget["budgetType"]) == ("25000", "MONTHLY", "COST")
    assert budget["costFilters"] == [{"name": "TagKeyValue", "values": ["user:stack$vision-cv"]}]
    assert sorted(n["threshold"] for n in budget["notifications"]) == [80, 100]
    assert all(n["subscriberEmailAddresses"] == ["vision-leads@example.com"] for n in budget["notifications"])


def test_idle_alarm_under_70_percent(record) -> None:
    alarm = next(a.inputs for a in record().run.of_type(ALARM) if a.name.endswith("gpu-idle"))
    assert (alarm["threshold"], alarm["comparisonOperator"]) == (70, "LessThanThreshold")
    assert alarm["metricName"] == "nvidia_smi_utilization_gpu" and alarm["namespace"] == "CWAgent"
    assert alarm["evaluationPeriods"] * alarm["period"] == 60 * 60  # idleMinutes default 60
    custom = next(a.inputs for a in record("idle", idleMinutes=30).run.of_type(ALARM) if a.name.endswith("gpu-idle"))
    assert custom["evaluationPeriods"] * custom["period"] == 30 * 60


def _accepts_tags(type_token: str) -> bool:
    # pulumi-aws class for the token, e.g. aws:ec2/launchTemplate:LaunchTemplate -> pulumi_aws.ec2.LaunchTemplate
    module, cls = type_token.split(":")[1].split("/", maxsplit=1)[0], type_token.split(":")[2]
    mod = importlib.import_module("pulumi_aws" if module == "index" else f"pulumi_aws.{module}")
    return "tags" in inspect.signature(getattr(mod, cls)._internal_init).parameters


def test_tag_introspection_discriminates() -> None:
    assert _accepts_tags("aws:ec2/vpc:Vpc") and _accepts_tags("aws:budgets/budget:Budget")
    assert not _accepts_tags("aws:iam/rolePolicy:RolePolicy")
    assert not _accepts_tags("aws:ec2/volumeAttachment:VolumeAttachment")


@pytest.mark.parametrize(
    "over",
    [{}, {"purchaseOption": "spot", "autoscaling": True, "budgetUsd": 900000, "publicIps": False},
     {"profile": "risk-sim", "azId": "use1-az6", "budgetUsd": 50000}],
    ids=["on-demand", "spot-asg", "risk-sim"],
)  # fmt: skip
def test_every_taggable_resource_carries_the_cost_tags(record, over) -> None:
    run = record(f"tags-{len(over)}-{over.get('profile', 'cv')}", **over).run
    taggable = [r for r in run.resources if r.custom and r.type.startswith("aws:") and _accepts_tags(r.type)]
    assert len(taggable) > 20
    missing = {}
    for r in taggable:
        tags = r.inputs.get("tags") or {}
        if isinstance(tags, list):
            tags = {t["key"]: t["value"] for t in tags}
        if absent := [k for k in COST_TAGS if not tags.get(k)]:
            missing[f"{r.type} {r.name}"] = absent
    assert missing == {}


@pytest.mark.parametrize(
    ("over", "key"),
    [
        ({"purchaseOption": "capacity-reservation"}, "gpuforge:capacityReservationId"),
        ({"capacityReservationId": "cr-0123456789abcdef0"}, "gpuforge:capacityReservationId"),
        ({"purchaseOption": "capacity-reservation", "capacityReservationId": "res-1"}, "gpuforge:capacityReservationId"),
        ({"purchaseOption": "capacity-block", "capacityReservationId": "cr-0123456789abcdef0"}, "gpuforge:purchaseOption"),
        ({"spotMaxPrice": "3"}, "gpuforge:spotMaxPrice"),
        ({"purchaseOption": "spot", "spotMaxPrice": "cheap"}, "gpuforge:spotMaxPrice"),
        ({"autoscalingMax": 8}, "gpuforge:autoscalingMax"),
        ({"autoscaling": True, "autoscalingMin": 9, "autoscalingMax": 8}, "gpuforge:autoscalingMin"),
        ({"budgetEmails": ["x@example.com"], "budgetUsd": None}, "gpuforge:budgetEmails"),
        ({"budgetEmails": ["not-an-address"]}, "gpuforge:budgetEmails"),
        ({"purchaseOption": "reserved"}, "gpuforge:purchaseOption"),
    ],
)
def test_bad_fleet_config_names_the_key(record, over, key) -> None:
    with pytest.raises(ConfigError) as err:
        record(f"bad-{abs(hash(str(over)))}", **over)
    assert err.value.key == key
