"""The reference configurations ("profiles") as data, and their typed model.

A profile is the join point of gpuforge (DESIGN.md): what the seed article asks for
(`requirements`), the AWS shape that realises it (`shape`), the storage layout, the bootstrap
recipe, and the sharing mode. This module imports no Pulumi, so `validate` may read it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuforge.core.catalog import did_you_mean

PROFILE_DIR = Path(__file__).resolve().parent


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Seed(_Frozen):
    article: str
    section: str
    text: str


class Requirements(_Frozen):
    """What the seed asks for. Totals across the cluster unless the name says per-GPU."""

    gpu_model: str
    gpus: int = Field(ge=1)
    gpu_memory_gib: float = Field(ge=0, description="per GPU")
    interconnect: Literal["none", "pcie", "nvlink"] = "none"
    network_gbps: float = Field(default=0, ge=0, description="per node")
    nvme_gb: int = Field(default=0, ge=0, description="per node")
    hdd_gb: int = Field(default=0, ge=0, description="per node, met by an EBS st1 volume")
    ram_gib: float = Field(default=0, ge=0, description="total")
    rdma: bool = False
    precision: Literal["fp64", "fp32", "fp16", "int8"] = "fp32"
    min_nodes: int = Field(default=1, ge=1)


class Shape(_Frozen):
    instance_type: str
    node_count: int = Field(ge=1)
    notes: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()


class DataVolume(_Frozen):
    type: Literal["st1", "sc1", "gp3"]
    size_gib: int = Field(ge=1)
    mount: str

    @model_validator(mode="after")
    def _ebs_minimum(self) -> DataVolume:
        # EBS minimum sizes (EC2 User Guide, "Amazon EBS volume types"): 125 GiB for st1 and sc1, 1 GiB for gp3.
        if self.type in ("st1", "sc1") and self.size_gib < 125:
            raise ValueError(f"an {self.type} volume is at least 125 GiB, not {self.size_gib}")
        return self


class Storage(_Frozen):
    root_volume_gib: int = Field(default=200, ge=30)
    scratch_mount: str = "/scratch"
    data_volume: DataVolume | None = None


class BootstrapRecipe(_Frozen):
    recipe: Literal["training", "inference", "hpc"]
    container_image: str


class Sharing(_Frozen):
    mode: Literal["exclusive", "time-slicing", "mps", "mig"] = "exclusive"
    replicas: int = Field(default=1, ge=1, le=48)
    mig_layout: tuple[str, ...] = ()


class SlurmPartition(_Frozen):
    """A partition over all of the stack's GPU nodes (one placement group, one node shape)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,30}$")
    default: bool = False
    max_time: str = Field(default="INFINITE", pattern=r"^(INFINITE|UNLIMITED|(\d+-)?\d+(:\d{2}){0,2})$")
    exclusive: bool = True  # whole nodes per job: a training job wants every GPU and NVSwitch of a node


_STATE = "(ALLOC|ANY|CYCLE|IDLE|MIXED|NONDRAINED_IDLE)"  # slurm.conf HealthCheckNodeState words


class SlurmHealthCheck(_Frozen):
    """slurm.conf HealthCheckInterval/HealthCheckNodeState and the drain bound of `gpuforge health-check`."""

    interval_s: int = Field(default=300, ge=30, le=86400)
    node_state: str = Field(default="ANY,CYCLE", pattern=rf"^{_STATE}(,{_STATE})*$")
    # Never drain more than this share of the nodes for health-check reasons (but always at least
    # one, so a one-node cluster can drain its node: validate/health.py allowed_drains): past it, a
    # broken check (a driver update that changes nvidia-smi's output, say) is likelier than broken nodes.
    max_drained_percent: int = Field(default=25, ge=1, le=100)


class SlurmProfile(_Frozen):
    head_instance_type: str = "m7i.large"
    partitions: tuple[SlurmPartition, ...] = Field(min_length=1)
    health_check: SlurmHealthCheck = SlurmHealthCheck()

    @field_validator("partitions")
    @classmethod
    def _one_default(cls, parts: tuple[SlurmPartition, ...]) -> tuple[SlurmPartition, ...]:
        if sum(p.default for p in parts) != 1:
            raise ValueError("exactly one partition must be the default")
        if len({p.name for p in parts}) != len(parts):
            raise ValueError("partition names must be distinct")
        return parts


class SchedulerProfile(_Frozen):
    slurm: SlurmProfile | None = None


class Profile(_Frozen):
    name: str
    summary: str
    seed: Seed
    requirements: Requirements
    shape: Shape
    storage: Storage
    bootstrap: BootstrapRecipe
    sharing: Sharing = Sharing()
    scheduler: SchedulerProfile | None = None  # what `gpuforge:scheduler` builds for this profile


class UnknownProfileError(KeyError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.name = name
        self.known = known
        self.suggestion = did_you_mean(name, known)


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


@cache
def load_profile(name: str) -> Profile:
    path = PROFILE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise UnknownProfileError(name, profile_names())
    from pydantic import ValidationError

    from gpuforge.common import inputfile
    from gpuforge.common.errors import InputError

    doc = inputfile.read_document(path, inputfile.PROFILE)
    try:
        return Profile.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise InputError(f"{path}: {where}: {err['msg']}", "restore the profile (git checkout) or fix the key") from None


def all_profiles() -> dict[str, Profile]:
    return {n: load_profile(n) for n in profile_names()}
