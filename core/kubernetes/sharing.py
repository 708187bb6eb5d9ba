"""How a profile's GPUs are offered to Kubernetes: the device plugin's config and what each GPU
then advertises. Pure data, no Pulumi: the validate check reads the same numbers.

- exclusive: one `nvidia.com/gpu` per GPU (training: nothing shared).
- time-slicing / mps: N `nvidia.com/gpu` replicas per GPU (T4, V100, ...: no memory or fault
  isolation, shared/research/aws-gpu-specs.md §4).
- mig: the GPU is split into the profile's MIG layout; `single` strategy when every instance is
  the same profile (advertised as `nvidia.com/gpu`), `mixed` otherwise (`nvidia.com/mig-<p>`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from gpuforge.common.errors import ConfigError
from gpuforge.core.catalog import GpuModel
from gpuforge.core.profiles import Sharing

GPU_RESOURCE = "nvidia.com/gpu"
MIG_SLICES = 7  # an A100/H100/H200 has 7 compute slices; a layout may not use more


@dataclass(frozen=True)
class SharingPlan:
    mode: str
    mig_strategy: str  # none | single | mixed
    advertised_per_gpu: dict[str, int]  # extended resource -> count per physical GPU
    mig_layout: tuple[str, ...]
    plugin_config: dict[str, Any]  # the device plugin's config.yaml

    @property
    def shared(self) -> bool:
        return self.mode in ("time-slicing", "mps")


def plan_sharing(sharing: Sharing, gpu: GpuModel) -> SharingPlan:
    flags: dict[str, Any] = {"migStrategy": "none", "failOnInitError": True}
    config: dict[str, Any] = {"version": "v1", "flags": flags}
    if sharing.mode == "mig":
        layout = _check_mig_layout(sharing.mig_layout, gpu)
        counts = Counter(layout)
        strategy = "single" if len(counts) == 1 else "mixed"
        flags["migStrategy"] = strategy
        advertised = {GPU_RESOURCE: len(layout)} if strategy == "single" else {
            f"nvidia.com/mig-{p}": n for p, n in sorted(counts.items())
        }
        return SharingPlan("mig", strategy, advertised, layout, config)
    if sharing.mode in ("time-slicing", "mps"):
        key = "timeSlicing" if sharing.mode == "time-slicing" else "mps"
        # failRequestsGreaterThanOne: a pod asking for 2 shares would get 2 slices of the same
        # GPU, not 2 GPUs; refuse it instead of silently halving what the user thinks they have.
        config["sharing"] = {
            key: {
                "renameByDefault": False,
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": GPU_RESOURCE, "replicas": sharing.replicas}],
            }
        }
        return SharingPlan(sharing.mode, "none", {GPU_RESOURCE: sharing.replicas}, (), config)
    return SharingPlan("exclusive", "none", {GPU_RESOURCE: 1}, (), config)


def _check_mig_layout(layout: tuple[str, ...], gpu: GpuModel) -> tuple[str, ...]:
    key = "profile sharing.mig_layout"
    if not gpu.mig:
        raise ConfigError(key, f"{gpu.name} has no MIG (aws-gpu-specs.md §4)", "use sharing mode time-slicing or mps")
    if not layout:
        raise ConfigError(key, "is empty for sharing mode mig", f"list MIG profiles from {', '.join(gpu.mig_profiles)}")
    unknown = [p for p in layout if p not in gpu.mig_profiles]
    if unknown:
        raise ConfigError(key, f"{', '.join(unknown)} is not a MIG profile of {gpu.name}",
                          f"use {', '.join(gpu.mig_profiles)}")
    # A necessary condition only: NVIDIA's placement rules also constrain which mixes fit.
    slices = sum(int(p.split("g.", 1)[0]) for p in layout)
    if slices > MIG_SLICES:
        raise ConfigError(key, f"uses {slices} compute slices, a GPU has {MIG_SLICES}", "drop or shrink instances")
    return layout
