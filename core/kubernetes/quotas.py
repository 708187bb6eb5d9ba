"""Team quotas: the cluster's capacity less the seed's 15-20% headroom, split evenly over the
teams. Pure arithmetic, no Pulumi, so config validation and tests share it."""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.core.catalog import InstanceType

MIB_PER_GIB = 1024


@dataclass(frozen=True)
class TeamQuota:
    gpus: dict[str, int]  # extended resource -> count (requests and limits)
    cpu_millis: int
    memory_mib: int

    def hard(self) -> dict[str, str]:
        """ResourceQuota `spec.hard`. Extended resources only take `requests.` (no overcommit)."""
        hard = {f"requests.{name}": str(n) for name, n in sorted(self.gpus.items())}
        hard.update({"requests.cpu": f"{self.cpu_millis}m", "limits.cpu": f"{self.cpu_millis}m",
                     "requests.memory": f"{self.memory_mib}Mi", "limits.memory": f"{self.memory_mib}Mi"})
        return hard


def team_quota(
    instance: InstanceType, node_count: int, advertised_per_gpu: dict[str, int], headroom_percent: int, teams: int
) -> TeamQuota:
    """Each team's share of capacity x (1 - headroom). Rounded down, so the teams together never
    eat into the headroom. Capacity is the catalog's (allocatable is a little lower: the kubelet
    reserves some CPU and memory, which the headroom absorbs)."""
    keep = 100 - headroom_percent
    gpus = instance.gpu_count * node_count

    def share(total: int) -> int:
        return total * keep // (100 * teams)  # integer maths: no float rounding up past the cap

    return TeamQuota(
        gpus={name: share(gpus * per_gpu) for name, per_gpu in advertised_per_gpu.items()},
        cpu_millis=share(instance.vcpus * node_count * 1000),
        memory_mib=share(int(instance.memory_gib * MIB_PER_GIB) * node_count),
    )
