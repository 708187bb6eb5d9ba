"""Mock resource provider for the offline preview.

The mock engine echoes a resource's inputs back as its state; here we add the few outputs
that the program reads (ids, ARNs, IPs, the subnet's AZ name), deterministically, so a preview
is stable run to run. Values invented here are recognisable: ids say `offline`, IPs come from
the configured subnet, and the AZ name is derived from the AZ ID (the real name differs per
account).
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from typing import Any

import pulumi

MOCK_ACCOUNT = "000000000000"
MOCK_AMI = "ami-0000000000offline"


@dataclass(frozen=True)
class ExistingVpc:
    """What an existing VPC (gpuforge:vpcId) holds, for the EC2 lookups the program makes.

    The default is the common case that broke the old lookup: the subnet has no explicit route
    table association (it follows the VPC's main table) and no gateway endpoint exists yet."""

    main_route_table: str = "rtb-main-offline"
    subnet_route_table: str | None = None  # an explicit association of the stack's subnet
    endpoint_routes: tuple[tuple[str, str], ...] = ()  # (route table, service) already routed


@dataclass(frozen=True)
class MockHints:
    region: str
    az_id: str
    subnet_cidr: str
    public_ips: bool = False
    existing_vpc: ExistingVpc = ExistingVpc()
    # Versions a launch template has: 1 when just created; more after changes to it.
    template_latest_version: int = 1


def az_name_for(region: str, az_id: str) -> str:
    """A stand-in AZ name: use1-az4 -> us-east-1d. Real accounts map IDs to names differently."""
    number = int(az_id.rsplit("az", 1)[1])
    return f"{region}{'abcdefghij'[(number - 1) % 10]}"


def _prefix_list(name: str) -> str:
    return f"pl-{_digest(name):08x}"


def _digest(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


class OfflineMocks(pulumi.runtime.Mocks):
    def __init__(self, hints: MockHints) -> None:
        self.hints = hints
        self._subnet = ipaddress.ip_network(hints.subnet_cidr)

    def _private_ip(self, name: str) -> str:
        hosts = self._subnet.num_addresses - 5  # AWS reserves 5 addresses per subnet
        return str(self._subnet.network_address + 4 + _digest(name) % max(hosts, 1))

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state: dict[str, Any] = dict(args.inputs)
        typ, name = args.typ, args.name
        rid = f"{name}-offline"
        arn_base = f"arn:aws:{{svc}}:{self.hints.region}:{MOCK_ACCOUNT}"
        if typ == "aws:ec2/vpc:Vpc":
            state["mainRouteTableId"] = f"rtb-main-{_digest(name):08x}"  # EC2 creates it with the VPC
        elif typ == "aws:ec2/subnet:Subnet":
            state.setdefault("availabilityZone", az_name_for(self.hints.region, self.hints.az_id))
        elif typ == "aws:ec2/placementGroup:PlacementGroup":
            state.setdefault("name", name)
        elif typ == "aws:ec2/instance:Instance":
            rid = f"i-{_digest(name):08x}offline"
            state["privateIp"] = self._private_ip(name)
            state["primaryNetworkInterfaceId"] = f"eni-{_digest(name):08x}offline"
            # Single-card nodes get their public IP from the launch template interface.
            state["publicIp"] = f"203.0.113.{_digest(name) % 254 + 1}" if self.hints.public_ips else ""  # TEST-NET-3
        elif typ == "aws:ec2/eip:Eip":
            state["publicIp"] = f"198.51.100.{_digest(name) % 254 + 1}"  # TEST-NET-2: never routable
        elif typ == "aws:ec2/launchTemplate:LaunchTemplate":
            rid = f"lt-{_digest(name):08x}offline"
            state["latestVersion"] = self.hints.template_latest_version
        elif typ in ("aws:s3/bucket:Bucket", "aws:s3/directoryBucket:DirectoryBucket"):
            bucket = state.get("bucket", name)
            rid = bucket
            state["arn"] = (
                f"arn:aws:s3express:{self.hints.region}:{MOCK_ACCOUNT}:bucket/{bucket}"
                if typ.endswith("DirectoryBucket")
                else f"arn:aws:s3:::{bucket}"
            )
        elif typ == "aws:iam/role:Role":
            state.setdefault("name", name)
            state["arn"] = f"arn:aws:iam::{MOCK_ACCOUNT}:role/{name}"
        elif typ == "aws:iam/instanceProfile:InstanceProfile":
            state.setdefault("name", name)
            state["arn"] = f"arn:aws:iam::{MOCK_ACCOUNT}:instance-profile/{name}"
        elif typ == "aws:ebs/volume:Volume":
            rid = f"vol-{_digest(name):08x}offline"
        elif typ == "aws:eks/cluster:Cluster":
            # What the kubeconfig and the node launch template read; a stand-in, never reachable.
            state.setdefault("name", name)
            state["arn"] = f"arn:aws:eks:{self.hints.region}:{MOCK_ACCOUNT}:cluster/{name}"
            state["endpoint"] = f"https://{_digest(name):08X}.offline.eks.{self.hints.region}.amazonaws.com"
            state["certificateAuthority"] = {"data": "T0ZGTElORS1DQQ=="}  # base64("OFFLINE-CA")
            state["vpcConfig"] = {**dict(state.get("vpcConfig") or {}), "clusterSecurityGroupId": f"sg-{_digest(name):08x}"}
        elif typ == "random:index/randomBytes:RandomBytes":
            # A stand-in, never a key: the engine marks these secret, as the provider does.
            state["base64"] = "T0ZGTElORS1NVU5HRS1LRVk="  # base64("OFFLINE-MUNGE-KEY")
            state["hex"] = "4f46464c494e452d4d554e47452d4b4559"
        elif typ == "random:index/randomPassword:RandomPassword":
            # A stand-in, never a password (the Slurm accounting database's); secret, as the provider makes it.
            state["result"] = "OFFLINEDBPASSWORDSTANDIN00000000"
        elif typ.startswith("kubernetes:"):
            meta = dict(state.get("metadata") or {})
            meta.setdefault("name", name)
            state["metadata"] = meta
        elif typ.startswith("aws:"):
            state.setdefault("arn", arn_base.format(svc=typ.split(":")[1].split("/")[0]) + f":{name}")
        return rid, state

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:  # type: ignore[override]
        # The SDK accepts a plain dict (no check failures) as well as the tuple its stub declares.
        token = args.token
        if token == "aws:ec2/getAmi:getAmi":
            return {"id": MOCK_AMI, "imageId": MOCK_AMI, "name": "offline-lookup"}
        if token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": MOCK_ACCOUNT, "arn": f"arn:aws:iam::{MOCK_ACCOUNT}:user/offline", "id": "offline"}
        if token == "aws:ec2/getSubnet:getSubnet":
            sid = args.args.get("id", "subnet-offline")
            return {
                "id": sid,
                "availabilityZoneId": self.hints.az_id,
                "availabilityZone": az_name_for(self.hints.region, self.hints.az_id),
                "vpcId": "vpc-offline",
                "cidrBlock": self.hints.subnet_cidr,
            }
        if token == "aws:ec2/getRouteTable:getRouteTable":
            return self._route_table(args.args)
        if token == "aws:ec2/getRouteTables:getRouteTables":
            return {"id": self.hints.region, "ids": self._route_tables(args.args.get("filters") or [])}
        if token == "aws:ec2/getPrefixList:getPrefixList":
            name = str(args.args.get("name", ""))
            return {"id": _prefix_list(name), "prefixListId": _prefix_list(name), "name": name}
        return {}

    # The EC2 DescribeRouteTables filters the program uses, with EC2's meaning: association.*
    # match explicit associations only (the main table's implicit ones are not associations of
    # the subnet), route.destination-prefix-list-id matches gateway-endpoint routes.
    def _tables(self) -> dict[str, dict[str, Any]]:
        vpc = self.hints.existing_vpc
        tables: dict[str, dict[str, Any]] = {vpc.main_route_table: {"main": True, "subnets": set(), "pls": set()}}
        if vpc.subnet_route_table:
            tables[vpc.subnet_route_table] = {"main": False, "subnets": {"*"}, "pls": set()}
        for table, service in vpc.endpoint_routes:
            tables[table]["pls"].add(_prefix_list(f"com.amazonaws.{self.hints.region}.{service}"))
        return tables

    def _route_tables(self, filters: list[dict[str, Any]]) -> list[str]:
        out = []
        for rid, t in self._tables().items():
            ok = True
            for f in filters:
                name, values = f["name"], set(f["values"])
                if name == "association.subnet-id":
                    ok &= bool(t["subnets"]) and (t["subnets"] == {"*"} or bool(t["subnets"] & values))
                elif name == "association.main":
                    ok &= str(t["main"]).lower() in values
                elif name == "route-table-id":
                    ok &= rid in values
                elif name == "route.destination-prefix-list-id":
                    ok &= bool(t["pls"] & values)
                else:
                    raise ValueError(f"offline mock: route-table filter {name!r} is not modelled")
            if ok:
                out.append(rid)
        return out

    def _route_table(self, args: dict[str, Any]) -> dict[str, Any]:
        # terraform-provider-aws vpc_route_table_data_source.go: subnet_id is the
        # association.subnet-id filter; no match is an error, not an empty answer.
        filters = [{"name": "association.subnet-id", "values": [args["subnetId"]]}] if "subnetId" in args else []
        found = self._route_tables(filters)
        if len(found) != 1:
            raise Exception("query returned no results. Please change your search criteria and try again")
        return {"id": found[0], "routeTableId": found[0]}
