"""Network interfaces of a GPU node and the subnet addresses they take. Pure data, no Pulumi:
the launch templates (components/compute.py) and the config check of the subnet's size
(components/config.py) read the same layout.

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

from components.catalog import InstanceType

AWS_RESERVED_PER_SUBNET = 5  # VPC user guide, "Subnet CIDR blocks": first four and the last
# EKS user guide, "View Amazon EKS networking requirements for VPC and subnets": the cluster's
# subnets need at least six free addresses for its network interfaces, 16 recommended.
EKS_CONTROL_PLANE_ADDRESSES = 16


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
