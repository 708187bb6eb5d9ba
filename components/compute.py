"""GPU nodes: IAM role and instance profile, one launch template, and the instances.

Every node joins the cluster placement group through the launch template; EFA types get an EFA
device on every network card (core/addressing.py has the layout and its source), so NCCL
sees every card.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpuforge.core.addressing import interface_layout
from gpuforge.core.catalog import InstanceType

SSM_CORE_POLICY = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
ROOT_DEVICE = "/dev/sda1"  # Ubuntu AMIs' root device name
DATA_DEVICE = "/dev/sdf"  # appears as an NVMe device whose serial is the volume id


@dataclass(frozen=True)
class DataVolumeSpec:
    type: str
    size_gib: int


@dataclass(frozen=True)
class NodesArgs:
    instance: InstanceType
    node_names: tuple[str, ...]
    ami_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    availability_zone: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    placement_group: pulumi.Input[str]
    bucket_arns: Sequence[pulumi.Input[str]]
    directory_bucket_arn: pulumi.Input[str]
    root_volume_gib: int
    template_version: int  # the launch-template version instances boot (gpuforge:nodeTemplateVersion)
    user_data_b64: pulumi.Input[str]  # the launch template's user data (generic node: name from the Name tag)
    public_ip: bool
    key_name: str | None = None
    data_volume: DataVolumeSpec | None = None
    ngc_parameter_arn: pulumi.Input[str] | None = None
    metric_namespace: str | None = None  # the CloudWatch agent publishes GPU metrics here (idle alarm)
    tags: dict[str, str] = field(default_factory=dict)
    # Purchase option (components/purchase.py): spot / capacity-block market, reservation target.
    market_options: aws.ec2.LaunchTemplateInstanceMarketOptionsArgs | None = None
    capacity_reservation: aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs | None = None
    ena_express: bool = False  # ENA Express on the primary interface (validate's TCP model follows it)
    internet_gateway: pulumi.Resource | None = None  # what the nodes' Elastic IPs wait for
    # The checkpoint bucket (bucket_arns[0]) prefix the gpuforge phase installs from: read only.
    node_install_prefix: str | None = None


@dataclass(frozen=True)
class Node:
    name: str
    instance: aws.ec2.Instance
    public_ip: pulumi.Output[str] | None


class GpuNodes(pulumi.ComponentResource):
    nodes: list[Node]
    role_name: pulumi.Output[str]
    launch_template_id: pulumi.Output[str]
    launch_template_latest: pulumi.Output[int]

    def __init__(self, name: str, args: NodesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuforge:aws:Nodes", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = args.tags

        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
                    ],
                }
            ),
            description="gpuforge GPU node: SSM, and this cluster's buckets only",
            tags=tags,
            opts=child,
        )
        aws.iam.RolePolicyAttachment(f"{name}-ssm-core", role=role.name, policy_arn=SSM_CORE_POLICY, opts=child)
        aws.iam.RolePolicy(
            f"{name}-buckets",
            role=role.id,
            policy=pulumi.Output.all(args.directory_bucket_arn, args.ngc_parameter_arn or "", *args.bucket_arns).apply(
                lambda arns: node_policy(
                    arns[0], arns[2:], arns[1] or None, args.metric_namespace, args.node_install_prefix
                )
            ),
            opts=child,
        )
        profile = aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=tags, opts=child)

        lt = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            image_id=args.ami_id,
            instance_type=args.instance.name,
            key_name=args.key_name,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=profile.arn),
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",  # IMDSv2 only
                http_put_response_hop_limit=2,  # containers on the node sit one hop further away
                instance_metadata_tags="enabled",  # bootstrap reads its node name from the Name tag
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=ROOT_DEVICE,
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=args.root_volume_gib,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            network_interfaces=network_interfaces(
                args.instance, args.subnet_id, args.security_group_id, args.public_ip, ena_express=args.ena_express
            ),
            placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=args.placement_group),
            instance_market_options=args.market_options,
            capacity_reservation_specification=args.capacity_reservation,
            user_data=args.user_data_b64,
            update_default_version=True,
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=tags)
                for kind in ("instance", "volume", "network-interface")
            ],
            tags=tags,
            opts=child,
        )

        multi_card = len(network_interfaces(args.instance, "", "", False)) > 1
        # Instances boot a pinned template version, not the latest: `launch_template` is ForceNew on
        # aws_instance (terraform-provider-aws ec2_instance.go @0015dfcd), so following the latest
        # version would replace every node (and re-run bootstrap) on any template change. A
        # changed template becomes a new version; nodes move to it when the stack raises
        # gpuforge:nodeTemplateVersion (or one at a time with `pulumi up --replace URN`). A version
        # the template does not have is refused by EC2 (InvalidLaunchTemplateId.VersionNotFound).
        pinned = str(args.template_version)
        self.nodes = []
        for node_name in args.node_names:
            inst = aws.ec2.Instance(
                node_name,
                launch_template=aws.ec2.InstanceLaunchTemplateArgs(id=lt.id, version=pinned),
                placement_group=args.placement_group,
                tags={**tags, "Name": node_name},
                opts=child,
            )
            public_ip: pulumi.Output[str] | None = None
            if args.public_ip and multi_card:
                # EC2 gives no automatic public IP to an instance with several network cards.
                eip = aws.ec2.Eip(
                    f"{node_name}-eip",
                    domain="vpc",
                    network_interface=inst.primary_network_interface_id,
                    tags={**tags, "Name": f"{node_name}-eip"},
                    # EIPs need the VPC's internet gateway (pulumi-aws aws.ec2.Eip docs)
                    opts=pulumi.ResourceOptions(
                        parent=self, depends_on=[args.internet_gateway] if args.internet_gateway is not None else []
                    ),
                )
                public_ip = eip.public_ip
            elif args.public_ip:
                public_ip = inst.public_ip
            if args.data_volume is not None:
                vol = aws.ebs.Volume(
                    f"{node_name}-data",
                    availability_zone=args.availability_zone,
                    type=args.data_volume.type,
                    size=args.data_volume.size_gib,
                    encrypted=True,
                    tags={**tags, "Name": f"{node_name}-data", "gpuforge-node": node_name},
                    opts=child,
                )
                aws.ec2.VolumeAttachment(
                    f"{node_name}-data-attach",
                    device_name=DATA_DEVICE,
                    instance_id=inst.id,
                    volume_id=vol.id,
                    opts=child,
                )
            self.nodes.append(Node(node_name, inst, public_ip))

        self.role_name = role.name
        self.launch_template_id = lt.id
        self.launch_template_latest = lt.latest_version
        self.register_outputs({"roleName": role.name, "launchTemplateId": lt.id})



def network_interfaces(
    instance: InstanceType,
    subnet_id: pulumi.Input[str] | None,
    security_group_id: pulumi.Input[str],
    public_ip: bool | None,
    *,
    extra_security_groups: Sequence[pulumi.Input[str]] = (),
    ena_express: bool = False,
) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """The interfaces of core/addressing.py `interface_layout`: on multi-card EFA types an
    ENA primary and one EFA-only interface per card; one `efa` interface on single-card EFA types;
    a single ENA interface otherwise.

    `subnet_id` None: whoever launches from the template names the subnet (an EKS managed node
    group does, and rejects a template whose interfaces name one). `public_ip` None: the subnet's
    own setting applies. A template with interfaces takes its security groups on each interface,
    never as vpc_security_group_ids, so `extra_security_groups` go there too. `ena_express` turns
    on ENA Express (SRD) on card 0's interface, the one that carries the nodes' TCP traffic
    (pulumi-aws LaunchTemplateNetworkInterfaceEnaSrdSpecificationArgs.ena_srd_enabled); the EC2
    User Guide needs it on both ends, which one template gives every node."""
    layout = interface_layout(instance)
    single = len(layout) == 1
    return [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=nic.card,
            device_index=nic.device,
            interface_type=nic.type,
            subnet_id=subnet_id,
            security_groups=[*extra_security_groups, security_group_id],
            delete_on_termination="true",
            associate_public_ip_address=("true" if public_ip else "false") if single and public_ip is not None else None,
            ena_srd_specification=aws.ec2.LaunchTemplateNetworkInterfaceEnaSrdSpecificationArgs(ena_srd_enabled=True)
            if ena_express and (nic.card, nic.device) == (0, 0)  # the primary, the one with an IP
            else None,
        )
        for nic in layout
    ]


def node_policy(
    directory_bucket_arn: str,
    bucket_arns: Sequence[str],
    ngc_parameter_arn: str | None,
    metric_namespace: str | None = None,
    node_install_prefix: str | None = None,
) -> str:
    """Least privilege: object access to this cluster's buckets, S3 Express sessions on its
    directory bucket, reading the NGC key parameter if one is configured, and publishing
    metrics into the CloudWatch agent's namespace only. `node_install_prefix`: where, in the
    first bucket (the checkpoint bucket), the deploy put the gpuforge wheels the node installs:
    the node may read that prefix, and may write or delete nothing under gpuforge-node/ (an
    explicit Deny, which the read-write statement on the bucket's objects cannot override), so
    no node can change what the next node installs."""
    statements: list[dict[str, object]] = [
        {
            "Sid": "ListClusterBuckets",
            "Effect": "Allow",
            "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
            "Resource": list(bucket_arns),
        },
        {
            "Sid": "ReadWriteClusterObjects",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            "Resource": [f"{arn}/*" for arn in bucket_arns],
        },
        {
            "Sid": "ExpressSessions",
            "Effect": "Allow",
            "Action": ["s3express:CreateSession"],
            "Resource": [directory_bucket_arn],
        },
    ]
    if node_install_prefix:
        root = node_install_prefix.split("/", 1)[0]
        statements += [
            {
                "Sid": "ReadNodeInstall",
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": [f"{bucket_arns[0]}/{node_install_prefix}*"],
            },
            {
                "Sid": "NodeInstallReadOnly",
                "Effect": "Deny",
                "Action": ["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObjectAcl",
                           "s3:PutObjectTagging", "s3:RestoreObject", "s3:AbortMultipartUpload"],
                "Resource": [f"{bucket_arns[0]}/{root}/*"],
            },
        ]  # fmt: skip
    if ngc_parameter_arn:
        statements.append(
            {"Sid": "ReadNgcKey", "Effect": "Allow", "Action": ["ssm:GetParameter"], "Resource": [ngc_parameter_arn]}
        )
    if metric_namespace:
        # PutMetricData has no resource-level ARNs: Resource must be "*", the namespace condition scopes it.
        statements.append(
            {
                "Sid": "PublishGpuMetrics",
                "Effect": "Allow",
                "Action": ["cloudwatch:PutMetricData"],
                "Resource": ["*"],
                "Condition": {"StringEquals": {"cloudwatch:namespace": metric_namespace}},
            }
        )
    return json.dumps({"Version": "2012-10-17", "Statement": statements})
