"""Which bootstrap phases a node gets, and the facts they check, from the stack config.

Pure: StackConfig + versions manifest -> NodePlan. The renderer turns a plan into files; tests
assert on plans (fabric manager only on NVSwitch types, st1 mount only with a data volume, ...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuforge.bootstrap.nodelock import OS_TARGET, TARGETS, NodeInstall, lock_sha256
from gpuforge.bootstrap.slurm import SlurmLayout, layout_for
from gpuforge.bootstrap.versions import CudaForOs, SlurmForOs, Versions
from gpuforge.common.errors import GpuforgeError
from gpuforge.common.version import __version__
from gpuforge.core.bucketnames import checkpoint_bucket_name
from gpuforge.core.catalog import load_catalog
from gpuforge.core.config import StackConfig
from gpuforge.core.mirror import GPUFORGE_WHEELS, Mirror
from gpuforge.core.profiles import DataVolume

# Recipes whose jobs talk NCCL across GPUs and nodes; inference serves one GPU per process.
NCCL_RECIPES = frozenset({"training", "hpc"})
BASE_PACKAGES = (
    "ca-certificates", "curl", "gnupg", "chrony", "mdadm", "nvme-cli", "pciutils",
    "build-essential", "python3",
)  # fmt: skip
CONTAINER_TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1",
)  # fmt: skip
DISTRO = {"ubuntu-22.04": "ubuntu2204", "ubuntu-24.04": "ubuntu2404"}
# GPU families the driver branches after R580 no longer drive. The Deep Learning Base OSS Nvidia
# Driver AMIs carry R595 (595.91.07 in the Ubuntu 22.04 and 24.04 releases of 2026-09; DLAMI
# release notes), so `driverPreinstalled` cannot serve them; AWS keeps P3 on a separate
# proprietary-driver AMI (570.195.03, DLAMI release notes, Amazon Linux 2, 2026-01-02).
PRE_R590_ONLY = frozenset({"V100"})


class BootstrapError(GpuforgeError):
    """The bootstrap cannot be rendered for this stack (too big, unknown GPU, unpinned image)."""


@dataclass(frozen=True)
class Phase:
    name: str
    why: str


@dataclass(frozen=True)
class NodePlan:
    stack: str
    profile: str
    node_name: str | None
    region: str
    instance_type: str
    distro: str
    gpu_count: int
    gpu_name: str
    nvswitch: bool
    efa_interfaces: int  # EFA devices the bootstrap sets up and the self-check expects (0: none)
    gpudirect_rdma: bool
    nvme_count: int
    scratch_mount: str
    data_volume: DataVolume | None
    data_volume_id: str | None
    driver_preinstalled: bool
    cuda: CudaForOs
    nccl: bool
    image: str
    ngc_parameter: str | None
    mig_layout: tuple[str, ...]
    checkpoint_command: str | None
    checkpoint_images: tuple[str, ...]  # pulled at bootstrap, so the checkpoint downloads nothing
    cloudwatch_agent: str | None  # the agent's JSON config (feeds the idle-GPU alarm); None: no agent
    phases: tuple[Phase, ...]
    mirror: Mirror = field(default_factory=Mirror)  # where downloads come from (gpuforge:mirror); empty: the vendors
    # gpuforge:scheduler slurm: the cluster's Slurm files, the pinned Slurm, the SSM parameters.
    slurm: SlurmLayout | None = None
    slurm_version: SlurmForOs | None = None
    munge_parameter: str | None = None
    hosts_parameters: tuple[str, ...] = ()
    slurm_daemon: str = "slurmd"  # slurmctld on the head node (bootstrap/slurm_head.py)
    db_parameter: str | None = None  # the head's accounting database password (SSM SecureString)
    extra_files: tuple[tuple[str, str], ...] = ()  # path -> text, e.g. the head's job pricing file
    ena_express: bool = False  # gpuforge:enaExpress: the base phase sets MTU 8900 on the primary interface
    node_install: NodeInstall | None = None  # the gpuforge phase: the base gpuforge in /opt/gpuforge/venv

    @property
    def efa(self) -> bool:
        return self.efa_interfaces > 0

    def expected(self, v: Versions) -> dict[str, Any]:
        """What the status file promises (etc/gpuforge/expected.json): validate compares against it.

        `versions` lists only what this node pins: a key the node does not install is absent, and
        with a driver the AMI brought, driver and fabric manager are observed, not pinned."""
        pinned_driver = not self.driver_preinstalled
        versions = {
            "driver": v.nvidia_driver.version if pinned_driver else None,
            "fabric_manager": v.nvidia_driver.version if self.nvswitch and pinned_driver else None,
            "cuda": self.cuda.cuda,
            "nccl": self.cuda.nccl if self.nccl else None,
            "efa_installer": v.efa_installer.version if self.efa else None,
            "aws_ofi_nccl": v.aws_ofi_nccl.version if self.efa else None,
            "nvidia_container_toolkit": v.nvidia_container_toolkit.version,
            "dcgm": v.dcgm.version,
            "nccl_tests": v.nccl_tests.version if self.nccl else None,
            "cloudwatch_agent": v.cloudwatch_agent.version if self.cloudwatch_agent else None,
            "gpuforge": self.node_install.version if self.node_install else None,
            "ngc_image": self.image,
        }
        return {
            "node": self.node_name,
            "stack": self.stack,
            "profile": self.profile,
            "expect": {
                "instance_type": self.instance_type,
                "gpu_count": self.gpu_count,
                "gpu_name": self.gpu_name,
                "nvswitch": self.nvswitch,
                "efa_interfaces": self.efa_interfaces,
                "scratch_mount": self.scratch_mount if self.nvme_count else None,
                "data_mount": self.data_volume.mount if self.data_volume else None,
                "mig_layout": list(self.mig_layout),
                "driver_preinstalled": self.driver_preinstalled,
            },
            "versions": {k: val for k, val in versions.items() if val is not None},
        }


def plan_node(
    cfg: StackConfig,
    node_name: str | None,
    v: Versions,
    *,
    data_volume_id: str | None = None,
    checkpoint_command: str | None = None,
    checkpoint_images: Sequence[str] = (),
    cloudwatch_agent: Mapping[str, Any] | None = None,
    gpuforge_install: bool = True,
    node_python: str | None = None,
) -> NodePlan:
    """`gpuforge_install` False leaves out the gpuforge phase (the bootstrap sandbox, whose
    fakes cannot serve it; tests/bootstrap/test_node_install.py runs it for real). `node_python`:
    the node interpreter's lock (bootstrap/nodelock.py TARGETS), by default the OS's own."""
    inst = cfg.instance
    profile = cfg.profile
    gpu_name = v.nvidia_smi_names.get(inst.gpu_model)
    if gpu_name is None:
        raise BootstrapError(
            f"bootstrap/versions.yaml: nvidia_smi_names has no entry for GPU model {inst.gpu_model!r} ({inst.name})",
            "add the name nvidia-smi prints for it, so the self-check can verify the model",
        )
    image = profile.bootstrap.container_image
    if image not in v.ngc_images:
        raise BootstrapError(
            f"profile {profile.name}: bootstrap.container_image {image!r} is not pinned in bootstrap/versions.yaml",
            f"add it under ngc_images (with source and date) or use one of {', '.join(v.ngc_images)}",
        )
    if cfg.driver_preinstalled and load_catalog().gpus[inst.gpu_model].family in PRE_R590_ONLY:
        raise BootstrapError(
            f"gpuforge:driverPreinstalled is true, but {inst.name} has {inst.gpu_model} GPUs: current Deep Learning AMIs "
            "ship an R595 driver, and drivers after R580 do not support Volta",
            "set gpuforge:driverPreinstalled to false (the bootstrap installs the pinned driver, which supports V100)",
        )
    mig = profile.sharing.mig_layout if profile.sharing.mode == "mig" else ()
    if mig:
        gpu = load_catalog().gpus[inst.gpu_model]
        bad = [m for m in mig if m not in gpu.mig_profiles]
        if not gpu.mig or bad:
            raise BootstrapError(
                f"profile {profile.name}: sharing.mig_layout {list(mig)} does not fit {inst.gpu_model} on {inst.name}",
                f"use MIG profiles of that GPU ({', '.join(gpu.mig_profiles) or 'it has no MIG'})",
            )
    if data_volume_id is not None and not data_volume_id.startswith("vol-"):
        raise BootstrapError(f"data_volume_id {data_volume_id!r} is not an EBS volume id", "pass it like vol-0abc1234")
    if checkpoint_command is not None and not checkpoint_command.strip():
        raise BootstrapError("checkpoint_command is empty", "pass the command that saves a checkpoint, or None")
    pinned_images = {v.aws_cli_image.image, *v.ngc_images}
    if checkpoint_images and not checkpoint_command:
        raise BootstrapError("checkpoint_images without a checkpoint_command", "pass the command that uses them")
    if bad_images := [i for i in checkpoint_images if i not in pinned_images]:
        raise BootstrapError(
            f"checkpoint image(s) {', '.join(bad_images)} not pinned in bootstrap/versions.yaml",
            f"use one of {', '.join(sorted(pinned_images))}, or pin it there (aws_cli_image, ngc_images)",
        )
    agent_json = _agent_json(cloudwatch_agent) if cloudwatch_agent is not None else None

    nccl = profile.bootstrap.recipe in NCCL_RECIPES
    efa_interfaces = inst.efa_interfaces if nccl else 0
    dv = profile.storage.data_volume
    phases = [Phase("base", "base packages, time sync (Amazon Time Sync), hostname from the inventory name")]
    node_install = _node_install(cfg, node_python) if gpuforge_install else None
    if node_install is not None:
        phases.append(Phase("gpuforge", f"gpuforge {node_install.version} (base install, hashed wheels) in {node_install.venv}"))
    if inst.nvme_count:
        phases.append(Phase("scratch", f"{inst.nvme_count} instance-store NVMe disk(s) -> {profile.storage.scratch_mount}"))
    if dv is not None:
        phases.append(Phase("data-volume", f"{dv.type} EBS data volume -> {dv.mount} (format only if blank)"))
    phases.append(Phase("driver", "NVIDIA driver from NVIDIA's CUDA repository, pinned and held; persistence mode"))
    if inst.nvswitch:
        phases.append(Phase("fabric-manager", "fabric manager for the NVSwitch board, same version as the driver"))
    phases.append(Phase("cuda", "CUDA toolkit" + (" and NCCL" if nccl else "") + ", pinned"))
    if efa_interfaces:
        phases.append(Phase("efa", "EFA installer, aws-ofi-nccl, and the NCCL environment that forbids TCP fallback"))
    phases.append(Phase("containers", "docker with nvidia-container-toolkit configured"))
    phases.append(Phase("ngc", "NGC login (key from SSM at boot, if configured) and image pull"))
    if mig:
        phases.append(Phase("mig", f"MIG layout {','.join(mig)}"))
    phases.append(Phase("tools", "validation tools: iperf3, DCGM" + (", nccl-tests" if nccl else "")))
    if agent_json:
        phases.append(Phase("cloudwatch-agent", "CloudWatch agent publishing NVIDIA GPU metrics for the idle-GPU alarm"))
    if checkpoint_command:
        pre = f"; pre-pulls {', '.join(checkpoint_images)}" if checkpoint_images else ""
        phases.append(Phase("spot-watcher", f"spot interruption watcher that runs the checkpoint command{pre}"))
    slurm = None
    if cfg.slurm is not None:
        sv = v.slurm.for_os(cfg.os)
        slurm = layout_for(cfg.slurm, "nvml" if sv.nvml_plugin else "files")
        where = f"cluster {cfg.slurm.cluster_name}, head {cfg.slurm.head_name}"
        phases.append(Phase("slurm", f"munge and slurmd {sv.version} ({where})"))
        phases.append(Phase("pyxis", f"Enroot {v.enroot.version} and Pyxis {v.pyxis.version}: NGC images under srun"))
        if cfg.slurm.accounting is not None and cfg.slurm.accounting.users:
            phases.append(Phase("slurm-users", "the teams' users with the UIDs of their team files (as on the head)"))
        phases.append(Phase("slurm-start", "slurmd through its packaged unit, after pyxis.conf is in place"))
    phases.append(Phase("self-check", "GPU count and model, driver/fabric manager versions, EFA provider"))

    return NodePlan(
        stack=cfg.stack,
        profile=profile.name,
        node_name=node_name,
        region=cfg.region,
        instance_type=inst.name,
        distro=DISTRO[cfg.os],
        gpu_count=inst.gpu_count,
        gpu_name=gpu_name,
        nvswitch=inst.nvswitch,
        efa_interfaces=efa_interfaces,
        gpudirect_rdma=inst.gpudirect_rdma,
        nvme_count=inst.nvme_count,
        scratch_mount=profile.storage.scratch_mount,
        data_volume=dv,
        data_volume_id=data_volume_id,
        driver_preinstalled=cfg.driver_preinstalled,
        cuda=v.cuda.for_os(cfg.os),
        nccl=nccl,
        image=image,
        ngc_parameter=cfg.ngc_api_key_parameter,
        mig_layout=tuple(mig),
        checkpoint_command=checkpoint_command,
        checkpoint_images=tuple(checkpoint_images),
        cloudwatch_agent=agent_json,
        phases=tuple(phases),
        mirror=cfg.mirror,
        slurm=slurm,
        slurm_version=v.slurm.for_os(cfg.os) if slurm else None,
        munge_parameter=cfg.slurm.munge_parameter if cfg.slurm else None,
        hosts_parameters=cfg.slurm.hosts_parameters if cfg.slurm else (),
        ena_express=cfg.ena_express,
        node_install=node_install,
    )


def _node_install(cfg: StackConfig, node_python: str | None) -> NodeInstall:
    target = TARGETS[node_python or OS_TARGET[cfg.os]]
    sentinel = "000000000000"  # the node fills in its account id (IMDS): one naming rule, core/bucketnames.py
    before, _, after = checkpoint_bucket_name(cfg.bucket_base, sentinel, cfg.region).partition(sentinel)
    return NodeInstall(
        version=__version__,
        target=target,
        lock_sha256=lock_sha256(target),
        region=cfg.region,
        bucket_prefix=before,
        bucket_suffix=after,
        mirror=cfg.mirror.get(GPUFORGE_WHEELS),
    )


def _agent_json(config: Mapping[str, Any]) -> str:
    """The CloudWatch agent config as the node gets it, refused unless it collects NVIDIA GPU
    metrics into a namespace (an agent that publishes nothing the alarm reads is no agent)."""
    metrics = config.get("metrics") or {}
    nvidia = (metrics.get("metrics_collected") or {}).get("nvidia_gpu") or {}
    if not metrics.get("namespace") or not nvidia.get("measurement"):
        raise BootstrapError(
            "cloudwatch_agent config has no metrics.namespace or metrics.metrics_collected.nvidia_gpu.measurement",
            "pass components.monitoring.agent_config(stack)",
        )
    return json.dumps(config, indent=2, sort_keys=True) + "\n"
