"""Network interfaces of a GPU node and the subnet addresses they take. Pure data, no Pulumi:
the launch templates (components/compute.py) and the config check of the subnet's size
(core/config.py) read the same layout.

Multi-card EFA types follow the EC2 user guide, "Maximize network bandwidth on Amazon EC2
instances with multiple network cards" (efa-acc-inst-types): an ENA interface as the primary
(card 0, device 0; an EFA-only interface cannot be primary), an EFA-only interface on card 0
device 1, and an EFA-only interface on device 0 of every other card. EFA-only interfaces carry
no IP address, so a p5 node takes one subnet address instead of 32. The provider accepts
`efa-only` since terraform-provider-aws v5.73.0 (CHANGELOG: "resource/aws_launch_template: Add
`efa-only` as a valid value for `network_interfaces.interface_type`", #39882); pulumi-aws 7.x
bridges a later provider. A single-card EFA type keeps one `efa` interface (EFA with ENA).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from gpuforge.common.errors import ConfigError
from gpuforge.core.catalog import InstanceType
from gpuforge.core.limits import limit

# The AWS limits table (core/aws_limits.yaml) names both numbers and their sources.
AWS_RESERVED_PER_SUBNET = limit("subnet_reserved_addresses").value
EKS_CONTROL_PLANE_ADDRESSES = limit("eks_control_plane_addresses").value


# What private nodes reach through interface endpoints (issue 10 item 4): Session Manager (ssm,
# ssmmessages, ec2messages - the SSM agent; VPC user guide / Systems Manager "Use VPC endpoints"),
# image pulls (ecr.api, ecr.dkr; ECR "Interface VPC endpoints", image layers come from S3 through
# the gateway endpoint), credentials (sts), EC2 (the EKS node bootstrap and the VPC CNI), logs.
INTERFACE_SERVICES = ("ssm", "ssmmessages", "ec2messages", "ecr.api", "ecr.dkr", "sts", "ec2", "logs")
EGRESS_SUBNET_PREFIX = 28  # the NAT gateway's public subnet: it holds the gateway's interface only


def egress_subnet_cidr(vpc_cidr: str, taken: list[str]) -> str:
    """The last /28 of the VPC that overlaps none of `taken` (node subnet, control-plane subnet)."""
    used = [ipaddress.IPv4Network(t) for t in taken]
    for candidate in reversed(list(ipaddress.IPv4Network(vpc_cidr).subnets(new_prefix=EGRESS_SUBNET_PREFIX))):
        if not any(candidate.overlaps(u) for u in used):
            return str(candidate)
    raise ValueError(f"no free /{EGRESS_SUBNET_PREFIX} left in {vpc_cidr}")


@dataclass(frozen=True)
class Interface:
    card: int
    device: int
    type: str | None  # None: ENA ("interface", the API default); "efa"; "efa-only"

    @property
    def has_ip(self) -> bool:
        return self.type != "efa-only"


def interface_layout(instance: InstanceType) -> tuple[Interface, ...]:
    cards = instance.efa_interfaces if instance.efa else 1
    if cards <= 1:
        return (Interface(0, 0, "efa" if instance.efa else None),)
    return (
        Interface(0, 0, None),
        Interface(0, 1, "efa-only"),
        *(Interface(card, 0, "efa-only") for card in range(1, cards)),
    )


def addresses_per_node(instance: InstanceType) -> int:
    return sum(1 for i in interface_layout(instance) if i.has_ip)


def usable_addresses(cidr: str) -> int:
    return int(ipaddress.ip_network(cidr).num_addresses) - AWS_RESERVED_PER_SUBNET


def control_plane_cidr(vpc_cidr: str, node_subnet_cidr: str) -> str:
    """The first /24 of the VPC that does not overlap the node subnet (control-plane ENIs only)."""
    vpc = ipaddress.ip_network(vpc_cidr)
    nodes = ipaddress.ip_network(node_subnet_cidr)
    for candidate in vpc.subnets(new_prefix=max(24, vpc.prefixlen)):
        if not candidate.overlaps(nodes):
            return str(candidate)
    raise ConfigError("gpuforge:subnetCidr", f"{node_subnet_cidr} leaves no /24 of {vpc_cidr} for the EKS "
                      "control plane", "use a smaller subnetCidr or a larger vpcCidr")
