"""AMI lookup: the documented filters, one place.

Without `gpuforge:amiId`, nodes boot the newest image matching these filters in the stack's
region. Canonical's Ubuntu images get the NVIDIA stack from bootstrap; with
`gpuforge:driverPreinstalled: true` the AWS Deep Learning Base OSS Nvidia Driver AMI is used and
bootstrap only verifies the driver.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

CANONICAL = "099720109477"
AMAZON = "amazon"


@dataclass(frozen=True)
class AmiFilter:
    owner: str
    name_pattern: str
    description: str


AMI_FILTERS: dict[tuple[str, bool], AmiFilter] = {
    ("ubuntu-22.04", False): AmiFilter(
        CANONICAL, "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*", "Canonical Ubuntu 22.04 LTS (amd64)"
    ),
    ("ubuntu-24.04", False): AmiFilter(
        CANONICAL, "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*", "Canonical Ubuntu 24.04 LTS (amd64)"
    ),
    ("ubuntu-22.04", True): AmiFilter(
        AMAZON,
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *",
        "AWS Deep Learning Base OSS Nvidia Driver GPU AMI, Ubuntu 22.04",
    ),
    ("ubuntu-24.04", True): AmiFilter(
        AMAZON,
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *",
        "AWS Deep Learning Base OSS Nvidia Driver GPU AMI, Ubuntu 24.04",
    ),
}


def ami_filter(os_name: str, driver_preinstalled: bool) -> AmiFilter:
    return AMI_FILTERS[(os_name, driver_preinstalled)]


def lookup_ami(os_name: str, driver_preinstalled: bool, opts: pulumi.InvokeOptions | None = None) -> pulumi.Output[str]:
    f = ami_filter(os_name, driver_preinstalled)
    result = aws.ec2.get_ami_output(
        most_recent=True,
        owners=[f.owner],
        filters=[
            aws.ec2.GetAmiFilterArgs(name="name", values=[f.name_pattern]),
            aws.ec2.GetAmiFilterArgs(name="architecture", values=["x86_64"]),
            aws.ec2.GetAmiFilterArgs(name="virtualization-type", values=["hvm"]),
        ],
        opts=opts,
    )
    return result.id
