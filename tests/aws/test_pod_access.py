"""Item 14 of issue 10: EKS pods can use EFA (the AWS EFA device plugin) and the stack's buckets
(EKS Pod Identity, least privilege)."""

from __future__ import annotations

import json

from tests.aws.conftest import eks_config, one

DS = "kubernetes:apps/v1:DaemonSet"


def test_efa_device_plugin_runs_on_the_gpu_nodes(record) -> None:
    result = record(eks_config(), stack="efa")  # g4dn.8xlarge: one EFA interface
    assert result.config.instance.efa
    ds = one(result.run, DS, "aws-efa").inputs
    assert ds["metadata"]["namespace"] == "kube-system"
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["priorityClassName"] == "system-node-critical"
    # the GPU nodes are tainted: without the toleration the plugin never lands where the EFA is
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == {"gpuforge.io/gpu": "true", "node.kubernetes.io/instance-type": "g4dn.8xlarge"}
    (ctr,) = pod["containers"]
    # the chart's values at aws/eks-charts@5239609242f3 (core/kubernetes/defaults.yaml)
    assert ctr["image"].endswith("/eks/aws-efa-k8s-device-plugin:v0.5.20")
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": True, "privileged": True, "runAsNonRoot": False,
                                      "runAsUser": 0}
    assert pod["automountServiceAccountToken"] is False
    assert {m["mountPath"] for m in ctr["volumeMounts"]} == {"/var/lib/kubelet/device-plugins", "/dev/infiniband/"}


def test_no_efa_plugin_without_efa(record) -> None:
    run = record(eks_config(instanceType="g4dn.xlarge", azId="use1-az4", inferenceReplicas=1), stack="noefa").run
    assert [d.name for d in run.of_type(DS)] == ["noefa-daemonset-nvidia-device-plugin"]


def test_pods_reach_only_the_stacks_buckets_through_pod_identity(record) -> None:
    result = record(eks_config(), stack="pid")
    run = result.run
    assert "eks-pod-identity-agent" in [a.inputs["addonName"] for a in run.of_type("aws:eks/addon:Addon")]
    role = one(run, "aws:iam/role:Role", "eks-storage")
    (trust,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    policy = json.loads(one(run, "aws:iam/rolePolicy:RolePolicy", "eks-storage").inputs["policy"])
    resources = {r for s in policy["Statement"] for r in s["Resource"]}
    ckpt, express = run.outputs["checkpointBucket"], run.outputs["directoryBucket"]
    assert all(ckpt in r or express in r for r in resources), resources
    assert not [a for s in policy["Statement"] for a in s["Action"] if "*" in a]
    teams = result.config.kubernetes.teams
    assocs = {a.inputs["namespace"]: a.inputs for a in run.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")}
    assert set(assocs) == set(teams) and all(a["serviceAccount"] == "storage" for a in assocs.values())
    accounts = {(s.inputs["metadata"]["namespace"], s.inputs["metadata"]["name"])
                for s in run.of_type("kubernetes:core/v1:ServiceAccount")}
    assert accounts == {(t, "storage") for t in teams}
    deploy = one(run, "kubernetes:apps/v1:Deployment").inputs
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == "storage"
