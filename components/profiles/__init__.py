"""The reference configurations ("profiles") as data, and their typed model.

A profile is the join point of gpuforge (DESIGN.md): what the seed article asks for
(`requirements`), the AWS shape that realises it (`shape`), the storage layout, the bootstrap
recipe, and the sharing mode. This module imports no Pulumi, so `validate` may read it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from components.catalog import did_you_mean

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
    size_gib: int = Field(ge=125)  # st1/sc1 minimum size
    mount: str


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


class Profile(_Frozen):
    name: str
    summary: str
    seed: Seed
    requirements: Requirements
    shape: Shape
    storage: Storage
    bootstrap: BootstrapRecipe
    sharing: Sharing = Sharing()


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
    return Profile.model_validate(yaml.safe_load(path.read_text()))


def all_profiles() -> dict[str, Profile]:
    return {n: load_profile(n) for n in profile_names()}
