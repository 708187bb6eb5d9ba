"""AMI lookup: the documented filters, one place.

The nodes boot `gpuforge:amiId`, pinned in the stack file. A lookup of the newest match would
change whenever Canonical (or AWS) publishes an image, and the new image id changes the launch
template, which replaces every instance booted from it (terraform-provider-aws
internal/service/ec2/ec2_instance.go @0015dfcd: `launch_template` is ForceNew). So a real
`pulumi up` refuses to run without a pinned AMI (`require_pinned_ami`); `gpuforge preflight`
shows the newest match to pin. Only the offline preview, which creates nothing, looks one up.

Canonical's Ubuntu images get the NVIDIA stack from bootstrap; with
`gpuforge:driverPreinstalled: true` the AWS Deep Learning Base OSS Nvidia Driver AMI is used and
bootstrap only verifies the driver.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from gpuforge.common.errors import ConfigError

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


def require_pinned_ami(
    ami_id: str | None, os_name: str, driver_preinstalled: bool, region: str, offline: bool, found: str | None = None
) -> None:
    """Refuse a real deployment whose AMI is not pinned. With `found` (the newest image the
    documented filter matches in the region, `newest_ami`), the fix is the one command to run;
    without it, the command that finds the image."""
    if ami_id or offline:
        return
    f = ami_filter(os_name, driver_preinstalled)
    problem = "not set: a looked-up AMI changes with every new image and would replace every GPU node"
    if found:
        raise ConfigError(
            "gpuforge:amiId", problem,
            f"pin the newest {f.description} in {region}: `pulumi config set gpuforge:amiId {found}`",
        )
    raise ConfigError(
        "gpuforge:amiId", problem,
        f"pin one: `gpuforge preflight --stack <stack>` shows the newest {f.description}, or run "
        f"`aws ec2 describe-images --region {region} --owners {f.owner} --filters 'Name=name,Values={f.name_pattern}' "
        "--query 'sort_by(Images,&CreationDate)[-1].ImageId'`; then `pulumi config set gpuforge:amiId ami-...`",
    )


def newest_ami(region: str, os_name: str, driver_preinstalled: bool, profile: str | None = None) -> str | None:
    """The newest image the documented filter matches in `region` (EC2 DescribeImages with the
    filters `lookup_ami` gives the provider, newest CreationDate first, as the provider's
    `most_recent`), or None when there is none or AWS cannot be asked (no credentials, no network):
    the caller then shows the command instead. boto3 honours AWS_ENDPOINT_URL (tests: moto)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    f = ami_filter(os_name, driver_preinstalled)
    try:
        session = boto3.Session(profile_name=profile, region_name=region)
        ec2 = session.client("ec2", config=Config(retries={"max_attempts": 2}, connect_timeout=5, read_timeout=15))
        images = ec2.describe_images(Owners=[f.owner], Filters=[
            {"Name": "name", "Values": [f.name_pattern]},
            {"Name": "architecture", "Values": ["x86_64"]},
            {"Name": "virtualization-type", "Values": ["hvm"]},
            {"Name": "state", "Values": ["available"]},
        ])["Images"]
    except (BotoCoreError, ClientError):
        return None
    if not images:
        return None
    return str(max(images, key=lambda i: i.get("CreationDate", ""))["ImageId"])


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
