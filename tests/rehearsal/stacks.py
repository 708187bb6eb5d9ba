"""Boot a node of a stack in a rehearsal: the stack file as `gpuforge` reads it, plus the
rehearsal's mirror (`gpuforge:mirror`), rendered as components/userdata.py renders it for EC2,
with the instance's hardware (GPUs, EFA devices, instance-store disks, data volume) as the
catalog says. Shared by tests/rehearsal and bench/rehearsal.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuforge.bootstrap.versions import load_versions
from gpuforge.components.userdata import stack_user_data
from gpuforge.core.config import StackConfig, parse_stack_config
from gpuforge.stackfile import load_stack_config
from tests.rehearsal.mirror import NODE_PYTHON
from tests.rehearsal.nodes import Node, Rehearsal

PROJECT = Path(__file__).resolve().parents[2]
# Which captured GPU output (tests/validate/replay) a GPU model's stand-in driver replays.
SCENARIOS = {"A100-80GB": "a100-nvswitch", "A100": "a100-nvswitch", "V100-32GB": "v100-mesh", "V100": "v100-mesh",
             "H100": "h100-590"}  # fmt: skip
DATA_VOLUME_ID = "vol-0123456789abcdef0"
ACCOUNT_ID = "123456789012"


@dataclass
class Booted:
    node: Node
    cfg: StackConfig
    status: dict[str, Any]


def stack_config(r: Rehearsal, stack: str, instance_type: str | None = None, *, broken_driver: bool = False) -> StackConfig:
    raw: dict[str, Any] = dict(load_stack_config(PROJECT, stack)[0])
    raw["gpuforge:mirror"] = r.mirror_entries(broken_driver=broken_driver)
    if instance_type:
        raw["gpuforge:instanceType"] = instance_type
    return parse_stack_config(raw, stack)


def hardware(cfg: StackConfig) -> dict[str, Any]:
    inst = cfg.instance
    return {
        "gpu_name": load_versions().nvidia_smi_names[inst.gpu_model],
        "gpu_count": inst.gpu_count,
        "efa_devices": inst.efa_interfaces,
        "replay_scenario": SCENARIOS.get(inst.gpu_model, "a100-nvswitch"),
        "nvme_disks": inst.nvme_count,
        "ebs_volumes": [DATA_VOLUME_ID] if cfg.profile.storage.data_volume else [],
    }


def boot_stack(r: Rehearsal, stack: str, name: str, instance_type: str | None = None, *,
               broken_driver: bool = False, dpkg_lock_s: float = 0, timeout: float = 1200) -> Booted:  # fmt: skip
    """Boot one node with the launch template's user data (its name comes from the Name tag in
    the metadata service, as for Auto Scaling nodes) and wait for the first bootstrap run."""
    cfg = stack_config(r, stack, instance_type, broken_driver=broken_driver)
    # account_id: spot stacks name their checkpoint bucket with it (the deployment's account)
    # node_python: the root is Debian 12, whose python3 is 3.11 (the stack's Ubuntu would be 3.10/3.12)
    rendered = stack_user_data(cfg, None, account_id=ACCOUNT_ID, versions=r.pins, node_python=NODE_PYTHON)
    hw = hardware(cfg) | ({"dpkg_lock_at_boot_s": dpkg_lock_s} if dpkg_lock_s else {})
    node = r.boot(name, rendered.user_data, hardware=hw, tags={"Name": name, "stack": stack})
    return Booted(node, cfg, r.wait_bootstrap(node, timeout=timeout))
