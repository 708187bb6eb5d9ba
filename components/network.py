"""The cluster network: one node subnet in the stack's AZ ID, a security group for EFA/NCCL, and
S3 + S3 Express gateway endpoints so data traffic stays inside the VPC.

The nodes' way out (issue 10 item 4): a public node subnet (internet-gateway route, nodes with
public IPs), or a private one whose default route goes to a NAT gateway in a small public subnet
of the same AZ ID, and/or interface endpoints (core/addressing.py INTERFACE_SERVICES) in the
node subnet. EKS node groups always get the private layout: EKS rejects a node subnet that routes
to an internet gateway without auto-assigning public IPs (Ec2SubnetInvalidConfiguration, EKS
user guide "Troubleshoot", managed node group errors)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpuforge.core.addressing import INTERFACE_SERVICES

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
    nat_gateway: bool = False  # private node subnet: default route through a NAT gateway
    egress_subnet_cidr: str | None = None  # the NAT gateway's public subnet (with nat_gateway)
    interface_endpoints: bool = False


class GpuNetwork(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    # The node subnet's route table and the VPC's main one (which other subnets follow); None in
    # an existing VPC, where gpuforge adds no routes.
    route_table_id: pulumi.Output[str] | None = None
    main_route_table_id: pulumi.Output[str] | None = None
    subnet_id: pulumi.Output[str]
    availability_zone: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    # What an Elastic IP of the stack waits for: an address is usable only once the VPC has an
    # internet gateway (EC2 user guide, Elastic IP addresses; pulumi-aws aws.ec2.Eip docs: "EIP may
    # require IGW to exist prior to association. Use depends_on to set an explicit dependency").
    internet_gateway: aws.ec2.InternetGateway | None = None

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
            if args.public or args.nat_gateway:
                igw = aws.ec2.InternetGateway(
                    f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": f"{name}-igw"}, opts=child
                )
                self.internet_gateway = igw
                # Public nodes leave through the internet gateway, private ones through the NAT gateway.
                target = (
                    {"gateway_id": igw.id}
                    if args.public
                    else {"nat_gateway_id": _nat_gateway(name, args, vpc.id, igw, tags, child).id}
                )
                aws.ec2.Route(
                    f"{name}-default-route",
                    route_table_id=rt.id,
                    destination_cidr_block="0.0.0.0/0",
                    opts=child,
                    **target,
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
        if args.interface_endpoints:
            _interface_endpoints(name, args, self.vpc_id, self.subnet_id, sg.id, tags, child)
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


def _nat_gateway(
    name: str, args: NetworkArgs, vpc_id: pulumi.Input[str], igw: aws.ec2.InternetGateway, tags: dict[str, str],
    opts: pulumi.ResourceOptions,
) -> aws.ec2.NatGateway:
    """A public NAT gateway in its own small subnet in the stack's AZ ID (a NAT gateway serves
    one AZ; the nodes live in one), whose route table points at the internet gateway."""
    if not args.egress_subnet_cidr:
        raise ValueError("a NAT gateway needs egress_subnet_cidr")
    subnet = aws.ec2.Subnet(
        f"{name}-egress", vpc_id=vpc_id, cidr_block=args.egress_subnet_cidr, availability_zone_id=args.az_id,
        map_public_ip_on_launch=False, tags={**tags, "Name": f"{name}-egress"}, opts=opts,
    )
    rt = aws.ec2.RouteTable(f"{name}-egress-rt", vpc_id=vpc_id, tags={**tags, "Name": f"{name}-egress-rt"}, opts=opts)
    aws.ec2.RouteTableAssociation(f"{name}-egress-rt-assoc", subnet_id=subnet.id, route_table_id=rt.id, opts=opts)
    aws.ec2.Route(f"{name}-egress-default-route", route_table_id=rt.id, destination_cidr_block="0.0.0.0/0",
                  gateway_id=igw.id, opts=opts)
    eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags={**tags, "Name": f"{name}-nat"},
                      opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[igw])))
    return aws.ec2.NatGateway(
        f"{name}-nat", subnet_id=subnet.id, allocation_id=eip.id, connectivity_type="public",
        tags={**tags, "Name": f"{name}-nat"},
        # the gateway needs the internet gateway attached before it can pass traffic (VPC user guide, NAT gateways)
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[igw])),
    )


def _interface_endpoints(
    name: str, args: NetworkArgs, vpc_id: pulumi.Input[str], subnet_id: pulumi.Input[str],
    node_sg: pulumi.Input[str], tags: dict[str, str], opts: pulumi.ResourceOptions,
) -> None:
    """One interface endpoint per service in the node subnet, with private DNS so the usual
    service hostnames resolve to it (needs the VPC's DNS support and hostnames, set above), behind
    a group that admits tcp/443 from the nodes only."""
    sg = aws.ec2.SecurityGroup(
        f"{name}-endpoints-sg", vpc_id=vpc_id, description="gpuforge interface endpoints: HTTPS from the cluster nodes",
        tags={**tags, "Name": f"{name}-endpoints"}, opts=opts,
    )
    aws.vpc.SecurityGroupIngressRule(
        f"{name}-endpoints-in-443", security_group_id=sg.id, ip_protocol="tcp", from_port=443, to_port=443,
        referenced_security_group_id=node_sg, description="HTTPS from cluster nodes", tags=tags, opts=opts,
    )
    for service in INTERFACE_SERVICES:
        aws.ec2.VpcEndpoint(
            f"{name}-{service.replace('.', '-')}-endpoint",
            vpc_id=vpc_id,
            service_name=f"com.amazonaws.{args.region}.{service}",
            vpc_endpoint_type="Interface",
            subnet_ids=[subnet_id],
            security_group_ids=[sg.id],
            private_dns_enabled=True,
            tags={**tags, "Name": f"{name}-{service}"},
            opts=opts,
        )


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
