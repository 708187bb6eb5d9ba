"""The node checks gpuforge runs, tier-ordered: tier 0 (inventory gates) first.

The runner runs every tier-0 check on every node, and a higher tier only on nodes whose lower
tiers passed, so no collective or benchmark starts on a node with a missing GPU or a fatal Xid.
Multi-node NCCL is scheduled by the runner with validate.nccl.multinode_command/evaluate_nccl.
"""

from __future__ import annotations

from typing import Any

from gpuforge.validate.checks import NodeCheck
from gpuforge.validate.compute import ComputeCheck
from gpuforge.validate.gpu.bootstrap_status import BootstrapStatusCheck
from gpuforge.validate.gpu.efa import EfaProviderCheck
from gpuforge.validate.gpu.health import GpuHealthCheck
from gpuforge.validate.gpu.inventory import GpuInventoryCheck
from gpuforge.validate.gpu.nvlink import NvlinkCheck
from gpuforge.validate.gpu.topology import TopologyCheck
from gpuforge.validate.gpu.xid import XidScanCheck
from gpuforge.validate.nccl import NcclLocalCheck


def node_checks() -> list[NodeCheck[Any]]:
    """Fresh instances, sorted by tier (stable: inventory before health within tier 0)."""
    checks: list[NodeCheck[Any]] = [
        GpuInventoryCheck(),
        GpuHealthCheck(),
        XidScanCheck(),
        BootstrapStatusCheck(),
        EfaProviderCheck(),
        TopologyCheck(),
        NvlinkCheck(),
        ComputeCheck(),
        NcclLocalCheck(),
    ]
    return sorted(checks, key=lambda c: c.tier)
