"""An EKS cluster for a GPU stack: control plane, least-privilege IAM, a managed node group of the
stack's GPU instance type in its subnet and cluster placement group (tainted NoSchedule
nvidia.com/gpu), and a small untainted system node group where pods that do not tolerate that
taint (CoreDNS, the CloudWatch Observability add-on's controller, metrics-server) run.

EFA types get one EFA interface per network card on the GPU template (components/compute.py
`network_interfaces`), without a subnet: the EKS user guide ("Manage EFA devices on Amazon EKS",
https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html) passes
per-interface EFA configuration to managed node groups through launch templates, and its
"Customize managed nodes with launch templates" page prohibits only the interfaces' subnet (the
node group's subnets apply). With interfaces, the security groups go on each interface.

Why a launch template of its own rather than GpuNodes': EKS managed node groups reject launch
templates that set an IAM instance profile or subnet-bound network interfaces (EKS user guide,
"Customize managed nodes with launch templates"), and the EKS-optimised NVIDIA AMI brings its own
driver and bootstrap, so the Ubuntu user data does not apply.

Nor does its CloudWatch agent: with `container_insights` the cluster gets the Amazon CloudWatch
Observability add-on, whose agent and DCGM exporter publish the GPU metrics the stack's idle alarm
reads (components/monitoring.py), and the node role the policy AWS documents for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpuforge.components.compute import network_interfaces, node_policy
from gpuforge.components.kubernetes.manifests import GPU_TAINT
from gpuforge.core.catalog import InstanceType
from gpuforge.core.kubernetes.settings import GPU_NODE_LABEL, defaults

CLUSTER_POLICIES = ("arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",)
# The minimum AWS documents for managed-node-group nodes; nothing else (no S3, no SSM): pods
# that need AWS access get it through their own service-account role.
NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
)
AMI_TYPE = "AL2023_x86_64_NVIDIA"  # EKS-optimised AL2023 with the NVIDIA driver and container toolkit
LOG_TYPES = ["api", "audit", "authenticator"]
SYSTEM_NODE_LABEL = "gpuforge.io/system"
# Instance tag on system nodes: `gpuforge validate --discover` skips them (validate/discover.py).
SYSTEM_ROLE_TAG = "gpuforge-node-role"


@dataclass(frozen=True)
class PrivateAccess:
    """How operators reach a private-only API endpoint: their networks, the transit gateway that
    connects them to the VPC, and the route tables of the subnets holding the endpoint's ENIs."""

    cidrs: tuple[str, ...]
    transit_gateway_id: str
    route_table_id: str  # the transit gateway route table the attachment associates with and propagates to
    route_table_ids: tuple[pulumi.Input[str], ...]


@dataclass(frozen=True)
class StorageAccess:
    """The stack's buckets and the namespaces whose `storage` service account may use them."""

    directory_bucket_arn: pulumi.Input[str]
    checkpoint_bucket_arn: pulumi.Input[str]
    namespaces: tuple[str, ...]


@dataclass(frozen=True)
class EksArgs:
    version: str
    region: str
    vpc_id: pulumi.Input[str]
    node_subnet_id: pulumi.Input[str]
    control_plane_az_id: str
    control_plane_cidr: str
    node_security_group_id: pulumi.Input[str]
    placement_group: pulumi.Input[str]
    instance: InstanceType
    node_count: int
    root_volume_gib: int
    public_access_cidrs: tuple[str, ...]
    private_access: PrivateAccess | None = None  # None: public endpoint limited to public_access_cidrs
    template_version: int = 1  # gpuforge:nodeTemplateVersion: the GPU template version the node group runs
    labels: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    # The CloudWatch Observability add-on and its node permission (the idle alarm's GPU metric).
    container_insights: bool = False
    storage: StorageAccess | None = None  # EKS Pod Identity for the stack's buckets


def _role(name: str, service: str, policies: tuple[str, ...], tags: dict[str, str], opts: pulumi.ResourceOptions
          ) -> tuple[aws.iam.Role, list[aws.iam.RolePolicyAttachment]]:
    """A role and its managed-policy attachments. What assumes the role must wait for the
    attachments: pulumi-aws's aws.eks.Cluster and NodeGroup docs ("Ensure that IAM Role permissions
    are created before and deleted after EKS ... handling. Otherwise, EKS will not be able to
    properly delete EKS managed EC2 infrastructure such as Security Groups")."""
    role = aws.iam.Role(
        name,
        assume_role_policy=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }),
        tags=tags,
        opts=opts,
    )
    attachments = [
        aws.iam.RolePolicyAttachment(f"{name}-{arn.rsplit('/', 1)[1]}", role=role.name, policy_arn=arn, opts=opts)
        for arn in policies
    ]
    return role, attachments


class EksCluster(pulumi.ComponentResource):
    name: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]  # a secret: it names the cluster's endpoint and CA

    def __init__(self, name: str, args: EksArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuforge:kubernetes:Eks", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = args.tags

        # EKS wants subnets in two AZs. The second one only holds control-plane ENIs; it has
        # no internet route (the VPC's main route table) and no nodes.
        cp_subnet = aws.ec2.Subnet(
            f"{name}-controlplane",
            vpc_id=args.vpc_id,
            cidr_block=args.control_plane_cidr,
            availability_zone_id=args.control_plane_az_id,
            tags={**tags, "Name": f"{name}-controlplane"},
            opts=child,
        )
        cluster_role, cluster_attachments = _role(f"{name}-eks-cluster", "eks.amazonaws.com", CLUSTER_POLICIES, tags,
                                                  child)
        cluster = aws.eks.Cluster(
            f"{name}-eks",
            version=args.version,
            role_arn=cluster_role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=[args.node_subnet_id, cp_subnet.id],
                # Nodes reach the API inside the VPC; operators through the public endpoint, limited
                # to the stack's CIDRs (config refuses none and 0.0.0.0/0), or, private-only,
                # through the transit gateway below.
                endpoint_private_access=True,
                endpoint_public_access=args.private_access is None,
                public_access_cidrs=list(args.public_access_cidrs) if args.private_access is None else None,
            ),
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API", bootstrap_cluster_creator_admin_permissions=True
            ),
            enabled_cluster_log_types=LOG_TYPES,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=cluster_attachments),
        )
        if args.private_access is not None:
            _private_path(name, args.private_access, args.vpc_id, [args.node_subnet_id, cp_subnet.id],
                          cluster.vpc_config.apply(lambda v: v.cluster_security_group_id or ""), tags, child)
        observability = defaults()["cloudwatch_observability"]
        node_policies = NODE_POLICIES + ((observability["node_policy"],) if args.container_insights else ())
        node_role, node_attachments = _role(f"{name}-eks-node", "ec2.amazonaws.com", node_policies, tags, child)
        # The cluster security group lets nodes and control plane talk; the stack's group
        # carries its SSH and node-to-node rules (all traffic within the group: what EFA needs).
        cluster_sg = cluster.vpc_config.apply(lambda v: v.cluster_security_group_id or "")
        efa = args.instance.efa
        lt = _node_template(
            f"{name}-eks-lt", args.root_volume_gib, tags, child,
            placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=args.placement_group),
            network_interfaces=network_interfaces(
                args.instance, None, args.node_security_group_id, None, extra_security_groups=[cluster_sg]
            ) if efa else None,
            vpc_security_group_ids=None if efa else [cluster_sg, args.node_security_group_id],
        )
        node_group = aws.eks.NodeGroup(
            f"{name}-gpu",
            cluster_name=cluster.name,
            node_role_arn=node_role.arn,
            subnet_ids=[args.node_subnet_id],  # the one AZ of the stack, next to its storage
            instance_types=[args.instance.name],
            ami_type=AMI_TYPE,
            capacity_type="ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=args.node_count, min_size=args.node_count, max_size=args.node_count
            ),
            # A pinned version, as for GpuNodes (components/compute.py): a template change becomes a
            # new version, and EKS replaces the GPU nodes (a rolling node-group update) only when
            # the stack raises gpuforge:nodeTemplateVersion.
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(id=lt.id, version=str(args.template_version)),
            labels={GPU_NODE_LABEL: "true", **args.labels},
            taints=[aws.eks.NodeGroupTaintArgs(key=GPU_TAINT["key"], value=GPU_TAINT["value"], effect="NO_SCHEDULE")],
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster, *node_attachments]),
        )
        # Untainted, on-demand, no placement group: the system pods' home (defaults.yaml system_nodes).
        system = defaults()["system_nodes"]
        system_lt = _node_template(
            f"{name}-eks-system-lt", int(system["root_volume_gib"]), {**tags, SYSTEM_ROLE_TAG: "system"}, child,
            vpc_security_group_ids=[cluster_sg, args.node_security_group_id],
        )
        system_group = aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=cluster.name,
            node_role_arn=node_role.arn,
            subnet_ids=[args.node_subnet_id],
            instance_types=[system["instance_type"]],
            ami_type=system["ami_type"],
            capacity_type="ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=int(system["count"]), min_size=int(system["count"]), max_size=int(system["count"])
            ),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=system_lt.id, version=system_lt.latest_version.apply(str)
            ),
            labels={SYSTEM_NODE_LABEL: "true", **args.labels},
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster, *node_attachments]),
        )
        self.addons: list[pulumi.Resource] = []
        if args.container_insights:
            observability_addon = aws.eks.Addon(
                f"{name}-cloudwatch-observability",
                cluster_name=cluster.name,
                addon_name=observability["addon_name"],
                addon_version=observability["addon_version"],  # None: EKS's default for the version
                tags=tags,
                # It turns ACTIVE once its pods run on nodes: the agent and DCGM exporter DaemonSets
                # tolerate every taint (aws-observability/helm-charts, the add-on's chart), its
                # controller Deployment does not and runs on the system nodes; the agent
                # publishes with the node role's permission (both groups share the role).
                opts=pulumi.ResourceOptions(parent=self, depends_on=[node_group, system_group]),
            )
            self.addons.append(observability_addon)

        # What the Kubernetes objects wait for (components/kubernetes/component.py): the node
        # groups their pods run on, the add-ons, and the pod identity associations.
        self.gpu_node_group: pulumi.Resource = node_group
        self.system_node_group: pulumi.Resource = system_group
        self.associations: dict[str, pulumi.Resource] = {}
        if args.storage is not None:
            agent, self.associations = _pod_identity(
                name, cluster, args.storage, tags, pulumi.ResourceOptions(parent=self, depends_on=[system_group])
            )
            self.addons.append(agent)

        self.name = cluster.name
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(cluster.name, cluster.endpoint, cluster.certificate_authority).apply(
                lambda v: kubeconfig_for(v[0], v[1], getattr(v[2], "data", None) or "", args.region)
            )
        )
        self.register_outputs({"clusterName": cluster.name, "kubeconfig": self.kubeconfig})


def _pod_identity(
    name: str, cluster: aws.eks.Cluster, storage: StorageAccess, tags: dict[str, str], opts: pulumi.ResourceOptions
) -> tuple[aws.eks.Addon, dict[str, pulumi.Resource]]:
    """EKS Pod Identity (EKS user guide, "Learn how EKS Pod Identity grants pods access to AWS
    services" and "Create the pod identity association"): the agent add-on (a DaemonSet, so it waits
    for nodes), a role that only pods.eks.amazonaws.com may assume (sts:AssumeRole and
    sts:TagSession, the trust policy the guide gives), the same least-privilege bucket policy the
    nodes get (components/compute.py node_policy), and one association per team namespace."""
    pod = defaults()["pod_identity"]
    agent = aws.eks.Addon(f"{name}-pod-identity-agent", cluster_name=cluster.name, addon_name=pod["addon_name"],
                          tags=tags, opts=opts)
    role = aws.iam.Role(
        f"{name}-eks-storage",
        assume_role_policy=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                           "Action": ["sts:AssumeRole", "sts:TagSession"]}],
        }),
        description="gpuforge pods: this stack's buckets only",
        tags=tags,
        opts=opts,
    )
    bucket_policy = aws.iam.RolePolicy(
        f"{name}-eks-storage-buckets",
        role=role.id,
        policy=pulumi.Output.all(storage.directory_bucket_arn, storage.checkpoint_bucket_arn).apply(
            lambda arns: node_policy(arns[0], [arns[1]], None)
        ),
        opts=opts,
    )
    # The association waits for the role's bucket policy: a pod admitted once it exists gets
    # credentials that can already read the bucket.
    with_policy = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[bucket_policy]))
    associations: dict[str, pulumi.Resource] = {
        ns: aws.eks.PodIdentityAssociation(
            f"{name}-storage-{ns}", cluster_name=cluster.name, namespace=ns, service_account=pod["service_account"],
            role_arn=role.arn, tags=tags, opts=with_policy,
        )
        for ns in storage.namespaces
    }
    return agent, associations


def _private_path(
    name: str, access: PrivateAccess, vpc_id: pulumi.Input[str], subnet_ids: list[pulumi.Input[str]],
    cluster_sg: pulumi.Input[str], tags: dict[str, str], opts: pulumi.ResourceOptions,
) -> None:
    """The operators' path to a private-only endpoint (EKS user guide, "Cluster API server endpoint",
    accessing a private-only API server): the VPC attached to their transit gateway in both
    endpoint subnets' AZs (a transit gateway reaches only AZs with an attachment subnet), a route
    back to their networks from both subnets, and tcp/443 from them in the cluster security group."""
    attachment = aws.ec2transitgateway.VpcAttachment(
        f"{name}-eks-tgw", transit_gateway_id=access.transit_gateway_id, vpc_id=vpc_id, subnet_ids=subnet_ids,
        # Not the gateway's default tables: the named one, explicitly (its association and
        # propagation below), so that the operators' networks route back to the VPC.
        transit_gateway_default_route_table_association=False,
        transit_gateway_default_route_table_propagation=False,
        tags={**tags, "Name": f"{name}-eks-operators"}, opts=opts,
    )
    aws.ec2transitgateway.RouteTableAssociation(
        f"{name}-eks-tgw-association", transit_gateway_attachment_id=attachment.id,
        transit_gateway_route_table_id=access.route_table_id, opts=opts,
    )
    aws.ec2transitgateway.RouteTablePropagation(
        f"{name}-eks-tgw-propagation", transit_gateway_attachment_id=attachment.id,
        transit_gateway_route_table_id=access.route_table_id, opts=opts,
    )
    for i, cidr in enumerate(access.cidrs):
        for j, table in enumerate(access.route_table_ids):
            aws.ec2.Route(
                f"{name}-eks-operators-{i}-rt{j}", route_table_id=table,
                **({"destination_ipv6_cidr_block": cidr} if ":" in cidr else {"destination_cidr_block": cidr}),
                transit_gateway_id=access.transit_gateway_id,
                opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[attachment])),
            )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-eks-api-{i}", security_group_id=cluster_sg, ip_protocol="tcp", from_port=443, to_port=443,
            **({"cidr_ipv6": cidr} if ":" in cidr else {"cidr_ipv4": cidr}),
            description=f"Kubernetes API from operators' network {cidr}", tags=tags, opts=opts,
        )


def _node_template(
    name: str,
    root_volume_gib: int,
    tags: dict[str, str],
    opts: pulumi.ResourceOptions,
    *,
    placement: aws.ec2.LaunchTemplatePlacementArgs | None = None,
    network_interfaces: list[aws.ec2.LaunchTemplateNetworkInterfaceArgs] | None = None,
    vpc_security_group_ids: list[pulumi.Input[str]] | None = None,
) -> aws.ec2.LaunchTemplate:
    """A node group's launch template: IMDSv2 only, encrypted gp3 root, tags on the instances.
    No instance profile, subnet or user data: EKS sets them (the node role, the node group's
    subnets, the EKS AMI's bootstrap)."""
    return aws.ec2.LaunchTemplate(
        name,
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=2
        ),
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name="/dev/xvda",  # AL2023 root device
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=root_volume_gib, volume_type="gp3", encrypted="true", delete_on_termination="true",
                ),
            )
        ],
        tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type="instance", tags=tags)],
        placement=placement,
        network_interfaces=network_interfaces,
        vpc_security_group_ids=vpc_security_group_ids,
        tags=tags,
        opts=opts,
    )


def kubeconfig_for(cluster: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with `aws eks get-token` (no long-lived token in it)."""
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
        "current-context": cluster,
        "users": [{
            "name": cluster,
            "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": "aws",
                "args": ["eks", "get-token", "--cluster-name", cluster, "--region", region],
            }},
        }],
    })
