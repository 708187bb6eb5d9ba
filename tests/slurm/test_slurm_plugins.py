"""Every plugin the rendered slurm.conf, cgroup.conf and gres.conf name (and the `srun --mpi=pmix`
validate starts) is a plugin file of the Slurm that nodes of that OS install (finding 2 of issue 19).

The plugin files are ported from SchedMD's sources at the tag of each version that
bootstrap/versions.yaml pins (the Makefile.am of each plugin family, `pkglib_LTLIBRARIES`, with the
`if` around the families that build only with a library present). Ubuntu's packages are built from
these sources: jammy's slurm-wlm 21.08.5, noble's 23.11.4; their own file lists were not re-read
offline. This machine's Debian 22.05.8 (`dpkg -L slurm-wlm-basic-plugins`) ships cgroup_v1.so and
cgroup_v2.so, mpi_pmix.so and the *_none.so files this table predicts for a build of that era.
"""

from __future__ import annotations

import pytest

from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.bootstrap.versions import load_versions
from gpuforge.common.errors import ConfigError
from tests.slurm.conftest import slurm_stack


def _so(family: str, *names: str) -> set[str]:
    return {f"{family}/{n}" for n in names}


# version -> plugins built (family/name, as slurm.conf names them). Sources: SchedMD/slurm
# src/plugins/<family>/<name>/Makefile.am at the tag; conditional builds marked.
PLUGINS: dict[str, set[str]] = {
    # tag slurm-21-08-5-1, commit 2558f205627ac62c1a07b451f077fac67bb6a3e9
    "21.08.5": (
        _so("accounting_storage", "mysql", "none", "slurmdbd") | _so("auth", "jwt", "munge", "none")
        | _so("cgroup", "v1")  # src/plugins/cgroup/Makefile.am: SUBDIRS = common v1
        | _so("cred", "munge", "none") | _so("gpu", "generic", "nvml", "rsmi")  # nvml: if BUILD_NVML
        | _so("gres", "gpu", "mps", "nic") | _so("jobacct_gather", "cgroup", "linux", "none")
        | _so("mpi", "cray_shasta", "none", "pmi2", "pmix")  # pmix: mpi_pmix_v{1..4}.so + mpi_pmix.so (install-exec-hook)
        | _so("proctrack", "cgroup", "cray_aries", "linuxproc", "pgid") | _so("sched", "backfill", "builtin")
        | _so("select", "cons_res", "cons_tres", "cray_aries", "linear")
        | _so("task", "affinity", "cgroup", "cray_aries", "none")
        | _so("topology", "3d_torus", "hypercube", "none", "tree")
    ),
    # tag slurm-23-11-4-1, commit 924dce610761c30937e88ac334bdb3ca90beab91
    "23.11.4": (
        _so("accounting_storage", "mysql", "slurmdbd") | _so("auth", "jwt", "munge", "none", "slurm")
        | _so("cgroup", "v1", "v2")  # v2: if WITH_BPF, if WITH_DBUS
        | _so("cred", "munge", "none") | _so("gpu", "generic", "nrt", "nvml", "oneapi", "rsmi")
        | _so("gres", "gpu", "mps", "nic", "shard") | _so("jobacct_gather", "cgroup", "linux")
        | _so("mpi", "cray_shasta", "pmi2", "pmix")  # pmix: mpi_pmix_v{2..5}.so + mpi_pmix.so
        | _so("proctrack", "cgroup", "cray_aries", "linuxproc", "pgid") | _so("sched", "backfill", "builtin")
        | _so("select", "cons_tres", "cray_aries", "linear") | _so("task", "affinity", "cgroup", "cray_aries")
        | _so("topology", "3d_torus", "block", "default", "tree")
    ),
}
# 23.11 has no */none plugin files: src/common/read_config.c (slurm-23-11-4-1) drops a value
# containing "none" for JobAcctGatherType, AccountingStorageType, MpiDefault, TaskPlugin (no plugin
# loaded). 21.08 loads <family>_none.so.
NONE_IS_NO_PLUGIN = {"21.08.5": False, "23.11.4": True}
# Ubuntu 22.04 and 24.04 boot the unified cgroup v2 hierarchy: CgroupPlugin=autodetect means cgroup/v2.
HIERARCHY = {"ubuntu-22.04": "cgroup/v2", "ubuntu-24.04": "cgroup/v2"}
SLURM_CONF_PLUGIN_KEYS = ("ProctrackType", "TaskPlugin", "SelectType", "SchedulerType", "TopologyPlugin", "AuthType",
                          "CredType", "JobAcctGatherType", "AccountingStorageType")  # fmt: skip


def _conf(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs if " " not in k.strip()}


def required_plugins(files: dict[str, str], os_name: str) -> set[str]:
    """The plugins the rendered files make the daemons load, family/name."""
    slurm = _conf(files["etc/slurm/slurm.conf"])
    need = {p.strip() for key in SLURM_CONF_PLUGIN_KEYS for p in slurm.get(key, "").split(",") if p.strip()}
    need.add(f"mpi/{slurm.get('MpiDefault', 'none')}")
    need |= {f"gres/{g}" for g in slurm.get("GresTypes", "").split(",") if g}
    if "cgroup/none" != (cg := _conf(files.get("etc/slurm/cgroup.conf", "CgroupPlugin=cgroup/none")).get("CgroupPlugin")):
        need.add(HIERARCHY[os_name] if cg in (None, "autodetect") else str(cg))
    if "AutoDetect=nvml" in files["etc/slurm/gres.conf"].splitlines():
        need.add("gpu/nvml")
    need.add("mpi/pmix")  # validate --transport slurm: srun --mpi=pmix for NCCL (validate/collective.py)
    return need


def missing_plugins(need: set[str], version: str) -> set[str]:
    have = PLUGINS[version]
    return {p for p in need if p not in have and not (NONE_IS_NO_PLUGIN[version] and p.endswith("/none"))}


@pytest.mark.parametrize("os_name", sorted(HIERARCHY))
@pytest.mark.parametrize("stack", ["cv-training", "risk-sim"])
def test_the_rendered_plugins_are_in_the_slurm_each_os_installs(stack: str, os_name: str) -> None:
    version = load_versions().slurm.for_os(os_name).version
    try:
        cfg = slurm_stack(stack, os=os_name)
    except ConfigError as exc:
        # Refused: only where that OS's Slurm lacks a plugin the same templates need (as 24.04 renders them).
        files = render_head_user_data(slurm_stack(stack, os="ubuntu-24.04")).files
        missing = missing_plugins(required_plugins(files, os_name), version)
        assert missing == {"cgroup/v2"}, missing
        assert exc.key == "gpuforge:os" and "no cgroup/v2 plugin" in str(exc)
        return
    files = render_head_user_data(cfg).files
    need = required_plugins(files, os_name)
    assert {"proctrack/cgroup", "task/cgroup", "cgroup/v2", "select/cons_tres", "gres/gpu"} <= need
    assert missing_plugins(need, version) == set(), f"{os_name}: Slurm {version} has no {missing_plugins(need, version)}"


def test_the_table_tells_the_two_builds_apart() -> None:
    """Not a table that accepts anything: 21.08.5 lacks cgroup/v2, 23.11.4 lacks the none files."""
    assert missing_plugins({"cgroup/v2", "proctrack/cgroup"}, "21.08.5") == {"cgroup/v2"}
    assert missing_plugins({"cgroup/v2", "accounting_storage/none", "mpi/none"}, "23.11.4") == set()
    assert missing_plugins({"select/cons_res"}, "23.11.4") == {"select/cons_res"}  # removed in 23.02
