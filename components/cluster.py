"""GpuCluster: a reference configuration on AWS, in one AZ ID and one cluster placement group,
next to its object storage. Composes the network, storage and node components."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from gpuforge.components.ami import lookup_ami
from gpuforge.components.compute import DataVolumeSpec, GpuNodes, Node, NodesArgs
from gpuforge.components.network import GpuNetwork, NetworkArgs
from gpuforge.components.nodeinstall import NodeWheels, node_install_prefix, uploads_node_wheels
from gpuforge.components.operations import declare_operations, on_eks
from gpuforge.components.purchase import capacity_reservation, market_options
from gpuforge.components.storage import ClusterStorage, StorageArgs
from gpuforge.components.userdata import metric_namespace, stack_user_data
from gpuforge.core.addressing import control_plane_cidr, egress_subnet_cidr
from gpuforge.core.config import StackConfig, node_names


@dataclass(frozen=True)
class GpuClusterArgs:
    config: StackConfig
    offline: bool = False  # under the SDK's mock engine (gpuforge preview): nothing is created


class GpuCluster(pulumi.ComponentResource):
    inventory: pulumi.Output[dict[str, Any]]
    placement_group_name: pulumi.Output[str]
    directory_bucket: pulumi.Output[str]
    checkpoint_bucket: pulumi.Output[str]
    alert_topic_arn: pulumi.Output[str]

    def __init__(self, name: str, args: GpuClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuforge:aws:GpuCluster", name, None, opts)
        cfg = args.config
        child = pulumi.ResourceOptions(parent=self)
        tags = cfg.tags

        network = GpuNetwork(
            name,
            NetworkArgs(
                region=cfg.region,
                az_id=cfg.az_id,
                vpc_cidr=cfg.vpc_cidr,
                subnet_cidr=cfg.subnet_cidr,
                ssh_cidrs=cfg.ssh_cidrs,
                public=cfg.public_ips and cfg.vpc_id is None,
                nat_gateway=cfg.nat_gateway,
                egress_subnet_cidr=egress_subnet(cfg) if cfg.nat_gateway else None,
                interface_endpoints=cfg.interface_endpoints,
                tags=tags,
                existing_vpc_id=cfg.vpc_id,
                existing_subnet_id=cfg.subnet_id,
            ),
            opts=child,
        )
        pg = aws.ec2.PlacementGroup(
            f"{name}-pg",
            strategy=aws.ec2.PlacementStrategy.CLUSTER,
            tags={**tags, "Name": f"{name}-pg"},
            opts=child,
        )
        storage = ClusterStorage(
            name, StorageArgs(bucket_base=cfg.bucket_base, region=cfg.region, az_id=cfg.az_id, tags=tags), opts=child
        )

        # On EKS the managed node group runs the GPU nodes (components/kubernetes/eks.py) on the EKS
        # AMI, with its own launch template and node role: GpuNodes' template, role and instance
        # profile would boot nothing, so they are declared only where something launches from them
        # (the stack's own instances, or its Auto Scaling group when autoscaling is on).
        # (The pinned-AMI refusal runs before the first resource: components/deploygate.py.)
        boots_gpuforge_nodes = not on_eks(cfg) or cfg.fleet.autoscaling is not None
        if boots_gpuforge_nodes and uploads_node_wheels(cfg):
            # What the nodes' gpuforge phase installs (components/nodeinstall.py).
            NodeWheels(name, cfg, storage.checkpoint_bucket_name, opts=child)
        nodes = _gpu_nodes(name, cfg, network, pg, storage, self) if boots_gpuforge_nodes else None
        ops = declare_operations(
            name, cfg, nodes.launch_template_id if nodes else None, network.subnet_id, pg.name, parent=self
        )
        self.slurm_head_ip: pulumi.Output[str] | None = None
        if cfg.slurm is not None and nodes is not None:  # config refuses slurm with EKS and autoscaling
            from gpuforge.components.slurmhead import SlurmHead, SlurmHeadArgs

            head = SlurmHead(
                name,
                SlurmHeadArgs(
                    config=cfg,
                    ami_id=_ami(cfg, self),  # the nodes' image: the same Slurm version as their slurmd
                    subnet_id=network.subnet_id,
                    availability_zone=network.availability_zone,
                    security_group_id=network.security_group_id,  # members talk to each other (6817/6818)
                    nodes=nodes.nodes,
                    node_role_name=nodes.role_name,
                    public_ip=cfg.public_ips and cfg.vpc_id is None,
                    node_install_bucket_arn=storage.checkpoint_bucket_arn if uploads_node_wheels(cfg) else None,
                ),
                opts=child,
            )
            self.slurm_head_ip = head.private_ip

        self.placement_group_name = pg.name
        # The version GPU instances boot and the template's latest: they differ after a template
        # change until the stack raises gpuforge:nodeTemplateVersion (components/compute.py).
        self.node_template_versions: pulumi.Output[dict[str, int]] | None = None
        if nodes is not None:  # instances, or an Auto Scaling group, boot the template's pinned version
            self.node_template_versions = nodes.launch_template_latest.apply(
                lambda latest: {"booted": cfg.node_template_version, "latest": latest}
            )
        self.directory_bucket = storage.directory_bucket_name
        self.checkpoint_bucket = storage.checkpoint_bucket_name
        self.directory_bucket_arn = storage.directory_bucket_arn
        self.checkpoint_bucket_arn = storage.checkpoint_bucket_arn
        self.availability_zone = network.availability_zone
        self.network = network  # the Kubernetes layer puts its EKS node group in this subnet
        self.alert_topic_arn = ops.alert_topic_arn  # EKS stacks' idle alarm (GpuKubernetes) alerts here
        # EKS node-group instances are not known at deploy time: their inventory lists no nodes,
        # and `gpuforge validate --discover STACK` finds them by their tags.
        self.inventory = _inventory(cfg, nodes.nodes if nodes else [], network.availability_zone)
        self.register_outputs(
            {
                "inventory": self.inventory,
                "placementGroup": self.placement_group_name,
                "directoryBucket": self.directory_bucket,
                "checkpointBucket": self.checkpoint_bucket,
            }
        )


def _user_data(cfg: StackConfig, parent: pulumi.Resource) -> pulumi.Input[str]:
    """The launch template's user data; a spot stack's names its checkpoint bucket, whose name
    carries the account id (components/storage.py), so it waits for the caller identity."""
    if cfg.fleet.purchase_option != "spot":
        return stack_user_data(cfg).user_data_base64
    account = aws.get_caller_identity_output(opts=pulumi.InvokeOptions(parent=parent)).account_id
    return account.apply(lambda acct: stack_user_data(cfg, account_id=acct).user_data_base64)


def egress_subnet(cfg: StackConfig) -> str:
    taken = [cfg.subnet_cidr]
    if on_eks(cfg):
        taken.append(control_plane_cidr(cfg.vpc_cidr, cfg.subnet_cidr))
    return egress_subnet_cidr(cfg.vpc_cidr, taken)


def _ami(cfg: StackConfig, parent: pulumi.Resource) -> pulumi.Output[str]:
    return pulumi.Output.from_input(cfg.ami_id) if cfg.ami_id else lookup_ami(
        cfg.os, cfg.driver_preinstalled, opts=pulumi.InvokeOptions(parent=parent)
    )


def _gpu_nodes(
    name: str, cfg: StackConfig, network: GpuNetwork, pg: aws.ec2.PlacementGroup, storage: ClusterStorage,
    parent: pulumi.Resource,
) -> GpuNodes:
    """The nodes that boot gpuforge's bootstrap: IAM role and profile, launch template, instances."""
    ami_id = _ami(cfg, parent)
    ngc_arn = None
    if cfg.ngc_api_key_parameter:
        param = cfg.ngc_api_key_parameter.lstrip("/")
        ngc_arn = aws.get_caller_identity_output(opts=pulumi.InvokeOptions(parent=parent)).account_id.apply(
            lambda acct: f"arn:aws:ssm:{cfg.region}:{acct}:parameter/{param}"
        )

    dv = cfg.profile.storage.data_volume
    return GpuNodes(
        name,
        NodesArgs(
            instance=cfg.instance,
            # An autoscaled stack's Auto Scaling group launches its nodes from the template.
            node_names=() if on_eks(cfg) or cfg.fleet.autoscaling is not None else node_names(cfg.stack, cfg.node_count),
            ami_id=ami_id,
            subnet_id=network.subnet_id,
            availability_zone=network.availability_zone,
            security_group_id=network.security_group_id,
            placement_group=pg.name,
            bucket_arns=[storage.checkpoint_bucket_arn],
            directory_bucket_arn=storage.directory_bucket_arn,
            node_install_prefix=node_install_prefix(cfg),
            root_volume_gib=cfg.root_volume_gib,
            template_version=cfg.node_template_version,
            # One rendering per stack: every node boots the launch template's user data and
            # takes its name from its Name tag (IMDS instance tags), so a 256-node stack does
            # not render (and store) 256 near-identical 9 KB documents.
            user_data_b64=_user_data(cfg, parent),
            metric_namespace=metric_namespace(cfg),
            public_ip=cfg.public_ips and cfg.vpc_id is None,
            internet_gateway=network.internet_gateway,
            key_name=cfg.key_name,
            data_volume=DataVolumeSpec(dv.type, dv.size_gib) if dv else None,
            ngc_parameter_arn=ngc_arn,
            tags=cfg.tags,
            market_options=market_options(cfg.fleet),
            capacity_reservation=capacity_reservation(cfg.fleet),
            ena_express=cfg.ena_express,
        ),
        opts=pulumi.ResourceOptions(parent=parent),
    )


def _inventory(cfg: StackConfig, nodes: list[Node], az: pulumi.Output[str]) -> pulumi.Output[dict[str, Any]]:
    """The inventory `gpuforge validate` reads (DESIGN.md): one entry per node."""
    entries = [
        pulumi.Output.all(
            n.instance.id, n.instance.private_ip, n.public_ip if n.public_ip is not None else "", az
        ).apply(
            lambda v, name=n.name: {  # type: ignore[misc]
                "name": name,
                "host": v[2] or v[1],
                "instance_id": v[0],
                "private_ip": v[1],
                "public_ip": v[2] or None,
                "availability_zone": v[3],
                "az_id": cfg.az_id,
                "instance_type": cfg.instance.name,
            }
        )
        for n in nodes
    ]
    return pulumi.Output.all(*entries).apply(
        lambda items: {
            "profile": cfg.profile.name,
            "stack": cfg.stack,
            "ssh": {"user": cfg.ssh_user, "port": 22},
            # what validate's TCP model needs to know about how the nodes were placed
            "expect": {"placement_group": "cluster", "ena_express": cfg.ena_express},
            "nodes": list(items),
        }
    )
