"""Whole-program tests: each committed stack, run offline, checked as policies on the graph."""

from __future__ import annotations

import base64
import gzip
import json

import pytest
import yaml

from gpuforge.core.catalog import load_catalog
from gpuforge.core.profiles import load_profile

STACKS = ["cv-training", "nlp-inference", "risk-sim"]
CATALOG = load_catalog()


@pytest.fixture(params=STACKS)
def result(request, preview_of):
    return preview_of(request.param)


def node_templates(run):
    """Launch templates that nodes boot from (the cluster's, and EKS's when it runs the nodes)."""
    return run.of_type("aws:ec2/launchTemplate:LaunchTemplate")


def gpu_templates(run):
    """The templates GPU nodes boot from: all but the EKS system node group's."""
    return [lt for lt in node_templates(run) if not lt.name.endswith("-eks-system-lt")]


def gpu_node_group(run):
    (ng,) = [g for g in run.of_type("aws:eks/nodeGroup:NodeGroup") if g.name.endswith("-gpu")]
    return ng


def cluster_template(run):
    (nodes,) = run.of_type("gpuforge:aws:Nodes")
    (lt,) = [t for t in node_templates(run) if t.parent == nodes.urn]
    return lt


def on_eks(run) -> bool:
    """An EKS managed node group runs the GPU nodes (EKS AMI, not gpuforge's bootstrap)."""
    return bool(run.of_type("aws:eks/nodeGroup:NodeGroup"))


def test_eks_stacks_declare_only_the_node_groups_template(result):
    """On EKS nothing launches from GpuNodes' template, role or instance profile: none is declared."""
    run = result.run
    if not on_eks(run):
        assert len(run.of_type("gpuforge:aws:Nodes")) == 1
        return
    ng = gpu_node_group(run)
    templates = node_templates(run)
    stack = result.config.stack
    # the GPU node group's template, and the system node group's (components/kubernetes/eks.py)
    assert sorted(lt.name for lt in templates) == [f"{stack}-eks-lt", f"{stack}-eks-system-lt"]
    assert ng.inputs["launchTemplate"]["id"].startswith("lt-")  # the node group boots the one template
    assert run.of_type("gpuforge:aws:Nodes") == []
    assert run.of_type("aws:iam/instanceProfile:InstanceProfile") == []
    assert sorted(r.name for r in run.of_type("aws:iam/role:Role")) == [
        f"{result.config.stack}-eks-cluster", f"{result.config.stack}-eks-node", f"{result.config.stack}-eks-storage"
    ]


def test_every_az_scoped_resource_is_in_the_stacks_az_id(result):
    run, az_id = result.run, result.config.az_id
    (network,) = run.of_type("gpuforge:aws:Network")
    subnets = run.of_type("aws:ec2/subnet:Subnet")
    node_subnets = [s for s in subnets if s.parent == network.urn]
    # the node subnet, and with private nodes the NAT gateway's subnet: both in the stack's AZ ID
    assert {s.inputs["availabilityZoneId"] for s in node_subnets} == {az_id}
    # The only other subnet allowed is EKS's second control-plane subnet (EKS requires two AZs);
    # it carries control-plane ENIs only, never a node.
    for other in (s for s in subnets if s.parent != network.urn):
        assert "gpuforge:kubernetes:Eks$" in other.urn, other.name
    express = run.of_type("aws:s3/directoryBucket:DirectoryBucket")
    assert len(express) == 1
    assert express[0].inputs["location"] == {"name": az_id, "type": "AvailabilityZone"}
    assert express[0].inputs["bucket"].endswith(f"--{az_id}--x-s3")
    # Volumes take the AZ name from the subnet (EBS has no AZ-ID input), so compare with the
    # subnet's recorded AZ, which the engine derived from the same AZ ID.
    az_name = run.outputs["availabilityZone"]
    for vol in run.of_type("aws:ebs/volume:Volume"):
        assert vol.inputs["availabilityZone"] == az_name
    assert {n["az_id"] for n in run.outputs["inventory"]["nodes"]} <= {az_id}


def test_one_cluster_placement_group_that_every_node_joins(result):
    run = result.run
    groups = run.of_type("aws:ec2/placementGroup:PlacementGroup")
    assert len(groups) == 1 and groups[0].inputs["strategy"] == "cluster"
    name = groups[0].inputs["name"] if "name" in groups[0].inputs else groups[0].name
    for lt in gpu_templates(run):
        assert lt.inputs["placement"]["groupName"] == name, lt.name
    instances = run.of_type("aws:ec2/instance:Instance")
    if on_eks(run):  # EKS runs the GPU nodes: a managed node group on a template in the placement group
        assert instances == []
        ng = gpu_node_group(run)
        assert ng.inputs["scalingConfig"]["desiredSize"] == result.config.node_count
        (subnet,) = [s for s in run.of_type("aws:ec2/subnet:Subnet")
                     if s.inputs["availabilityZoneId"] == result.config.az_id and not s.name.endswith("-egress")]
        assert ng.inputs["subnetIds"] == [f"{subnet.name}-offline"]
    else:
        assert len(instances) == result.config.node_count
        assert all(i.inputs["placementGroup"] == name for i in instances)


def test_efa_interfaces_match_the_catalog(result):
    it = CATALOG.instance(result.config.instance.name)
    if on_eks(result.run):
        (lt,) = gpu_templates(result.run)
        if not it.efa:  # no interfaces declared: EKS gives the nodes their one ENA interface
            assert "networkInterfaces" not in lt.inputs
            return
        nics = lt.inputs["networkInterfaces"]
        # The node group gives the subnets (EKS rejects a subnet in the template's interfaces), and
        # the security groups sit on the interfaces, not beside them (EC2 takes one or the other).
        assert all("subnetId" not in n for n in nics)
        assert "vpcSecurityGroupIds" not in lt.inputs
        (sg,) = result.run.of_type("aws:ec2/securityGroup:SecurityGroup")
        assert all(f"{sg.name}-offline" in n["securityGroups"] and len(n["securityGroups"]) == 2 for n in nics)
    else:
        nics = cluster_template(result.run).inputs["networkInterfaces"]
    # core/addressing.py: an EFA device on every card; multi-card types put an ENA primary
    # first and EFA-only interfaces (no IP address) on every card
    layout = [(n["networkCardIndex"], n["deviceIndex"], n.get("interfaceType")) for n in nics]
    if it.efa_interfaces > 1:
        assert layout == [(0, 0, None), (0, 1, "efa-only"), *((c, 0, "efa-only") for c in range(1, it.efa_interfaces))]
    else:
        assert layout == [(0, 0, "efa" if it.efa else None)]


def test_security_group_rules(result):
    run = result.run
    (sg,) = run.of_type("aws:ec2/securityGroup:SecurityGroup")
    assert "ingress" not in sg.inputs and "egress" not in sg.inputs  # rules are separate resources
    ingress = run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    egress = run.of_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
    self_in = [r for r in ingress if r.inputs.get("referencedSecurityGroupId")]
    self_out = [r for r in egress if r.inputs.get("referencedSecurityGroupId")]
    assert [r.inputs["ipProtocol"] for r in self_in] == ["-1"]
    assert [r.inputs["ipProtocol"] for r in self_out] == ["-1"]
    ssh = [r for r in ingress if r.inputs.get("fromPort") == 22]
    assert sorted(r.inputs["cidrIpv4"] for r in ssh) == sorted(result.config.ssh_cidrs)
    for rule in ingress:
        assert rule.inputs.get("cidrIpv4") != "0.0.0.0/0" and rule.inputs.get("cidrIpv6") != "::/0"
    # Nothing but the group itself and HTTP(S) may leave the cluster.
    open_out = [r for r in egress if r.inputs.get("cidrIpv4") == "0.0.0.0/0"]
    assert sorted(r.inputs["fromPort"] for r in open_out) == [80, 443]


def test_imdsv2_and_encrypted_disks(result):
    for lt in node_templates(result.run):
        assert lt.inputs["metadataOptions"]["httpTokens"] == "required", lt.name
        (root,) = lt.inputs["blockDeviceMappings"]
        assert root["ebs"]["encrypted"] == "true" and root["ebs"]["volumeType"] == "gp3"
    for vol in result.run.of_type("aws:ebs/volume:Volume"):
        assert vol.inputs["encrypted"] is True


def test_buckets_private_encrypted_tls_only_versioned(result):
    run = result.run
    (bucket,) = run.of_type("aws:s3/bucket:Bucket")
    (pab,) = run.of_type("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert all(pab.inputs[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                                "restrictPublicBuckets"))
    sse = run.of_type("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert len(sse) == 2  # checkpoints and directory bucket
    (versioning,) = run.of_type("aws:s3/bucketVersioning:BucketVersioning")
    assert versioning.inputs["versioningConfiguration"]["status"] == "Enabled"
    (policy,) = run.of_type("aws:s3/bucketPolicy:BucketPolicy")
    doc = json.loads(policy.inputs["policy"])
    (stmt,) = doc["Statement"]
    assert stmt["Effect"] == "Deny" and stmt["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert bucket.inputs["bucket"] in stmt["Resource"][0]


def test_iam_is_scoped_to_this_clusters_buckets(result):
    run = result.run
    if on_eks(run):
        # No bucket access on the EKS node role: pods get the buckets through EKS Pod Identity
        # (tests/aws/test_pod_access.py); the node role's managed policies are checked in tests/k8s.
        assert [p.name for p in run.of_type("aws:iam/rolePolicy:RolePolicy")] == [f"{result.config.stack}-eks-storage-buckets"]
        return
    (nodes,) = run.of_type("gpuforge:aws:Nodes")
    (attach,) = [a for a in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment") if a.parent == nodes.urn]
    assert attach.inputs["policyArn"].endswith("AmazonSSMManagedInstanceCore")
    (inline,) = run.of_type("aws:iam/rolePolicy:RolePolicy")
    doc = json.loads(inline.inputs["policy"])
    # PutMetricData has no resource-level ARNs, so its Resource is "*": allowed only when a
    # cloudwatch:namespace condition scopes it to the idle alarm's namespace.
    alarm = idle_alarm(run)
    metrics = [s for s in doc["Statement"] if s["Action"] == ["cloudwatch:PutMetricData"]]
    assert [(s["Resource"], s["Condition"]) for s in metrics] == [
        (["*"], {"StringEquals": {"cloudwatch:namespace": alarm.inputs["namespace"]}})
    ]
    resources = [r for s in doc["Statement"] if s not in metrics for r in s["Resource"]]
    assert all("*" not in r.replace("/*", "") for r in resources), resources
    assert not [s for s in doc["Statement"] if any("*" in a for a in s["Action"])], "no wildcard actions"
    bucket = run.outputs["checkpointBucket"]
    assert any(bucket in r for r in resources)


def idle_alarm(run):
    (alarm,) = [a for a in run.of_type("aws:cloudwatch/metricAlarm:MetricAlarm") if a.name.endswith("-gpu-idle")]
    return alarm


def test_nodes_publish_the_metric_the_idle_alarm_reads(result):
    """The alarm can fire: the agent config the nodes boot with publishes its namespace, metric
    and exact dimension set (the agent names nvidia_gpu measurements nvidia_smi_<name>).
    EKS nodes boot no gpuforge bootstrap: there the CloudWatch Observability add-on of the node
    group's cluster publishes Container Insights' GPU metric, rolled up per cluster name."""
    run = result.run
    alarm = idle_alarm(run).inputs
    if on_eks(run):
        ng = gpu_node_group(run)
        (addon,) = [a for a in run.of_type("aws:eks/addon:Addon") if "cloudwatch" in a.name]
        assert addon.inputs["addonName"] == "amazon-cloudwatch-observability"
        assert addon.inputs["clusterName"] == ng.inputs["clusterName"]
        assert (alarm["namespace"], alarm["metricName"]) == ("ContainerInsights", "node_gpu_utilization")
        assert alarm["dimensions"] == {"ClusterName": ng.inputs["clusterName"]}
        return
    data = base64.b64decode(cluster_template(run).inputs["userData"])
    doc = yaml.safe_load(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    assert "/opt/gpuforge/phases/cloudwatch-agent.sh" in files
    assert "cloudwatch-agent" in files["/opt/gpuforge/bin/gpuforge-bootstrap"].split("PHASES=(")[1].split(")")[0]
    agent = json.loads(files["/etc/gpuforge/cloudwatch-agent.json"])["metrics"]
    assert agent["namespace"] == alarm["namespace"]
    nvidia = agent["metrics_collected"]["nvidia_gpu"]
    assert alarm["metricName"] in [f"nvidia_smi_{m}" for m in nvidia["measurement"]]
    assert "nvidia_smi_memory_used" in [f"nvidia_smi_{m}" for m in nvidia["measurement"]]
    # The roll-up series carries exactly the alarm's dimensions, with the alarm's values.
    assert sorted(alarm["dimensions"]) in agent["aggregation_dimensions"]
    assert alarm["dimensions"].items() <= nvidia["append_dimensions"].items()
    assert alarm["dimensions"] == {"gpuforge-stack": result.config.stack}


def test_tags_on_taggable_resources(result):
    expected = {"project": "gpuforge", "stack": result.config.stack, "profile": result.config.profile.name}
    tagged = [r for r in result.run.resources if r.custom and "tags" in r.inputs]
    assert len(tagged) >= 10
    for r in tagged:
        assert expected.items() <= r.inputs["tags"].items(), r.name


def test_nodes_boot_the_rendered_bootstrap_and_are_named_by_tag(result):
    if on_eks(result.run):  # the EKS AMI bootstraps the node group's nodes; its template carries no user data
        assert [lt for lt in node_templates(result.run) if "userData" in lt.inputs] == []
        return
    (lt,) = [cluster_template(result.run)]
    data = base64.b64decode(lt.inputs["userData"])
    if data[:2] == b"\x1f\x8b":  # gzip: cloud-init accepts it, and it keeps large bootstraps under 16 KB
        data = gzip.decompress(data)
    assert data.startswith(b"#cloud-config")
    assert len(base64.b64decode(lt.inputs["userData"])) <= 16 * 1024
    assert lt.inputs["metadataOptions"]["instanceMetadataTags"] == "enabled"  # the name comes from the tag
    for inst in result.run.of_type("aws:ec2/instance:Instance"):
        assert "userDataBase64" not in inst.inputs and "userData" not in inst.inputs
        assert inst.inputs["tags"]["Name"] == inst.name


def test_exports(result):
    out = result.run.outputs
    inv = out["inventory"]
    assert inv["profile"] == result.config.profile.name
    assert inv["ssh"]["user"] == "ubuntu"
    names = [n["name"] for n in inv["nodes"]]
    # EKS node-group instances are not known at deploy time, so their inventory is empty.
    expected = 0 if result.run.of_type("aws:eks/nodeGroup:NodeGroup") else result.config.node_count
    assert names == sorted(names) and len(names) == expected
    for node in inv["nodes"]:
        assert {"name", "host", "instance_id", "private_ip", "public_ip", "instance_type", "az_id"} <= node.keys()
        assert node["instance_type"] == result.config.instance.name
    assert out["placementGroup"] and out["directoryBucket"] and out["checkpointBucket"]
    assert result.run.duplicates == []


def test_every_child_is_parented_under_the_cluster(result):
    run = result.run
    (cluster,) = run.of_type("gpuforge:aws:GpuCluster")
    by_urn = run.by_urn()
    for r in run.resources:
        if r.type.startswith("aws:"):
            chain, cur = [], r
            while cur.parent in by_urn:
                cur = by_urn[cur.parent]
                chain.append(cur.urn)
            assert cluster.urn in chain, r.name


def test_seed_shapes():
    cv, nlp, risk = (load_profile(n) for n in STACKS)
    assert (cv.shape.instance_type, cv.shape.node_count) == ("p4de.24xlarge", 1)
    assert (nlp.shape.instance_type, nlp.shape.node_count) == ("g4dn.8xlarge", 2)
    assert (risk.shape.instance_type, risk.shape.node_count) == ("p3dn.24xlarge", 2)


def test_cv_training_done_when(preview_of):
    """The issue's acceptance line: p4de in a cluster PG, 4 EFA, directory bucket same AZ ID."""
    doc = preview_of("cv-training").to_dict()
    assert doc["engine"] == "offline" and doc["stack"] == "cv-training"
    lt = next(r for r in doc["resources"] if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate")
    assert lt["inputs"]["instanceType"] == "p4de.24xlarge"
    assert [n.get("interfaceType") for n in lt["inputs"]["networkInterfaces"]] == [None] + ["efa-only"] * 4
    bucket = next(r for r in doc["resources"] if r["type"] == "aws:s3/directoryBucket:DirectoryBucket")
    assert bucket["inputs"]["location"]["name"] == "use1-az4"
    assert doc["cost"]["hourly"]["on_demand"] == pytest.approx(27.44705 + 200 * 0.08 / 730, abs=1e-3)


def test_risk_sim_has_an_st1_volume_per_node(preview_of):
    run = preview_of("risk-sim").run
    vols = run.of_type("aws:ebs/volume:Volume")
    assert [(v.inputs["type"], v.inputs["size"]) for v in vols] == [("st1", 4096)] * 2
    attaches = run.of_type("aws:ec2/volumeAttachment:VolumeAttachment")
    assert len(attaches) == 2 and {a.inputs["deviceName"] for a in attaches} == {"/dev/sdf"}
    for other in ("cv-training", "nlp-inference"):
        assert preview_of(other).run.of_type("aws:ebs/volume:Volume") == []


def test_runs_in_one_process_do_not_leak_into_each_other(preview_of):
    """A stale root Stack from an earlier run would parent this run's resources (pitfall 1)."""
    for stack in STACKS:
        run = preview_of(stack).run
        stacks = run.of_type("pulumi:pulumi:Stack")
        assert [s.name for s in stacks] == [f"gpuforge-{stack}"]
        assert all(f"urn:pulumi:{stack}::gpuforge::" in r.urn for r in run.resources)
        assert sum(r.custom for r in run.resources) == len({r.urn for r in run.resources if r.custom})


def test_preview_cost_is_the_cost_commands_arithmetic(result):
    """One arithmetic: the preview's lines add up to what `gpuforge cost` reports."""
    from gpuforge.core.costplan import stack_cost

    cost = result.to_dict()["cost"]
    sc = stack_cost(result.config)
    assert cost["hourly"]["on_demand"] == pytest.approx(sc.hourly("on_demand"), abs=1e-4)
    assert cost["hourly"]["spot"] == pytest.approx(sc.hourly("spot"), abs=1e-4)
    lines_od = sum(line["on_demand_usd_per_hour"] for line in cost["lines"])
    assert lines_od == pytest.approx(cost["hourly"]["on_demand"], abs=1e-3)
    hourly = sc.hourly("on_demand")
    assert hourly is not None
    assert cost["thirty_days"]["on_demand"] == pytest.approx(hourly * 720, abs=0.01)
