"""How nodes are bought: the launch-template pieces for spot, capacity reservations and capacity
blocks, and the spot checkpoint command the bootstrap's interruption watcher runs.

On-demand is the launch template with neither piece. A spot fleet behind an Auto Scaling group
gets its spot settings from the group's mixed-instances policy instead (components/autoscaling.py):
EC2 refuses a launch template with market options in a mixed-instances group.
"""

from __future__ import annotations

import shlex

import pulumi_aws as aws

from gpuforge.bootstrap.versions import load_versions
from gpuforge.core.bucketnames import checkpoint_bucket_name
from gpuforge.core.config import StackConfig
from gpuforge.core.fleet import FleetConfig

CHECKPOINT_DIR = "checkpoints"  # under the profile's scratch mount; training jobs write here


def market_options(fleet: FleetConfig) -> aws.ec2.LaunchTemplateInstanceMarketOptionsArgs | None:
    if fleet.purchase_option == "capacity-block":
        return aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
    if fleet.purchase_option == "spot" and fleet.autoscaling is None:
        return aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
            market_type="spot",
            spot_options=aws.ec2.LaunchTemplateInstanceMarketOptionsSpotOptionsArgs(
                # one-time + terminate: an interrupted node is replaced by `pulumi up`, and its work
                # resumes from the checkpoint the watcher saved; stop/hibernate need persistent requests
                spot_instance_type="one-time" if fleet.spot_interruption == "terminate" else "persistent",
                instance_interruption_behavior=fleet.spot_interruption,
                max_price=fleet.spot_max_price,
            ),
        )
    return None


def capacity_reservation(fleet: FleetConfig) -> aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs | None:
    if fleet.capacity_reservation_id is None:
        return None
    return aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
        capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
            capacity_reservation_id=fleet.capacity_reservation_id
        )
    )


def aws_cli_image() -> str:
    """The node has Docker, not the AWS CLI: the pinned AWS CLI image (bootstrap/versions.yaml)."""
    return load_versions().aws_cli_image.image


def checkpoint_images(cfg: StackConfig) -> tuple[str, ...]:
    """What the checkpoint command runs; the bootstrap pulls it on spot nodes ahead of time."""
    return (aws_cli_image(),) if cfg.fleet.purchase_option == "spot" else ()


def checkpoint_command(cfg: StackConfig, account_id: str | None) -> str | None:
    """On spot, what the watcher runs on the 2-minute interruption notice: copy the node's
    checkpoints to the stack's (regional, versioned) checkpoint bucket. None off spot.

    The bucket's name carries the AWS account id (components/storage.py), so a spot stack's
    command needs it: the program passes the caller identity's account.
    """
    if cfg.fleet.purchase_option != "spot":
        return None
    if account_id is None:
        raise ValueError("a spot stack's checkpoint command needs the AWS account id (the bucket name carries it)")
    src = f"{cfg.profile.storage.scratch_mount.rstrip('/')}/{CHECKPOINT_DIR}"
    dest = f"s3://{checkpoint_bucket_name(cfg.bucket_base, account_id, cfg.region)}/{cfg.stack}"
    # The container reaches IMDSv2 for the node role's credentials (hop limit 2 in the template).
    # --pull never: the image was pulled at bootstrap; a download now would eat the 2 minutes.
    return (
        f"docker run --rm --pull never -v {shlex.quote(src)}:/ckpt:ro {aws_cli_image()} "
        f's3 sync /ckpt {shlex.quote(dest)}/"$(hostname)"/ --only-show-errors'
    )
