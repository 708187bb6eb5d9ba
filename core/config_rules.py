"""The stack config's cross-key rules: values that pass their own type check but that AWS would
refuse at deploy time, accept and silently ignore, or that open more than the operator meant.

`parse_stack_config` (core/config.py) runs them, in this order, after the schema check and before
it resolves the stack: network (CIDRs, ids, public SSH), ENA Express, bucket names, the EKS and
spot combinations, the subnet's size, the nodes' way out, the lengths of the names AWS limits.
Each raises `ConfigError` naming the key and the fix; each cites the rule it follows
(docs/aws-constraints.md lists them with their tests).
"""

from __future__ import annotations

import ipaddress
import re

from gpuforge.common.errors import ConfigError
from gpuforge.core.addressing import (
    AWS_RESERVED_PER_SUBNET,
    EKS_CONTROL_PLANE_ADDRESSES,
    INTERFACE_SERVICES,
    addresses_per_node,
    interface_layout,
    usable_addresses,
)
from gpuforge.core.bucketnames import ACCOUNT_REGIONAL_UNSUPPORTED, checkpoint_bucket_name, directory_bucket_name
from gpuforge.core.catalog import InstanceType
from gpuforge.core.config_schema import RawStackConfig
from gpuforge.core.fleet import FleetConfig
from gpuforge.core.limits import limit

PROJECT = "gpuforge"  # the keys' namespace (core/config.py PROJECT, which runs these rules)


def _network(key: str, text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ConfigError(f"{PROJECT}:{key}", f"{text!r} is not a valid CIDR ({exc})", "write it like 10.0.0.0/8") from None


def internet_wide(cidrs: tuple[str, ...] | list[str]) -> str | None:
    """The CIDRs, or the set of them, that together cover a whole address family, else None.

    `0.0.0.0/1` plus `128.0.0.0/1` is the internet split in two (issue 13 item 6): the union is
    what a security group opens, so the union is what is judged (ipaddress.collapse_addresses).
    """
    for version, everything in ((4, ipaddress.ip_network("0.0.0.0/0")), (6, ipaddress.ip_network("::/0"))):
        nets = [n for n in (ipaddress.ip_network(c, strict=False) for c in cidrs) if n.version == version]
        if everything in list(ipaddress.collapse_addresses(nets)):  # type: ignore[type-var]  # one version per pass
            covering = [str(n) for n in nets]
            return covering[0] if len(covering) == 1 else " + ".join(covering)
    return None


def _check_ssh_rule_count(cidrs: tuple[str, ...]) -> None:
    """Each sshCidrs entry is one inbound rule of the cluster's security group, which also holds
    the all-traffic rule from the group itself (components/network.py); AWS counts IPv4 and IPv6
    rules separately and the self rule once in each (core/aws_limits.yaml)."""
    from gpuforge.core.limits import limit

    row = limit("security_group_rules_per_direction")
    room = row.value - 1  # the self-referencing rule
    for family, count in (("IPv4", sum(":" not in c for c in cidrs)), ("IPv6", sum(":" in c for c in cidrs))):
        if count > room:
            raise ConfigError(
                f"{PROJECT}:sshCidrs",
                f"{count} {family} CIDRs: each is a security-group rule, and with the cluster's own rule a group "
                f"takes {room} more ({row.value} inbound {family} rules per group, AWS's default quota)",
                "list fewer, wider CIDRs (aggregate them), or use SSM instead of SSH "
                "(the quota can be raised: Service Quotas vpc L-0EA8095F; then gpuforge needs the new figure "
                "in core/aws_limits.yaml)",
            )


def check_tags(parsed: RawStackConfig) -> None:
    """team, owner and costCenter become tags on every resource: AWS's tag rules (core/aws_limits.yaml)."""
    from gpuforge.core.limits import tag_problem

    for key in ("team", "owner", "costCenter"):
        value = getattr(parsed, key)
        problem = tag_problem(value, key=False) if value else None
        if problem:
            raise ConfigError(f"{PROJECT}:{key}", f"becomes a tag value on every resource: {problem}",
                              "shorten it or drop the character")  # fmt: skip


def check_network(parsed: RawStackConfig, stack: str) -> None:
    _check_ssh_rule_count(parsed.sshCidrs)
    for cidr in parsed.sshCidrs:
        _network("sshCidrs", cidr)
    wide = internet_wide(parsed.sshCidrs)
    if wide is not None and not parsed.allowPublicSsh:
        raise ConfigError(
            f"{PROJECT}:sshCidrs",
            f"{wide} opens SSH to the whole internet",
            f"list your own CIDRs, or set `{PROJECT}:allowPublicSsh: true` in stacks/Pulumi.{stack}.yaml "
            "if you really mean it",
        )
    vpc = _network("vpcCidr", parsed.vpcCidr)
    subnet = _network("subnetCidr", parsed.subnetCidr)
    if not subnet.subnet_of(vpc):  # type: ignore[arg-type]
        raise ConfigError(f"{PROJECT}:subnetCidr", f"{subnet} is not inside vpcCidr {vpc}", "pick a subnet of the VPC")
    if bool(parsed.vpcId) != bool(parsed.subnetId):
        missing = "subnetId" if parsed.vpcId else "vpcId"
        raise ConfigError(f"{PROJECT}:{missing}", "not set", "an existing network needs both vpcId and subnetId")
    if parsed.vpcId and not re.fullmatch(r"vpc-[0-9a-f]{8,17}", parsed.vpcId):
        raise ConfigError(f"{PROJECT}:vpcId", f"{parsed.vpcId!r} is not a VPC id", "write it like vpc-0abc1234")
    if parsed.subnetId and not re.fullmatch(r"subnet-[0-9a-f]{8,17}", parsed.subnetId):
        raise ConfigError(f"{PROJECT}:subnetId", f"{parsed.subnetId!r} is not a subnet id", "write it like subnet-0abc1234")
    if parsed.amiId and not re.fullmatch(r"ami-[0-9a-f]{8,17}", parsed.amiId):
        raise ConfigError(f"{PROJECT}:amiId", f"{parsed.amiId!r} is not an AMI id", "write it like ami-0abc1234")


def check_ena_express(parsed: RawStackConfig, instance: InstanceType) -> None:
    if parsed.enaExpress and not instance.ena_express:
        raise ConfigError(
            f"{PROJECT}:enaExpress",
            f"{instance.name} does not support ENA Express (describe_instance_types EnaSrdSupported is false)",
            "remove enaExpress, or pick a type that supports it (g6.48xlarge, g6e.12xlarge and larger, p5, p5e, p5en)",
        )
    if parsed.enaExpress and parsed.kubernetes == "eks":
        # The EKS GPU node group's template (components/kubernetes/eks.py) is not gpuforge's node
        # template; refusing beats a key that silently does nothing.
        raise ConfigError(
            f"{PROJECT}:enaExpress",
            "is not applied to EKS managed node groups by gpuforge",
            "remove enaExpress, or use kubernetes: none or existing",
        )


def check_bucket_base(base: str, az_id: str, region: str) -> None:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{1,40}[a-z0-9]", base) or "--" in base:
        raise ConfigError(
            f"{PROJECT}:bucketBase",
            f"{base!r} is not a usable bucket base name",
            "use 3-42 lowercase letters, digits and single hyphens",
        )
    # Both names carry the 12-digit account id (core/bucketnames.py) and must fit S3's 63
    # characters: <base>-<account>--<azid>--x-s3 and <base>-ckpt-<account>-<region>-an.
    for what, longest in (("directory", directory_bucket_name(base, "0" * 12, az_id)),
                          ("checkpoint", checkpoint_bucket_name(base, "0" * 12, region))):
        if len(longest) > 63:
            room = 63 - (len(longest) - len(base))
            raise ConfigError(
                f"{PROJECT}:bucketBase",
                f"{base!r} makes the {what} bucket name {len(longest)} characters ({longest}); S3 allows 63",
                f"set gpuforge:bucketBase to at most {room} characters (default is gpuforge-<stack>)",
            )
    if region in ACCOUNT_REGIONAL_UNSUPPORTED:
        raise ConfigError(
            "aws:region",
            f"S3 account regional namespaces (the checkpoint bucket's) are not offered in {region}",
            "deploy in another region",
        )


def check_eks_combinations(parsed: RawStackConfig) -> None:
    """Combinations that would deploy but silently do nothing on EKS (issue 10 item 10): refused.

    On `kubernetes: eks` the GPU nodes are an EKS managed node group of fixed size nodeCount,
    launched ON_DEMAND from its own template (components/kubernetes/eks.py). An Auto Scaling group
    would boot gpuforge's own nodes, which never join the cluster; spot or reserved capacity would
    not reach the node group at all.
    """
    if parsed.kubernetes != "eks":
        return
    if parsed.autoscaling:
        raise ConfigError(
            f"{PROJECT}:autoscaling",
            "true with kubernetes 'eks': the Auto Scaling group's nodes would never join the EKS cluster "
            "(the cluster's GPU nodes are its managed node group, nodeCount of them)",
            "remove autoscaling and size the node group with nodeCount, or use kubernetes: none",
        )
    if parsed.purchaseOption != "on-demand":
        raise ConfigError(
            f"{PROJECT}:purchaseOption",
            f"{parsed.purchaseOption} with kubernetes 'eks': the EKS managed node group launches on-demand "
            "capacity, so it would be ignored",
            "use purchaseOption: on-demand with kubernetes: eks, or kubernetes: none for spot or reserved capacity",
        )


# EC2 user guide, "Placement groups for your Amazon EC2 instances" - Rules and limitations
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups.html): "You can't launch
# a Spot Instance that is configured to stop or hibernate on interruption in a placement group."
# Every gpuforge GPU node launches in the stack's cluster placement group (components/compute.py,
# autoscaling.py, kubernetes/eks.py), so only `terminate` can launch.
PLACEMENT_GROUP_SPOT_RULE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups.html"


def check_spot_interruption(parsed: RawStackConfig) -> None:
    behaviour = parsed.spotInterruptionBehavior
    if behaviour == "terminate":
        return
    if parsed.purchaseOption != "spot":
        raise ConfigError(
            f"{PROJECT}:spotInterruptionBehavior",
            f"{behaviour!r} is set, but purchaseOption is {parsed.purchaseOption} (it only applies to spot)",
            "remove it",
        )
    raise ConfigError(
        f"{PROJECT}:spotInterruptionBehavior",
        f"spot nodes that {behaviour} on interruption cannot launch in a placement group, and every gpuforge "
        f"node is in the stack's cluster placement group (EC2 placement group rules, {PLACEMENT_GROUP_SPOT_RULE})",
        "use terminate (the default): training resumes from its checkpoints on a new node",
    )


def check_subnet_size(parsed: RawStackConfig, instance: InstanceType, nodes: int) -> None:
    """The subnet gpuforge creates must hold every node's addresses (at the Auto Scaling maximum),
    and on EKS the system nodes and the control plane's interfaces (core/addressing.py)."""
    if parsed.vpcId:
        return  # an existing subnet: gpuforge preflight sees its free addresses
    per_node = addresses_per_node(instance)
    need = nodes * per_node
    parts = [f"{nodes} nodes x {per_node} address{'es' if per_node > 1 else ''}"]
    if parsed.kubernetes == "eks":
        from gpuforge.core.kubernetes.settings import defaults

        system = int(defaults()["system_nodes"]["count"])
        need += system + EKS_CONTROL_PLANE_ADDRESSES
        parts.append(f"{system} system nodes, {EKS_CONTROL_PLANE_ADDRESSES} for the EKS control plane")
    if parsed.interfaceEndpoints:
        need += len(INTERFACE_SERVICES)  # one network interface per endpoint in the node subnet
        parts.append(f"{len(INTERFACE_SERVICES)} interface endpoints")
    have = usable_addresses(parsed.subnetCidr)
    if need > have:
        prefix = next(p for p in range(28, 15, -1) if 2 ** (32 - p) - AWS_RESERVED_PER_SUBNET >= need)
        raise ConfigError(
            f"{PROJECT}:subnetCidr",
            f"{parsed.subnetCidr} has {have} usable addresses (AWS reserves {AWS_RESERVED_PER_SUBNET}), "
            f"the stack needs {need} ({', '.join(parts)})",
            f"use a /{prefix} or larger (inside vpcCidr {parsed.vpcCidr})",
        )


def check_egress(parsed: RawStackConfig, instance: InstanceType, fleet: FleetConfig) -> None:
    """Every node needs a way out: to package repositories (bootstrap), or on EKS to ECR, STS and
    EC2. A new VPC puts nodes in a public subnet (an internet gateway route, public IPs) or in a
    private one behind a NAT gateway and/or interface endpoints (components/network.py)."""
    if parsed.vpcId:
        if parsed.interfaceEndpoints:
            raise ConfigError(f"{PROJECT}:interfaceEndpoints", "gpuforge adds interface endpoints only to a VPC it creates",
                              "remove it; an existing VPC's owner provides its endpoints")
        return  # an existing network's egress is its owner's (gpuforge preflight checks the subnet)
    if parsed.publicIps and parsed.kubernetes == "eks":
        # EKS rejects a node group in a subnet that routes to an internet gateway but does not
        # auto-assign public IPs (Ec2SubnetInvalidConfiguration), and multi-card types get no
        # automatic public IP at all: EKS nodes go in a private subnet.
        raise ConfigError(f"{PROJECT}:publicIps", "is true, but EKS nodes sit in a private subnet (NAT gateway and/or "
                          "interface endpoints)", f"set {PROJECT}:publicIps: false")
    multi_card = len(interface_layout(instance)) > 1
    if parsed.publicIps and fleet.autoscaling is not None and multi_card:
        raise ConfigError(
            f"{PROJECT}:publicIps",
            f"is true, but EC2 gives {instance.name} (several network cards) no public IP at launch and an Auto "
            "Scaling group cannot attach Elastic IPs, so its nodes would have no way out",
            f"set {PROJECT}:publicIps: false (the nodes then leave through a NAT gateway)",
        )
    if parsed.publicIps:
        return
    if not parsed.natGateway and not parsed.interfaceEndpoints:
        raise ConfigError(f"{PROJECT}:natGateway", "is false and interfaceEndpoints too: private nodes would have no way out",
                          "keep natGateway: true, or set interfaceEndpoints: true (and a package mirror for bootstrap)")
    if not parsed.natGateway and parsed.kubernetes == "eks":
        # EKS user guide, "Deploy private clusters with limited internet access": without outbound
        # access every image must come from a registry in the VPC; the Kubernetes layer pulls from
        # nvcr.io (device plugin, Triton) and public.ecr.aws (model fetch), which endpoints do not reach.
        raise ConfigError(f"{PROJECT}:natGateway", "is false, but the EKS pods pull images from nvcr.io and "
                          "public.ecr.aws, which no interface endpoint reaches", "keep natGateway: true on EKS")
    if not parsed.natGateway and not parsed.mirror:
        raise ConfigError(f"{PROJECT}:natGateway", "is false, but bootstrap downloads packages from the internet",
                          f"keep natGateway: true, or set {PROJECT}:mirror to a package mirror the nodes reach")


def iam_role_names(stack: str, kubernetes: str, scheduler: str, boots_gpuforge_nodes: bool) -> tuple[str, ...]:
    """The logical names of the IAM roles the program declares for a stack (components/compute.py,
    slurmhead.py, kubernetes/eks.py). A role's physical name is its logical name plus Pulumi's
    autoname suffix; tests/aws/test_refuse_before_resources.py checks this list against the graph."""
    names = []
    if boots_gpuforge_nodes:
        names.append(f"{stack}-role")
    if scheduler == "slurm":
        names.append(f"{stack}-head-role")
    if kubernetes == "eks":
        names += [f"{stack}-eks-cluster", f"{stack}-eks-node", f"{stack}-eks-storage"]
    return tuple(names)


def check_name_lengths(parsed: RawStackConfig, stack: str, nodes: tuple[str, ...], fleet: FleetConfig) -> None:
    """Names AWS would refuse mid-deploy: IAM role names (logical name + autoname suffix) and the
    nodes' hostnames (one DNS label, from the Name tag; Auto Scaling members append their id)."""
    role_max, suffix = limit("iam_role_name_chars"), limit("pulumi_autoname_suffix_chars")
    boots = parsed.kubernetes != "eks" or fleet.autoscaling is not None
    roles = iam_role_names(stack, parsed.kubernetes, parsed.scheduler, boots)
    longest = max(roles, key=len, default="")
    if len(longest) + suffix.value > role_max.value:
        room = role_max.value - suffix.value - (len(longest) - len(stack))
        raise ConfigError(
            "stack", f"{stack!r} is {len(stack)} characters: the IAM role {longest!r} plus Pulumi's {suffix.value}-character "
            f"autoname suffix passes IAM's {role_max.value} ({role_max.source})",
            f"use a stack name of at most {room} characters",
        )
    label = limit("hostname_label_chars")
    if boots and parsed.kubernetes != "eks":
        # an Auto Scaling member names itself <stack>-node-<instance id> (components/autoscaling.py)
        host = f"{stack}-node-i-0123456789abcdef0" if fleet.autoscaling is not None else nodes[-1]
        if len(host) > label.value:
            raise ConfigError(
                "stack", f"{stack!r} makes the node hostname {host!r} {len(host)} characters; a hostname label "
                f"holds {label.value} ({label.source})",
                f"use a stack name of at most {label.value - (len(host) - len(stack))} characters",
            )


# The aws provider's own config keys (`aws:<key>` in a stack file), as pulumi-aws reads them:
# pulumi_aws/config/vars.py (pulumi-aws 7.x), one `__config__.get('<key>')` each;
# tests/components/test_provider_keys.py checks this list against the installed file.
AWS_PROVIDER_KEYS = (
    "accessKey", "allowedAccountIds", "assumeRoleWithWebIdentity", "assumeRoles", "customCaBundle", "defaultTags",
    "ec2MetadataServiceEndpoint", "ec2MetadataServiceEndpointMode", "endpoints", "forbiddenAccountIds", "httpProxy",
    "httpsProxy", "ignoreTags", "insecure", "maxRetries", "noProxy", "profile", "region", "retryMode",
    "s3UsEast1RegionalEndpoint", "s3UsePathStyle", "secretKey", "sharedConfigFiles", "sharedCredentialsFiles",
    "skipCredentialsValidation", "skipMetadataApiCheck", "skipRegionValidation", "skipRequestingAccountId",
    "stsRegion", "tagPolicyCompliance", "token", "tokenBucketRateLimiterCapacity", "useDualstackEndpoint",
    "useFipsEndpoint", "userAgents",
)  # fmt: skip


def check_aws_key(full_key: str, key: str) -> None:
    """An `aws:` key the provider does not read does nothing (`aws:regoin` left the region unset,
    silently): refused with a did-you-mean (issue 22)."""
    import difflib

    if key in AWS_PROVIDER_KEYS:
        return
    close = difflib.get_close_matches(key, AWS_PROVIDER_KEYS, n=1, cutoff=0.6)
    raise ConfigError(
        full_key,
        "unknown key of the aws provider: nothing reads it" + (f" (did you mean aws:{close[0]}?)" if close else ""),
        f"write it as aws:{close[0]}" if close else "remove it; the provider's keys are in pulumi-aws's config reference",
    )

