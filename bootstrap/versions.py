"""The versions manifest (bootstrap/versions.yaml) as a typed, validated object.

Every pin the node bootstrap installs is read from here; templates never carry versions.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuforge.common.errors import GpuforgeError

VERSIONS_FILE = Path(__file__).resolve().parent / "versions.yaml"
_HEX64 = r"^[0-9a-f]{64}$"
_HEX128 = r"^[0-9a-f]{128}$"
_FPR = r"^[0-9A-F]{40}$"


class _Pin(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    source: str = Field(min_length=1)
    date: str = Field(pattern=r"^\d{4}-\d{2}$")


class Driver(_Pin):
    branch: str = Field(pattern=r"^\d{3}$")
    version: str = Field(pattern=r"^\d{3}\.\d+\.\d+$")
    deb_revision: str

    @property
    def deb_version(self) -> str:
        return f"{self.version}-{self.deb_revision}"


class CudaForOs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    package: str
    version: str
    cuda: str
    nccl: str = Field(pattern=r"^\d+\.\d+\.\d+-\d+\+cuda\d+\.\d+$")


class Cuda(_Pin):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    ubuntu_2204: CudaForOs = Field(alias="ubuntu-22.04")
    ubuntu_2404: CudaForOs = Field(alias="ubuntu-24.04")

    def for_os(self, os_name: str) -> CudaForOs:
        return {"ubuntu-22.04": self.ubuntu_2204, "ubuntu-24.04": self.ubuntu_2404}[os_name]


class CudaRepo(_Pin):
    url: str
    key_file: str
    key_fingerprint: str = Field(pattern=_FPR)


class Download(_Pin):
    version: str
    url: str
    sha256: str | None = Field(default=None, pattern=_HEX64)

    @property
    def resolved_url(self) -> str:
        return self.url.format(version=self.version)


class OfiNccl(Download):
    sha512: str | None = Field(default=None, pattern=_HEX128)
    net_name: str


class ContainerToolkit(_Pin):
    version: str
    repo: str
    key_url: str
    key_fingerprint: str = Field(pattern=_FPR)


class CloudWatchAgent(Download):
    key_url: str
    key_fingerprint: str = Field(pattern=_FPR)

    @property
    def signature_url(self) -> str:
        return self.resolved_url + ".sig"


class Image(_Pin):
    image: str = Field(pattern=r"^[a-z0-9.-]+(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$")


class PinnedImage(Image):
    """An image pinned by tag AND content digest (what `gpuforge poc` runs, by both)."""

    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")


class Dcgm(_Pin):
    package: str
    version: str


class NgcImage(_Pin):
    note: str


class SlurmForOs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    version: str = Field(pattern=r"^\d{2}\.\d{2}\.\d+$")  # upstream version; apt pins `<version>-*`
    nvml_plugin: bool  # the archive has slurm-wlm-nvml-plugin (gpu_nvml.so): gres.conf AutoDetect=nvml
    # The package with the PMIx library path Slurm's mpi/pmix plugin dlopens (srun --mpi=pmix,
    # validate's NCCL pairs): the unversioned libpmix.so; no Slurm package depends on it.
    pmix_package: str = Field(pattern=r"^[a-z0-9][a-z0-9.+-]+$")


class Slurm(_Pin):
    """Slurm and munge from the Ubuntu archive, per base image."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    ubuntu_2204: SlurmForOs = Field(alias="ubuntu-22.04")
    ubuntu_2404: SlurmForOs = Field(alias="ubuntu-24.04")

    def for_os(self, os_name: str) -> SlurmForOs:
        return {"ubuntu-22.04": self.ubuntu_2204, "ubuntu-24.04": self.ubuntu_2404}[os_name]


class OsPins(BaseModel):
    """Pins that differ on one base image (replace the top-level pin of the same name there)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    nvidia_driver: Driver | None = None
    efa_installer: Download | None = None


class Versions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_: int = Field(alias="schema")
    nvidia_driver: Driver
    cuda: Cuda
    cuda_repo: CudaRepo
    nccl_tests: Download
    efa_installer: Download
    aws_ofi_nccl: OfiNccl
    nvidia_container_toolkit: ContainerToolkit
    dcgm: Dcgm
    cloudwatch_agent: CloudWatchAgent
    aws_cli_image: Image
    poc_image: PinnedImage
    slurm: Slurm
    enroot: Download
    enroot_caps: Download
    pyxis: Download
    ngc_images: dict[str, NgcImage]
    nvidia_smi_names: dict[str, str]
    nvidia_smi_names_source: str
    os_overrides: dict[str, OsPins] = Field(default_factory=dict)

    def for_os(self, os_name: str) -> Versions:
        """The pins a node of this base image gets: the top-level ones, with its overrides."""
        over = self.os_overrides.get(os_name)
        if over is None:
            return self
        return self.model_copy(update={k: val for k in ("nvidia_driver", "efa_installer") if (val := getattr(over, k))})


class VersionsError(GpuforgeError):
    """versions.yaml is missing or malformed."""


def load_versions(path: Path | None = None) -> Versions:
    """Read and validate the manifest (default: the shipped bootstrap/versions.yaml)."""
    if path is None:
        return _shipped()
    return _load(path)


@cache
def _shipped() -> Versions:
    return _load(VERSIONS_FILE)


def _load(path: Path) -> Versions:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise VersionsError(f"{path}: cannot read the versions manifest ({exc})", "restore it from git") from None
    try:
        return Versions.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise VersionsError(
            f"{path}: {where}: {err['msg']} (got {err.get('input')!r})",
            "fix the entry; every pin needs a value, a source and a date (YYYY-MM)",
        ) from None
