"""User data of a Slurm stack's head node: the GPU nodes' runner, library and Slurm files, with
only the phases a controller needs (base: packages, time, hostname; data-volume: the embedded
database's own EBS volume at MariaDB's datadir; slurm: munge; slurm-accounting: slurmdbd and its
database; slurm-start: slurmctld; slurm-accounts: the teams' accounts and quotas).

The same templates as the GPU nodes, so the head and its nodes pin the same Slurm version (they
boot the same AMI) and read the same slurm.conf.
"""

from __future__ import annotations

import dataclasses

from gpuforge.bootstrap.plan import BootstrapError, Phase, plan_node
from gpuforge.bootstrap.render import RenderedBootstrap, render_plan
from gpuforge.bootstrap.versions import Versions, load_versions
from gpuforge.core.config import StackConfig
from gpuforge.core.jobcost import PRICING_FILE, pricing_for
from gpuforge.core.profiles import DataVolume


def render_head_user_data(cfg: StackConfig, versions: Versions | None = None,
                          node_python: str | None = None) -> RenderedBootstrap:  # fmt: skip
    """`versions`: the manifest to render with (default bootstrap/versions.yaml; the first-boot
    rehearsal passes its mirror's key fingerprints, stand-in digests and the Slurm it serves).
    `node_python`: the gpuforge phase's lock for another interpreter than the OS's."""
    if cfg.slurm is None:
        raise BootstrapError(f"stack {cfg.stack} has no Slurm head node", "set gpuforge:scheduler: slurm")
    v = versions or load_versions()
    gpu_plan = plan_node(cfg, cfg.slurm.head_name, v, node_python=node_python)
    assert gpu_plan.slurm_version is not None and gpu_plan.slurm is not None
    acct, layout_acct = cfg.slurm.accounting, gpu_plan.slurm.accounting
    db_volume, db_volume_id = None, None
    phases = [Phase("base", "base packages, time sync (Amazon Time Sync), hostname from the head node's name")]
    if gpu_plan.node_install is not None:
        # `gpuforge validate --transport slurm` runs where srun is: the head. Without this phase
        # the head had srun but no gpuforge (first-boot rehearsal of a cv-training cluster).
        ni = gpu_plan.node_install
        phases.append(Phase("gpuforge", f"gpuforge {ni.version} (base install, hashed wheels) in {ni.venv}"))
    if acct is not None and acct.volume is not None and layout_acct is not None:
        # The GPU nodes' data-volume phase, at MariaDB's datadir, before slurm-accounting installs
        # mariadb-server (whose postinst initialises the datadir, or keeps and re-owns one it finds).
        datadir = layout_acct.mysql_datadir
        db_volume = DataVolume(type=acct.volume.type, size_gib=acct.volume.size_gib, mount=datadir)
        db_volume_id = acct.volume.existing_id  # an adopted volume: the phase takes that one only
        phases.append(Phase("data-volume", f"the accounting database's {acct.volume.type} EBS volume -> {datadir} "
                                           "(format only if blank)"))  # fmt: skip
    phases += [
        Phase("slurm", f"munge and slurmctld {gpu_plan.slurm_version.version} (cluster {cfg.slurm.cluster_name})"),
        Phase("pyxis", f"Pyxis {v.pyxis.version} for srun/sbatch on the submit host (no Enroot)"),
    ]
    if acct is not None:
        db = "MariaDB on this node" if acct.embedded else f"the database at {acct.host}:{acct.port}"
        phases.append(Phase("slurm-accounting", f"slurmdbd on {db}, the cluster registered, the teams' users"))
    phases.append(Phase("slurm-start", "slurmctld through its packaged unit; answers scontrol ping"))
    if acct is not None:
        phases.append(Phase("slurm-accounts", "one account per team with its GPU quota (GrpTRES), users and their limits"))
    plan = dataclasses.replace(
        gpu_plan,
        slurm_daemon="slurmctld",
        phases=tuple(phases),
        cloudwatch_agent=None,
        nvme_count=0,  # the head's type has no instance store: no scratch array, no scratch.mount to wait for
        data_volume=db_volume,
        data_volume_id=db_volume_id,
        checkpoint_command=None,
        checkpoint_images=(),
        db_parameter=acct.password_parameter if acct is not None else None,
        # `gpuforge cost --jobs` on the head prices jobs with this (the stack files stay with the operator)
        extra_files=((PRICING_FILE.lstrip("/"), pricing_for(cfg).to_json()),),
    )
    return render_plan(cfg, plan, v)
