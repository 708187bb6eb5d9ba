"""Typed, validated settings of the scheduler layer (`gpuforge:scheduler`), built from the flat
stack config keys and the profile's `scheduler.slurm` section.

Called by core/config.py's `parse_stack_config`, so a stack that asks for Slurm where it
cannot work fails before any resource is declared, with one `error:` line naming the key.
Pure data: no Pulumi, so bootstrap and the CLI may import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from gpuforge.common.errors import ConfigError
from gpuforge.core.catalog import GpuModel, InstanceType
from gpuforge.core.limits import limit
from gpuforge.core.profiles import Profile, SlurmHealthCheck, SlurmPartition
from gpuforge.core.slurmhead_sizes import HEAD_DB_INSTANCE_TYPE, HEAD_DB_VOLUME_GIB, HEAD_DB_VOLUME_TYPE, HEAD_ROOT_GIB

NS = "gpuforge"
# RealMemory is 95 % of the memory EC2 lists: the kernel and firmware keep some, and a node whose
# slurmd finds less than RealMemory is drained as invalid (LowRealMemory). stackhpc's
# ansible-role-openhpc applies the same 0.95 factor to what `slurmd -C` reports (PR #93, "can
# cause slurm to drain the nodes with: LowRealMemory"). Unverified on a p4de: check `slurmd -C`.
REAL_MEMORY_FRACTION = 0.95


# Base images whose archive Slurm cannot run the rendered cgroup plugins. Ubuntu 22.04 and 24.04
# boot the unified cgroup v2 hierarchy, so proctrack/cgroup and task/cgroup need the cgroup/v2
# plugin (cgroup.conf CgroupPlugin=cgroup/v2). SchedMD src/plugins/cgroup/Makefile.am: tag
# slurm-21-08-5-1 (2558f205627a) has `SUBDIRS = common v1`; slurm-23-11-4-1 (924dce610761) adds v2
# (`if WITH_BPF`/`if WITH_DBUS`). Jammy's archive has 21.08.5 (bootstrap/versions.yaml), so a
# Slurm stack needs noble (23.11.4). tests/slurm/test_slurm_plugins.py checks the rendered plugin
# set against each version's plugin files. (Building a pinned SchedMD release for 22.04 and
# serving it from the stack bucket is the alternative; not built: issue 19 note.)
SLURM_OS_REFUSED = {"ubuntu-22.04": "Ubuntu 22.04's Slurm 21.08.5 has no cgroup/v2 plugin (cgroup_v1.so only) and 22.04 "
                                    "boots the cgroup v2 hierarchy, so slurmd's proctrack/cgroup cannot start"}


@dataclass(frozen=True)
class SlurmAccount:
    """A team's Slurm account: GrpTRES=gres/gpu=<gpu_quota> binds every job charged to it."""

    name: str
    gpu_quota: int
    organization: str  # the team's cost centre (sacctmgr Organization)


@dataclass(frozen=True)
class SlurmUser:
    """A team member: the same UID on the head and every node; `gpu_limit` is the user's own
    GrpTRES=gres/gpu under the team's account (None: only the team's quota binds)."""

    name: str
    uid: int
    account: str
    gpu_limit: int | None = None


@dataclass(frozen=True)
class DbVolume:
    """The embedded MariaDB's EBS volume (encrypted, in the head's AZ, retained on delete)."""

    type: Literal["gp3"] = HEAD_DB_VOLUME_TYPE
    size_gib: int = HEAD_DB_VOLUME_GIB
    existing_id: str | None = None  # gpuforge:accountingDbVolumeId: adopt this volume (Pulumi import)


@dataclass(frozen=True)
class AccountingSettings:
    """slurmdbd on the head, storing into MariaDB on the head (embedded, the default) or into an
    existing MySQL-compatible endpoint (gpuforge:accountingDbEndpoint). The password is an SSM
    SecureString, made at deploy time for the embedded database (components/slurmhead.py). The
    embedded database lives on an EBS volume of its own (`volume`), kept when the head goes."""

    embedded: bool
    host: str
    port: int
    user: str
    password_parameter: str
    accounts: tuple[SlurmAccount, ...]
    users: tuple[SlurmUser, ...]
    volume: DbVolume | None = None  # the embedded database's volume; None with an existing database


@dataclass(frozen=True)
class SlurmSettings:
    cluster_name: str  # ClusterName: lowercase, what accounting and sacct know the cluster as
    head_name: str  # the head node's name (SlurmctldHost) and its Name tag
    head_instance_type: str
    node_names: tuple[str, ...]
    cpus: int  # CPUs= of each GPU node (vCPUs, as EC2 counts them)
    cores: int | None  # physical cores (EC2 VCpuInfo.DefaultCores); None when the catalog lacks it
    threads_per_core: int | None  # VCpuInfo.DefaultThreadsPerCore
    real_memory_mb: int
    gpu_type: str  # the gres type: the GPU family in lowercase, a substring of NVML's device name
    gpus_per_node: int
    partitions: tuple[SlurmPartition, ...]
    health_check: SlurmHealthCheck
    switch_name: str  # topology.conf: the cluster placement group is one switch
    munge_parameter: str  # SSM SecureString with the munge key (base64), made at deploy time
    # SSM Strings: "private-ip name" per line, head and GPU nodes, written at deploy time; as many
    # as the names need at the standard tier's 4,096 characters (hosts_chunks), read in order
    hosts_parameters: tuple[str, ...]
    hosts_chunks: tuple[tuple[str, ...], ...]  # the names each of hosts_parameters lists
    accounting: AccountingSettings | None = None
    head_root_gib: int = HEAD_ROOT_GIB  # the database is never on it (AccountingSettings.volume)


# Parameter Store quotas (AWS General Reference, "AWS Systems Manager endpoints and quotas"):
# a standard-tier parameter value is at most 4 KB; one line per node passed it at about 100-124
# nodes (issue 19 finding 7). The names are known when the stack is declared, the addresses only
# once the instances exist: chunks are cut by each line's longest form, so they hold whatever
# addresses come.
SSM_STANDARD_VALUE_MAX = limit("ssm_standard_parameter_chars").value  # core/aws_limits.yaml
_LONGEST_ADDRESS = len("255.255.255.255")


def hosts_line_max(name: str) -> int:
    return _LONGEST_ADDRESS + 1 + len(name)


def hosts_chunks(names: tuple[str, ...], limit: int = SSM_STANDARD_VALUE_MAX) -> tuple[tuple[str, ...], ...]:
    """`names` in order, cut into runs whose "ip name" lines (joined by newlines) fit `limit`
    characters whatever the private IPs turn out to be."""
    chunks: list[tuple[str, ...]] = []
    run: list[str] = []
    size = 0
    for name in names:
        line = hosts_line_max(name)
        if run and size + 1 + line > limit:
            chunks.append(tuple(run))
            run, size = [], 0
        size += line + (1 if run else 0)
        run.append(name)
    if run:
        chunks.append(tuple(run))
    return tuple(chunks)


def gres_type(gpu: GpuModel) -> str:
    """The gres Type of a GPU: its family in lowercase, a substring of NVML's device name
    (gres.conf AutoDetect=nvml matches Type against it)."""
    return gpu.family.lower()


def gpu_gres(instance_type: str) -> str | None:
    """`gpu:<type>:<count>`, the Gres= a node of this instance type has in slurm.conf (and what a
    job asks for to get all its GPUs); None when the catalog does not know the type."""
    from gpuforge.core.catalog import load_catalog

    catalog = load_catalog()
    try:
        inst = catalog.instance(instance_type)
    except KeyError:
        return None
    return f"gpu:{gres_type(catalog.gpu(inst))}:{inst.gpu_count}" if inst.gpu_count else None


def slurm_settings(
    raw: Any, stack: str, profile: Profile, instance: InstanceType, gpu: GpuModel, node_names: tuple[str, ...]
) -> SlurmSettings | None:
    """`raw` is the RawStackConfig; None when the stack asks for no scheduler."""
    if raw.scheduler == "none":
        for k in ACCOUNTING_KEYS:
            if getattr(raw, k) is not None:
                raise ConfigError(f"{NS}:{k}", "is Slurm accounting's, and gpuforge:scheduler is none",
                                  "remove it, or set gpuforge:scheduler: slurm")  # fmt: skip
        return None
    key = f"{NS}:scheduler"
    if raw.kubernetes == "eks":
        raise ConfigError(
            key,
            "'slurm' with kubernetes 'eks': the EKS managed node group owns the GPU nodes, Slurm would own them too",
            "pick one: scheduler slurm with kubernetes none, or kubernetes eks with scheduler none",
        )
    if raw.autoscaling:
        raise ConfigError(
            key,
            "'slurm' with autoscaling: slurm.conf lists every node by name, an Auto Scaling group names none",
            "set autoscaling: false (a fixed nodeCount), or scheduler: none",
        )
    slurm = profile.scheduler.slurm if profile.scheduler else None
    if slurm is None:
        raise ConfigError(
            key,
            f"profile {profile.name} ({profile.bootstrap.recipe}) has no Slurm layout (scheduler.slurm)",
            "use a training profile (cv-training, risk-sim) or scheduler: none",
        )
    if raw.os in SLURM_OS_REFUSED:
        raise ConfigError(
            f"{NS}:os",
            f"'{raw.os}' with scheduler slurm: {SLURM_OS_REFUSED[raw.os]}",
            "set gpuforge:os: ubuntu-24.04 (Slurm 23.11.4 with cgroup/v2), or scheduler: none",
        )
    chunks = hosts_chunks((f"{stack}-head", *node_names))
    accounting = accounting_settings(raw, stack)
    embedded = accounting.embedded
    return SlurmSettings(
        cluster_name=stack.lower(),
        head_name=f"{stack}-head",
        head_instance_type=HEAD_DB_INSTANCE_TYPE if embedded else slurm.head_instance_type,
        node_names=node_names,
        cpus=instance.vcpus,
        cores=instance.cores,
        threads_per_core=instance.threads_per_core,
        real_memory_mb=int(instance.memory_gib * 1024 * REAL_MEMORY_FRACTION),
        gpu_type=gres_type(gpu),
        gpus_per_node=instance.gpu_count,
        partitions=slurm.partitions,
        health_check=slurm.health_check,
        switch_name=f"{stack}-pg",
        munge_parameter=f"/gpuforge/{stack}/slurm/munge-key",
        hosts_parameters=tuple(f"/gpuforge/{stack}/slurm/hosts/{i}" for i in range(len(chunks))),
        hosts_chunks=chunks,
        accounting=accounting,
    )


ACCOUNTING_KEYS = ("accountingDbEndpoint", "accountingDbPasswordParameter", "accountingDbVolumeId")
_ENDPOINT = re.compile(r"^(?P<host>[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(:(?P<port>\d{1,5}))?$")
_PARAMETER = re.compile(r"^/?[A-Za-z0-9_.\-/]{1,1000}$")  # SSM parameter names


def accounting_settings(raw: Any, stack: str) -> AccountingSettings:
    """The embedded MariaDB unless gpuforge:accountingDbEndpoint names an existing database, whose
    password is then the SecureString gpuforge:accountingDbPasswordParameter names. Accounts and
    users come from the team files (stacks/teams): one account per team, the quota as GrpTRES."""
    from gpuforge.core.teams import check_users_across, load_teams

    endpoint, param = raw.accountingDbEndpoint, raw.accountingDbPasswordParameter
    if (endpoint is None) != (param is None):
        given, missing = ("accountingDbEndpoint", "accountingDbPasswordParameter") if endpoint else (
            "accountingDbPasswordParameter", "accountingDbEndpoint")
        raise ConfigError(f"{NS}:{missing}", f"not set, but {NS}:{given} is",
                          "set both (an existing database: its host[:port] and the SecureString with its password), "
                          "or neither (MariaDB on the head node)")  # fmt: skip
    teams = load_teams()
    check_users_across(teams)
    accounts = tuple(SlurmAccount(t.name, t.gpu_quota, t.cost_center) for t in teams.values())
    users = tuple(SlurmUser(u.name, u.uid, t.name, u.gpu_limit) for t in teams.values() for u in t.users)
    if endpoint is None:
        volume = DbVolume(size_gib=raw.accountingDbVolumeGib, existing_id=raw.accountingDbVolumeId)
        return AccountingSettings(True, "127.0.0.1", 3306, "slurm", f"/gpuforge/{stack}/slurm/db-password",
                                  accounts, users, volume)  # fmt: skip
    if raw.accountingDbVolumeId is not None:
        raise ConfigError(f"{NS}:accountingDbVolumeId", "is the embedded database's volume, and "
                          f"{NS}:accountingDbEndpoint names an existing database",
                          "remove one of them")  # fmt: skip
    m = _ENDPOINT.fullmatch(endpoint)
    port = int(m.group("port") or 3306) if m else 0
    if m is None or not 1 <= port <= 65535:
        raise ConfigError(f"{NS}:accountingDbEndpoint", f"{endpoint!r} is not host[:port]",
                          "e.g. slurm-acct.cluster-abc.us-east-1.rds.amazonaws.com:3306")  # fmt: skip
    if not _PARAMETER.fullmatch(param):
        raise ConfigError(f"{NS}:accountingDbPasswordParameter", f"{param!r} is not an SSM parameter name",
                          "e.g. /mysite/slurm/db-password (a SecureString)")  # fmt: skip
    return AccountingSettings(False, m.group("host"), port, raw.accountingDbUser, param, accounts, users)
