"""GpuKubernetes under the SDK mock engine: the objects, their wiring per profile, and schema
validity of every recorded kubernetes:* resource."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from gpuforge.cli import main
from gpuforge.components.kubernetes.schema import recorded_manifests, validate_manifests
from gpuforge.preview import run_preview

ROOT = Path(__file__).resolve().parents[2]
OPERATORS = ["198.51.100.0/24"]  # the public CIDR the EKS API is opened to (required, core/kubernetes/settings.py)
NLP = {"aws:region": "us-east-1", "gpuforge:profile": "nlp-inference", "gpuforge:azId": "use1-az5",
       "gpuforge:kubernetes": "eks", "gpuforge:eksPublicAccessCidrs": OPERATORS, "gpuforge:publicIps": False}
CV = {"aws:region": "us-east-1", "gpuforge:profile": "cv-training", "gpuforge:azId": "use1-az4",
      "gpuforge:kubernetes": "eks", "gpuforge:eksPublicAccessCidrs": OPERATORS, "gpuforge:publicIps": False}


@pytest.fixture(scope="module")
def nlp():
    return run_preview(ROOT, "nlp-inference")  # the committed stack file


def project(tmp_path: Path, config: dict) -> Path:
    proj = tmp_path / "proj"
    (proj / "stacks").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "Pulumi.yaml", proj / "Pulumi.yaml")
    shutil.copy(ROOT / "__main__.py", proj / "__main__.py")
    (proj / "stacks" / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": config}))
    return proj


def one(run, typ: str, name_part: str = ""):
    found = [r for r in run.of_type(typ) if name_part in r.name]
    assert len(found) == 1, [r.name for r in run.of_type(typ)]
    return found[0]


def test_nlp_inference_stack_asks_for_eks(nlp):
    assert nlp.config.kubernetes is not None and nlp.config.kubernetes.mode == "eks"


def test_device_plugin_time_slices_each_t4_four_ways(nlp):
    cm = one(nlp.run, "kubernetes:core/v1:ConfigMap", "device-plugin")
    cfg = yaml.safe_load(cm.inputs["data"]["config.yaml"])
    assert cfg["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert cfg["flags"]["migStrategy"] == "none"
    ds = one(nlp.run, "kubernetes:apps/v1:DaemonSet", "nvidia-device-plugin")
    pod = ds.inputs["spec"]["template"]["spec"]
    assert pod["volumes"][1]["configMap"]["name"] == cm.inputs["metadata"]["name"]
    assert pod["containers"][0]["args"] == ["--config-file=/config/config.yaml"]


def test_quota_is_capacity_less_headroom_split_over_teams(nlp):
    # 2 nodes x 1 T4 x 4 shares = 8; x (1 - 20%) = 6.4; two teams -> 3 each (rounded down).
    # CPU 2 x 32 vCPU x 0.8 / 2 = 25.6; memory 2 x 128 GiB x 0.8 / 2 = 102.4 GiB.
    quotas = nlp.run.of_type("kubernetes:core/v1:ResourceQuota")
    assert sorted(q.inputs["metadata"]["namespace"] for q in quotas) == ["inference", "research"]
    for q in quotas:
        hard = q.inputs["spec"]["hard"]
        assert hard["requests.nvidia.com/gpu"] == "3"
        assert hard["requests.cpu"] == "25600m"
        assert hard["requests.memory"] == f"{int(102.4 * 1024)}Mi"
    total = sum(int(q.inputs["spec"]["hard"]["requests.nvidia.com/gpu"]) for q in quotas)
    assert total <= 8 * 0.85  # at least 15% of the shares stay free
    assert len(nlp.run.of_type("kubernetes:core/v1:LimitRange")) == 2


def test_taints_tolerations_and_labels_match(nlp):
    ng = one(nlp.run, "aws:eks/nodeGroup:NodeGroup", "-gpu")
    taint = ng.inputs["taints"][0]
    assert (taint["key"], taint["effect"]) == ("nvidia.com/gpu", "NO_SCHEDULE")
    label_key = "gpuforge.io/gpu"
    assert ng.inputs["labels"][label_key] == "true"
    for typ, part in (("kubernetes:apps/v1:DaemonSet", "nvidia"), ("kubernetes:apps/v1:Deployment", "")):
        pod = one(nlp.run, typ, part).inputs["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {label_key: "true"}
        assert any(t["key"] == taint["key"] and t["effect"] == "NoSchedule" and t["operator"] == "Exists"
                   for t in pod["tolerations"])


def test_inference_service_requests_one_share_and_scales_within_quota(nlp):
    dep = one(nlp.run, "kubernetes:apps/v1:Deployment")
    spec = dep.inputs["spec"]
    c = spec["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1" == c["resources"]["requests"]["nvidia.com/gpu"]
    assert {e["name"]: e["value"] for e in c["env"]} == {"MAX_BATCH_SIZE": "32", "MAX_BATCH_DELAY_MS": "10",
                                                     "MODEL_REPOSITORY": "/models"}
    assert spec["template"]["spec"]["priorityClassName"] == "gpuforge-inference"
    hpa = one(nlp.run, "kubernetes:autoscaling/v2:HorizontalPodAutoscaler").inputs["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 3)  # max = the team's 3 shares
    assert hpa["scaleTargetRef"]["name"] == dep.inputs["metadata"]["name"]
    svc = one(nlp.run, "kubernetes:core/v1:Service").inputs["spec"]
    assert svc["selector"] == spec["selector"]["matchLabels"]
    pdb = one(nlp.run, "kubernetes:policy/v1:PodDisruptionBudget").inputs["spec"]
    assert pdb["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_priority_classes_put_inference_above_preemptible_training(nlp):
    pcs = {p.inputs["metadata"]["name"]: p.inputs for p in nlp.run.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")}
    assert pcs["gpuforge-inference"]["value"] > pcs["gpuforge-training-preemptible"]["value"]
    assert pcs["gpuforge-training-preemptible"]["preemptionPolicy"] == "Never"


def test_eks_api_is_limited_and_least_privilege(nlp):
    cluster = one(nlp.run, "aws:eks/cluster:Cluster").inputs
    assert cluster["vpcConfig"]["endpointPrivateAccess"] is True
    # public only for the stack's named CIDRs (tests/aws/test_eks_endpoint.py has the private path)
    assert cluster["vpcConfig"]["endpointPublicAccess"] is True
    assert cluster["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24"]
    assert len(cluster["vpcConfig"]["subnetIds"]) == 2  # EKS needs two AZs
    attached = sorted(a.inputs["policyArn"].rsplit("/", 1)[1]
                      for a in nlp.run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                      if "eks-node" in a.name)
    # The EKS minimum, plus what AWS documents for the CloudWatch Observability add-on's agent.
    assert attached == ["AmazonEC2ContainerRegistryReadOnly", "AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy",
                        "CloudWatchAgentServerPolicy"]
    ng = one(nlp.run, "aws:eks/nodeGroup:NodeGroup", "-gpu").inputs
    assert ng["instanceTypes"] == ["g4dn.8xlarge"] and ng["scalingConfig"]["desiredSize"] == 2
    lt = one(nlp.run, "aws:ec2/launchTemplate:LaunchTemplate", "inference-eks-lt").inputs
    assert lt["placement"]["groupName"] == "nlp-inference-pg"
    assert lt["metadataOptions"]["httpTokens"] == "required"
    assert not nlp.run.of_type("aws:ec2/instance:Instance")  # the node group runs the GPU nodes


def test_system_pods_have_an_untainted_home(nlp):
    """CoreDNS, metrics-server and the add-on's controller do not tolerate the GPU taint: a small
    on-demand system node group without taints runs them, in the stack's subnet, on an IMDSv2
    template with an encrypted gp3 root, tagged like everything else."""
    from gpuforge.core.kubernetes.settings import defaults

    system = defaults()["system_nodes"]
    gpu = one(nlp.run, "aws:eks/nodeGroup:NodeGroup", "-gpu").inputs
    ng = one(nlp.run, "aws:eks/nodeGroup:NodeGroup", "-system").inputs
    assert gpu["taints"][0]["key"] == "nvidia.com/gpu"  # the GPU taint stays
    assert "taints" not in ng and "gpuforge.io/gpu" not in ng["labels"]
    assert ng["instanceTypes"] == [system["instance_type"]] == ["m6i.large"]
    assert ng["scalingConfig"] == {"desiredSize": 2, "minSize": 2, "maxSize": 2}
    assert ng["capacityType"] == "ON_DEMAND" and ng["amiType"] == "AL2023_x86_64_STANDARD"
    assert ng["subnetIds"] == gpu["subnetIds"] and ng["clusterName"] == gpu["clusterName"]
    assert ng["nodeRoleArn"] == gpu["nodeRoleArn"]  # the add-on's agent publishes from these nodes too
    lt = one(nlp.run, "aws:ec2/launchTemplate:LaunchTemplate", "eks-system-lt").inputs
    assert ng["launchTemplate"]["id"] != gpu["launchTemplate"]["id"]
    assert "placement" not in lt  # no placement group: nothing here talks EFA
    assert lt["metadataOptions"]["httpTokens"] == "required"
    (bdm,) = lt["blockDeviceMappings"]
    assert bdm["ebs"] == {"volumeSize": 30, "volumeType": "gp3", "encrypted": "true", "deleteOnTermination": "true"}
    (spec,) = lt["tagSpecifications"]
    assert spec["tags"]["gpuforge-node-role"] == "system"  # validate --discover leaves them out
    assert nlp.config.tags.items() <= spec["tags"].items() and nlp.config.tags.items() <= ng["tags"].items()
    addon = one(nlp.run, "aws:eks/addon:Addon", "cloudwatch")
    assert addon.inputs["clusterName"] == gpu["clusterName"]


def test_eks_multi_card_efa_type_gets_one_efa_per_card(tmp_path):
    """p4de.24xlarge has 4 network cards: an ENA primary and four EFA-only interfaces on the node
    group's template (core/addressing.py), none naming a subnet (the node group gives it),
    each with the cluster's and the stack's groups."""
    res = run_preview(project(tmp_path, CV), "t")
    lt = one(res.run, "aws:ec2/launchTemplate:LaunchTemplate", "t-eks-lt").inputs
    nics = lt["networkInterfaces"]
    assert [(n["networkCardIndex"], n["deviceIndex"], n.get("interfaceType")) for n in nics] == [
        (0, 0, None), (0, 1, "efa-only"), (1, 0, "efa-only"), (2, 0, "efa-only"), (3, 0, "efa-only")
    ]
    assert all("subnetId" not in n and "associatePublicIpAddress" not in n for n in nics)
    assert all(len(n["securityGroups"]) == 2 for n in nics) and "vpcSecurityGroupIds" not in lt


def test_kubeconfig_is_a_secret_output(nlp):
    assert nlp.to_dict()["outputs"]["kubeconfig"] == "[secret]"
    provider = one(nlp.run, "pulumi:providers:kubernetes")
    assert "certificate-authority-data" not in json.dumps(nlp.to_dict()["resources"])
    assert provider.inputs  # the provider got a kubeconfig (redacted in reports)


def test_every_recorded_kubernetes_object_is_schema_valid(nlp):
    docs = recorded_manifests(nlp.run.resources)
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == ["ConfigMap", "DaemonSet", "Deployment", "HorizontalPodAutoscaler", "LimitRange", "Namespace",
                     "PodDisruptionBudget", "PriorityClass", "ResourceQuota", "Service", "ServiceAccount"]
    assert validate_manifests(docs, "1.33") == []


def test_schema_validation_catches_a_broken_object(nlp):
    ds = dict(recorded_manifests([one(nlp.run, "kubernetes:apps/v1:DaemonSet", "nvidia-device-plugin")])[0])
    ds["spec"] = {**ds["spec"], "replicas": 2}  # DaemonSets have no replicas
    problems = validate_manifests([ds], "1.33")
    assert len(problems) == 1
    assert problems[0].obj == "DaemonSet/nvidia-device-plugin/nvidia-device-plugin"
    assert "replicas" in problems[0].error


def test_training_profile_shares_nothing_and_has_no_service(tmp_path):
    res = run_preview(project(tmp_path, CV), "t")
    cfg = yaml.safe_load(one(res.run, "kubernetes:core/v1:ConfigMap").inputs["data"]["config.yaml"])
    assert "sharing" not in cfg
    assert not res.run.of_type("kubernetes:apps/v1:Deployment")
    # 8 A100 x 0.8 / 2 teams = 3.2 -> 3 each
    for q in res.run.of_type("kubernetes:core/v1:ResourceQuota"):
        assert q.inputs["spec"]["hard"]["requests.nvidia.com/gpu"] == "3"


def cli(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    return int(exc.value.code or 0), capsys.readouterr().err


def test_existing_cluster_needs_a_secret_kubeconfig(tmp_path, capsys):
    base = {**NLP, "gpuforge:kubernetes": "existing"}
    proj = project(tmp_path, {**base, "gpuforge:kubeconfig": "apiVersion: v1"})
    code, err = cli(["preview", "--stack", "t", "--project-dir", str(proj)], capsys)
    assert code == 2 and "gpuforge:kubeconfig" in err and "--secret" in err and "Traceback" not in err
    proj = project(tmp_path, {**base, "gpuforge:kubeconfig": {"secure": "v1:abc:def"}})
    res = run_preview(proj, "t")
    assert not res.run.of_type("aws:eks/cluster:Cluster")
    assert res.run.of_type("aws:ec2/instance:Instance")  # the stack's own nodes, joined by the user
    assert one(res.run, "pulumi:providers:kubernetes")


@pytest.mark.parametrize(
    ("extra", "key", "hint"),
    [
        ({"gpuforge:inferenceReplicas": 4}, "gpuforge:inferenceReplicas", "at most 3"),
        ({"gpuforge:eksPublicAccessCidrs": ["0.0.0.0/0"]}, "gpuforge:eksPublicAccessCidrs", "whole internet"),
        ({"gpuforge:kubernetesTeams": ["Team A"]}, "gpuforge:kubernetesTeams", "DNS label"),
        ({"gpuforge:gpuHeadroomPercent": 5}, "gpuforge:gpuHeadroomPercent", "15"),
        ({"gpuforge:kubernetesVersion": "1.20"}, "gpuforge:kubernetesVersion", "1.33"),
        ({"gpuforge:kubernetes": "existing"}, "gpuforge:kubeconfig", "--secret"),
        ({"gpuforge:kubernetes": "gke"}, "gpuforge:kubernetes", "eks"),
    ],
)
def test_bad_kubernetes_config_exits_2(tmp_path, capsys, extra, key, hint):
    proj = project(tmp_path, {**NLP, **extra})
    code, err = cli(["preview", "--stack", "t", "--project-dir", str(proj)], capsys)
    assert code == 2, err
    assert err.startswith("error: ") and key in err and hint in err and "Traceback" not in err


def test_idle_alarm_reads_the_gpu_metric_the_addon_publishes_for_this_cluster(nlp):
    """EKS nodes boot the EKS AMI, not gpuforge's bootstrap and its agent: the CloudWatch
    Observability add-on publishes Container Insights' node_gpu_utilization, rolled up on
    ClusterName, and the alarm reads exactly that series of the node group's cluster."""
    from gpuforge.core.fleet import guardrails
    from gpuforge.core.kubernetes.settings import defaults

    eks_data, addon_data = guardrails()["idle"]["eks"], defaults()["cloudwatch_observability"]
    cluster = one(nlp.run, "aws:eks/cluster:Cluster")
    ng = one(nlp.run, "aws:eks/nodeGroup:NodeGroup", "-gpu").inputs
    assert ng["clusterName"] == cluster.name  # the mock engine names the cluster after its resource
    addon = one(nlp.run, "aws:eks/addon:Addon", "cloudwatch").inputs
    assert addon["addonName"] == addon_data["addon_name"] == "amazon-cloudwatch-observability"
    assert addon["clusterName"] == ng["clusterName"]
    assert "addonVersion" not in addon  # not pinned: EKS's default build (core/kubernetes/defaults.yaml)
    # The node role the node group's nodes run with may publish what the add-on's agent sends.
    role = one(nlp.run, "aws:iam/role:Role", "eks-node")
    assert ng["nodeRoleArn"].endswith(f"role/{role.name}")
    assert [a.inputs["policyArn"] for a in nlp.run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
            if a.inputs["role"] == role.name and "CloudWatch" in a.inputs["policyArn"]] == [addon_data["node_policy"]]
    # The add-on's GPU metrics need the NVIDIA device plugin in the cluster (CloudWatch user guide).
    assert one(nlp.run, "kubernetes:apps/v1:DaemonSet", "nvidia").inputs["metadata"]["name"] == "nvidia-device-plugin"

    (alarm,) = [a for a in nlp.run.of_type("aws:cloudwatch/metricAlarm:MetricAlarm") if a.name.endswith("-gpu-idle")]
    a = alarm.inputs
    assert (a["namespace"], a["metricName"]) == (eks_data["metric_namespace"], eks_data["metric_name"])
    assert (a["namespace"], a["metricName"]) == ("ContainerInsights", "node_gpu_utilization")
    assert a["dimensions"] == {"ClusterName": ng["clusterName"]}
    assert a["comparisonOperator"] == "LessThanThreshold" and a["threshold"] == nlp.config.fleet.idle_util_percent
    (topic,) = nlp.run.of_type("aws:sns/topic:Topic")
    assert a["alarmActions"] == [f"arn:aws:sns:us-east-1:000000000000:{topic.name}"]
    # No bootstrap agent series is watched, and none of GpuNodes' unused template, role or profile exists.
    assert not [r for r in nlp.run.of_type("aws:cloudwatch/metricAlarm:MetricAlarm") if r.inputs.get("namespace") == "CWAgent"]
    assert not nlp.run.of_type("gpuforge:aws:Nodes")


def test_addon_and_alarm_follow_the_idle_alarm(tmp_path, monkeypatch):
    """No idle alarm, no add-on and no extra node permission (as no alarm means no bootstrap agent)."""
    from gpuforge.components.kubernetes import component

    monkeypatch.setattr(component, "idle_alarm_args", lambda _cfg, eks_cluster_name=None: None)
    res = run_preview(project(tmp_path, NLP), "t")
    assert [a.inputs["addonName"] for a in res.run.of_type("aws:eks/addon:Addon")] == ["eks-pod-identity-agent"]
    assert not [a for a in res.run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                if "CloudWatch" in a.inputs["policyArn"]]
    assert not [a for a in res.run.of_type("aws:cloudwatch/metricAlarm:MetricAlarm") if a.name.endswith("-gpu-idle")]
