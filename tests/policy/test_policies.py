"""Every guardrail with a graph that passes it and one that violates it.

Graphs are recorded by the offline engine from real stack configs. Where the components cannot
be configured into a violation (they always encrypt, always require IMDSv2, always use one
placement group), the recorded graph is mutated in the one input the policy reads.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuforge.policy.policies import POLICIES, teams_config
from gpuforge.policycheck import check_graph
from tests.policy.conftest import mutate

LT = "aws:ec2/launchTemplate:LaunchTemplate"


def violations(resources: list[Any], policy: str) -> list[str]:
    return [v.message for v in check_graph(resources) if v.policy == policy]


def test_the_pack_has_the_issues_guardrails() -> None:
    assert {p.name for p in POLICIES} == {
        "no-public-ssh", "no-public-ssh-union", "encryption-on", "imdsv2-only", "cost-tags",
        "efa-placement-one-az", "storage-same-az", "gpu-quota", "budget-present",
    }  # fmt: skip


def test_a_complete_team_stack_passes_every_policy(record) -> None:
    assert check_graph(record().run.resources) == []


def test_no_public_ssh(record) -> None:
    open_ssh = record(sshCidrs=["0.0.0.0/0"], allowPublicSsh=True).run.resources
    msgs = violations(open_ssh, "no-public-ssh")
    assert len(msgs) == 1 and "0.0.0.0/0" in msgs[0] and "sshCidrs" in msgs[0]
    assert violations(record().run.resources, "no-public-ssh") == []


def test_encryption_on(record) -> None:
    def unencrypt(inputs: dict) -> None:
        inputs["blockDeviceMappings"][0]["ebs"]["encrypted"] = "false"

    bad = mutate(record().run.resources, LT, unencrypt)
    assert any("/dev/sda1 is not encrypted" in m for m in violations(bad, "encryption-on"))
    risk = record("vision-risk", profile="risk-sim", azId="use1-az6", budgetUsd=50000, gpuQuota=None).run.resources
    assert violations(risk, "encryption-on") == []  # includes the st1 data volumes
    bad_vol = mutate(risk, "aws:ebs/volume:Volume", lambda i: i.update(encrypted=False))
    assert len(violations(bad_vol, "encryption-on")) == 2  # one per node's data volume


def test_imdsv2_only(record) -> None:
    bad = mutate(record().run.resources, LT, lambda i: i["metadataOptions"].update(httpTokens="optional"))
    assert any("IMDSv1 is allowed" in m for m in violations(bad, "imdsv2-only"))
    assert violations(record().run.resources, "imdsv2-only") == []


def test_cost_tags(record) -> None:
    untagged = record("untagged", team=None, owner=None).run.resources
    msgs = violations(untagged, "cost-tags")
    assert msgs and all("team, owner" in m for m in msgs)
    assert any("aws:ec2/instance:Instance" in m for m in msgs)


def test_efa_placement_one_az(record) -> None:
    risk = record("vision-risk", profile="risk-sim", azId="use1-az6", budgetUsd=50000).run.resources
    assert violations(risk, "efa-placement-one-az") == []
    no_pg = mutate(risk, LT, lambda i: i.pop("placement"))
    assert any("cluster placement group" in m for m in violations(no_pg, "efa-placement-one-az"))

    def two_subnets(inputs: dict) -> None:
        nics = inputs["networkInterfaces"]  # p3dn has one EFA card: add a second in another subnet
        nics.append({**nics[0], "networkCardIndex": 1, "deviceIndex": 1, "subnetId": "subnet-elsewhere"})

    split = mutate(risk, LT, two_subnets)
    assert any("one AZ" in m for m in violations(split, "efa-placement-one-az"))
    # a single EFA node needs no placement group to pass
    single = mutate(record().run.resources, LT, lambda i: i.pop("placement"))
    assert violations(single, "efa-placement-one-az") == []


def test_storage_same_az(record) -> None:
    good = record().run.resources
    assert violations(good, "storage-same-az") == []
    moved = mutate(good, "aws:s3/directoryBucket:DirectoryBucket", lambda i: i["location"].update(name="use1-az6"))
    msgs = violations(moved, "storage-same-az")
    assert len(msgs) == 1 and "use1-az6" in msgs[0] and "use1-az4" in msgs[0]


def test_gpu_quota_with_headroom(record) -> None:
    # vision: quota 16, headroom 15% -> floor(16 * 0.85) = 13 GPUs. cv-training is 8, risk-sim 16.
    assert teams_config()["teamQuotas"]["vision"] == 16
    assert violations(record().run.resources, "gpu-quota") == []
    risk = record("vision-risk", profile="risk-sim", azId="use1-az6", budgetUsd=50000).run.resources
    msgs = violations(risk, "gpu-quota")
    assert len(msgs) == 1 and "needs 16 GPUs" in msgs[0] and "may use 13" in msgs[0]
    stranger = record("stranger", team="nobody").run.resources
    assert any("'nobody' has no GPU quota" in m for m in violations(stranger, "gpu-quota"))


def test_gpu_quota_counts_an_autoscaling_maximum(record) -> None:
    # 2 x p4de at most = 16 GPUs > 13; the group's maximum counts, not its minimum
    asg = record("vision-asg", autoscaling=True, autoscalingMin=1, autoscalingMax=2, budgetUsd=40000,
                 publicIps=False).run.resources
    msgs = violations(asg, "gpu-quota")
    assert len(msgs) == 1 and "needs 16 GPUs" in msgs[0]


def test_budget_present_and_affordable(record) -> None:
    assert violations(record().run.resources, "budget-present") == []
    none = record("nobudget", budgetUsd=None).run.resources
    assert violations(none, "budget-present") == ["no AWS Budget: set gpuforge:budgetUsd (monthly USD) in the stack file"]
    # p4de on-demand 27.44705 $/h * 720 h = 19,762 $ per 30 days: a 15,000 budget cannot cover it
    low = record("lowbudget", budgetUsd=15000).run.resources
    msgs = violations(low, "budget-present")
    assert len(msgs) == 1 and "19,762" in msgs[0] and "15,000" in msgs[0]


def test_budget_counts_the_eks_control_plane_and_system_nodes(record) -> None:
    # p4de 27.44705 $/h * 720 = 19,762; on EKS add 2 x m6i.large 0.096 and the control plane 0.10:
    # (27.44705 + 0.192 + 0.10) * 720 = 19,972 $ per 30 days (core/catalog/platform_prices.yaml)
    assert violations(record("plain", budgetUsd=19800).run.resources, "budget-present") == []
    eks = record("eks", budgetUsd=19800, kubernetes="eks", eksPublicAccessCidrs=["198.51.100.0/24"],
                 publicIps=False).run.resources
    msgs = violations(eks, "budget-present")
    assert len(msgs) == 1 and "19,972" in msgs[0] and "EKS control plane" in msgs[0]
    assert violations(record("eks-ok", budgetUsd=20000, kubernetes="eks", publicIps=False,
                             eksPublicAccessCidrs=["198.51.100.0/24"]).run.resources, "budget-present") == []
    # the system nodes carry no GPUs: the quota still counts the 8 A100s only
    assert violations(eks, "gpu-quota") == []


@pytest.mark.parametrize("stack", ["cv-training", "nlp-inference", "risk-sim"])
def test_reference_stacks_pass(stack: str) -> None:
    from pathlib import Path

    from gpuforge.preview import run_preview

    result = run_preview(Path(__file__).resolve().parents[2], stack, policies=True)
    assert result.policies_checked and result.violations == []
