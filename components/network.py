"""The cluster network: one subnet in the stack's AZ ID, a security group for EFA/NCCL, and
S3 + S3 Express gateway endpoints so data traffic stays inside the VPC."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

# What bootstrap needs from the internet: package repositories, NVIDIA's CUDA repo, NGC (HTTPS),
# and plain HTTP for Ubuntu mirrors. Everything else leaves only towards the security group itself.
EGRESS_PORTS = (80, 443)
GATEWAY_SERVICES = ("s3", "s3express")


@dataclass(frozen=True)
class NetworkArgs:
    region: str
    az_id: str
    vpc_cidr: str
    subnet_cidr: str
    ssh_cidrs: tuple[str, ...]
    public: bool
    tags: dict[str, str] = field(default_factory=dict)
    existing_vpc_id: str | None = None
    existing_subnet_id: str | None = None


class GpuNetwork(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    # The node subnet's route table and the VPC's main one (which other subnets follow); None in
    # an existing VPC, where gpuforge adds no routes.
    route_table_id: pulumi.Output[str] | None = None
    main_route_table_id: pulumi.Output[str] | None = None
    subnet_id: pulumi.Output[str]
    availability_zone: pulumi.Output[str]
    security_group_id: pulumi.Output[str]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuforge:aws:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = args.tags

        if args.existing_vpc_id and args.existing_subnet_id:
            subnet = aws.ec2.get_subnet_output(id=args.existing_subnet_id, opts=pulumi.InvokeOptions(parent=self))
            # The AZ ID is a contract (same AZ for nodes, volumes, directory bucket): fail the
            # deployment rather than silently spread the cluster over two AZs.
            self.availability_zone = subnet.apply(lambda s: _require_az(s, args.az_id))
            self.vpc_id = pulumi.Output.from_input(args.existing_vpc_id)
            self.subnet_id = pulumi.Output.from_input(args.existing_subnet_id)
            existing_rt = existing_route_table(args.existing_vpc_id, args.existing_subnet_id, self)
            route_table_ids: list[pulumi.Input[str]] = [existing_rt]
        else:
            existing_rt = ""
            vpc = aws.ec2.Vpc(
                f"{name}-vpc",
                cidr_block=args.vpc_cidr,
                enable_dns_support=True,
                enable_dns_hostnames=True,
                tags={**tags, "Name": f"{name}-vpc"},
                opts=child,
            )
            subnet_res = aws.ec2.Subnet(
                f"{name}-subnet",
                vpc_id=vpc.id,
                cidr_block=args.subnet_cidr,
                availability_zone_id=args.az_id,
                map_public_ip_on_launch=False,
                tags={**tags, "Name": f"{name}-subnet"},
                opts=child,
            )
            rt = aws.ec2.RouteTable(f"{name}-rt", vpc_id=vpc.id, tags={**tags, "Name": f"{name}-rt"}, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-rt-assoc", subnet_id=subnet_res.id, route_table_id=rt.id, opts=child)
            if args.public:
                igw = aws.ec2.InternetGateway(
                    f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": f"{name}-igw"}, opts=child
                )
                aws.ec2.Route(
                    f"{name}-default-route",
                    route_table_id=rt.id,
                    destination_cidr_block="0.0.0.0/0",
                    gateway_id=igw.id,
                    opts=child,
                )
            self.vpc_id = vpc.id
            self.subnet_id = subnet_res.id
            self.availability_zone = subnet_res.availability_zone
            route_table_ids = [rt.id]
            self.route_table_id = rt.id
            self.main_route_table_id = vpc.main_route_table_id

        for service in GATEWAY_SERVICES:
            if args.existing_vpc_id and route_table_has_endpoint(
                args.existing_vpc_id, existing_rt, args.region, service, self
            ):
                continue  # the VPC's owner already routes this table to the service: a second one is refused
            aws.ec2.VpcEndpoint(
                f"{name}-{service}-endpoint",
                vpc_id=self.vpc_id,
                service_name=f"com.amazonaws.{args.region}.{service}",
                vpc_endpoint_type="Gateway",
                route_table_ids=route_table_ids,
                tags={**tags, "Name": f"{name}-{service}"},
                opts=child,
            )

        sg = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=self.vpc_id,
            description="gpuforge cluster: all traffic between members (EFA, NCCL); SSH from listed CIDRs",
            tags={**tags, "Name": f"{name}-sg"},
            opts=child,
        )
        # EFA needs an all-traffic rule to and from the group itself, in both directions.
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-in-self",
            security_group_id=sg.id,
            ip_protocol="-1",
            referenced_security_group_id=sg.id,
            description="all traffic from cluster members (EFA/NCCL)",
            tags=tags,
            opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-out-self",
            security_group_id=sg.id,
            ip_protocol="-1",
            referenced_security_group_id=sg.id,
            description="all traffic to cluster members (EFA/NCCL)",
            tags=tags,
            opts=child,
        )
        for port in EGRESS_PORTS:
            aws.vpc.SecurityGroupEgressRule(
                f"{name}-out-{port}",
                security_group_id=sg.id,
                ip_protocol="tcp",
                from_port=port,
                to_port=port,
                cidr_ipv4="0.0.0.0/0",
                description=f"tcp/{port} out for packages, NVIDIA repositories and NGC",
                tags=tags,
                opts=child,
            )
        for i, cidr in enumerate(args.ssh_cidrs):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-ssh-{i}",
                security_group_id=sg.id,
                ip_protocol="tcp",
                from_port=22,
                to_port=22,
                **({"cidr_ipv6": cidr} if ":" in cidr else {"cidr_ipv4": cidr}),
                description=f"SSH from {cidr}",
                tags=tags,
                opts=child,
            )
        self.security_group_id = sg.id
        self.register_outputs(
            {"vpcId": self.vpc_id, "subnetId": self.subnet_id, "securityGroupId": self.security_group_id}
        )


def _require_az(subnet: aws.ec2.GetSubnetResult, az_id: str) -> str:
    if subnet.availability_zone_id != az_id:
        raise pulumi.RunError(
            f"gpuforge:subnetId {subnet.id} is in {subnet.availability_zone_id}, not gpuforge:azId {az_id}; "
            "use a subnet in that AZ ID or change azId"
        )
    return subnet.availability_zone


def existing_route_table(vpc_id: str, subnet_id: str, parent: pulumi.Resource) -> str:
    """The route table that governs `subnet_id`: its explicitly associated table, else the VPC's
    main table.

    Not `get_route_table(subnet_id=...)`: that filters on `association.subnet-id`, which matches
    only explicit associations, so for a subnet left on the main route table it fails with "query
    returned no results" (terraform-provider-aws internal/service/ec2/vpc_route_table_data_source.go
    @08923b68, dataSourceRouteTableRead). The plural data source returns an empty list instead
    (vpc_route_tables_data_source.go @0a7150e2), which lets the fallback run. Plain (not _output)
    invokes: the subnet id is config, and which resources exist depends on the answer.
    """
    opts = pulumi.InvokeOptions(parent=parent)
    explicit = aws.ec2.get_route_tables(
        vpc_id=vpc_id, filters=[aws.ec2.GetRouteTablesFilterArgs(name="association.subnet-id", values=[subnet_id])],
        opts=opts,
    ).ids
    if explicit:
        return explicit[0]
    main = aws.ec2.get_route_tables(
        vpc_id=vpc_id, filters=[aws.ec2.GetRouteTablesFilterArgs(name="association.main", values=["true"])], opts=opts
    ).ids
    if len(main) != 1:
        raise pulumi.RunError(f"gpuforge:vpcId {vpc_id}: expected one main route table, found {len(main)}")
    return main[0]


def route_table_has_endpoint(vpc_id: str, route_table_id: str, region: str, service: str, parent: pulumi.Resource) -> bool:
    """Whether `route_table_id` already sends `service` through a gateway endpoint (a route to the
    service's AWS-managed prefix list). EC2 refuses a second endpoint route for the same prefix list
    in one table (RouteAlreadyExists), so an existing VPC's endpoint is used, not duplicated."""
    opts = pulumi.InvokeOptions(parent=parent)
    prefix_list = aws.ec2.get_prefix_list(name=f"com.amazonaws.{region}.{service}", opts=opts).id
    return bool(aws.ec2.get_route_tables(
        vpc_id=vpc_id,
        filters=[
            aws.ec2.GetRouteTablesFilterArgs(name="route-table-id", values=[route_table_id]),
            aws.ec2.GetRouteTablesFilterArgs(name="route.destination-prefix-list-id", values=[prefix_list]),
        ],
        opts=opts,
    ).ids)
