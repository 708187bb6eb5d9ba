"""Every refusal that can stop a `pulumi up`, made before the program declares its first resource.

`parse_stack_config` (core/config.py) checks the input against the AWS limits table
(core/limits.py). What needs more than the config runs here, in `__main__.py`, right after
it: the rendered user data against EC2's limit, the pinned AMI, and the refusals that only bind
when resources are really created (a placeholder CIDR in a committed stack file): the offline
preview, which creates nothing, shows those as warnings and still prints the graph.
"""

from __future__ import annotations

from gpuforge.components.ami import require_pinned_ami
from gpuforge.components.operations import on_eks
from gpuforge.core.config import StackConfig

# An account id has 12 digits; user data that names one (a spot stack's checkpoint bucket) is
# measured with this stand-in, which has the same length as every real one.
_ACCOUNT_LENGTH_STAND_IN = "0" * 12


def boots_gpuforge_nodes(cfg: StackConfig) -> bool:
    """Whether the stack launches nodes from gpuforge's own template (its instances or its Auto
    Scaling group); on EKS without autoscaling the managed node group boots the EKS AMI instead."""
    return not on_eks(cfg) or cfg.fleet.autoscaling is not None


def refuse_before_resources(cfg: StackConfig, offline: bool, region_ami: str | None = None) -> None:
    """Raise the first ConfigError that would stop `pulumi up`; return when there is none.
    `offline`: the offline preview, where deploy-only refusals are warnings instead."""
    if boots_gpuforge_nodes(cfg):
        check_user_data(cfg)
        require_pinned_ami(cfg.ami_id, cfg.os, cfg.driver_preinstalled, cfg.region, offline, found=region_ami)
    if cfg.slurm is not None:
        check_head_user_data(cfg)
    if not offline and cfg.deploy_refusals:
        raise cfg.deploy_refusals[0]


def preview_warnings(cfg: StackConfig) -> list[str]:
    """The deploy-only refusals, as the offline preview reports them."""
    return [f"`pulumi up` would refuse: {r.render()}" for r in cfg.deploy_refusals]


def check_user_data(cfg: StackConfig) -> None:
    """The launch template's user data, rendered as the program renders it: bootstrap/render.py
    refuses (BootstrapError) what stays over EC2's limit (aws_limits.yaml ec2_user_data_bytes)
    after gzip. Rendered here once more so that this happens before the first resource."""
    from gpuforge.components.userdata import stack_user_data

    account = _ACCOUNT_LENGTH_STAND_IN if cfg.fleet.purchase_option == "spot" else None
    stack_user_data(cfg, account_id=account)


def check_head_user_data(cfg: StackConfig) -> None:
    from gpuforge.bootstrap.slurm_head import render_head_user_data

    render_head_user_data(cfg)
