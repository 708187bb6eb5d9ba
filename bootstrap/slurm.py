"""Slurm's configuration files for a stack: slurm.conf, gres.conf, topology.conf (and cgroup.conf
where the cgroup plugins run, plugstack.conf where Pyxis is), rendered from the catalog through
core/scheduler.py.

The head node carries them; slurmd and the clients fetch them from slurmctld (configless). Pure: `SlurmLayout` in, text
out, so the test bed renders the very templates a stack renders, with only its own paths, ports,
CPU/memory figures and plugins changed (tests/slurm/slurmbed.py says which and why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import jinja2
from ClusterShell.NodeSet import NodeSet

from gpuforge.core.profiles import SlurmHealthCheck, SlurmPartition
from gpuforge.core.scheduler import SlurmAccount, SlurmSettings, SlurmUser

CONF_DIR = "/etc/slurm"
# slurmdbd.conf without its StoragePass line: the head's accounting phase writes /etc/slurm/slurmdbd.conf
# (0600, SlurmUser) from this file and the password it reads from SSM, so the password is never in user data.
SLURMDBD_TEMPLATE = "slurmdbd.conf.in"
HEALTH_CHECK_PROGRAM = "/opt/gpuforge/bin/gpuforge-health-check"
HEALTH_DRAIN_PREFIX = "gpuforge-health:"  # the reason prefix the health check drains with, and resumes only

GresMode = Literal["nvml", "files"]


@dataclass(frozen=True)
class SlurmPaths:
    """Where the daemons keep state and logs, and how they reach each other. The defaults are
    Debian/Ubuntu's packaged layout (slurm-wlm: /var/spool/slurmctld, /var/log/slurm)."""

    slurm_user: str = "slurm"
    slurmctld_port: int = 6817
    slurmd_port: int = 6818
    state_save: str = "/var/spool/slurmctld"
    slurmd_spool: str = "/var/spool/slurmd"  # %n: one per node name, for several slurmd on one host
    log_dir: str = "/var/log/slurm"
    run_dir: str = "/run"
    munge_socket: str | None = None  # None: munged's default socket
    health_check_program: str = HEALTH_CHECK_PROGRAM
    conf_dir: str = CONF_DIR  # where slurm.conf and slurmdbd.conf live (the accounting script reads them)

    # Slurm 23.11.4's packaged slurmctld.service and slurmdbd.service (Debian's slurm-wlm 23.11.4-1.2,
    # Ubuntu 24.04's; SchedMD's etc/*.service.in at slurm-23-11-4-1) run the daemon as User=slurm with
    # RuntimeDirectory=<daemon>, and no PIDFile=: the pid file goes where systemd lets that user write.
    # (slurmd's unit runs it as root: its pid file may stay in run_dir.)
    @property
    def slurmctld_pidfile(self) -> str:
        return f"{self.run_dir}/slurmctld/slurmctld.pid"

    @property
    def slurmdbd_pidfile(self) -> str:
        return f"{self.run_dir}/slurmdbd/slurmdbd.pid"


@dataclass(frozen=True)
class SlurmAccounting:
    """slurmdbd on the head node, storing into MariaDB on the head (`embedded`) or into an
    existing MySQL-compatible endpoint. The password is never rendered: the head's accounting
    phase appends `StoragePass=` from SSM to slurmdbd.conf at boot."""

    embedded: bool = True
    dbd_port: int = 6819  # DbdPort (slurmdbd.conf) = AccountingStoragePort (slurm.conf)
    storage_host: str = "127.0.0.1"  # MariaDB listens on loopback only (90-gpuforge.cnf bind-address)
    storage_port: int = 3306
    storage_user: str = "slurm"
    storage_loc: str = "slurm_acct_db"
    accounts: tuple[SlurmAccount, ...] = ()
    users: tuple[SlurmUser, ...] = ()
    mysql_admin: str = "mysql"  # the embedded server's admin client (root over the unix socket)
    mysql_datadir: str = "/var/lib/mysql"  # the mount point of the database's own volume (`datadir_volume`)
    # The embedded database's datadir is a volume of its own (core/scheduler.py DbVolume): MariaDB
    # then starts only once it is mounted (the mariadb.service drop-in), never on the root volume.
    datadir_volume: bool = False


@dataclass(frozen=True)
class SlurmLayout:
    cluster_name: str
    controller: str  # SlurmctldHost name
    controller_addr: str | None  # None: the name resolves (/etc/hosts written at boot)
    node_names: tuple[str, ...]
    cpus: int
    real_memory_mb: int
    gpu_type: str
    gpus_per_node: int
    gres_mode: GresMode  # nvml: AutoDetect=nvml; files: <gpu_device_prefix>N listed
    partitions: tuple[SlurmPartition, ...]
    health_check: SlurmHealthCheck
    switch_name: str
    cgroup: bool = True  # proctrack/task cgroup plugins (+ cgroup.conf); off only where no cgroup is delegated
    # cgroup.conf CgroupPlugin: Ubuntu 24.04 boots the unified (v2) hierarchy; named, not autodetected,
    # so the plugin set is what tests/slurm/test_slurm_plugins.py checks against the package's files
    cgroup_plugin: str = "cgroup/v2"
    paths: SlurmPaths = field(default_factory=SlurmPaths)
    gpu_device_prefix: str = "/dev/nvidia"  # gres.conf File= (files mode); a test bed points it at stand-ins
    node_addrs: dict[str, str] = field(default_factory=dict)  # NodeAddr per node, where names do not resolve
    slurmd_parameters: str | None = None  # SlurmdParameters (the test bed: config_overrides)
    pyxis: bool = False  # plugstack.conf includes the nodes' plugstack.conf.d (pyxis.conf, bootstrap pyxis phase)
    cores: int | None = None  # CoresPerSocket= with Sockets inferred (EC2 publishes cores and threads, not sockets)
    threads_per_core: int | None = None
    accounting: SlurmAccounting | None = None  # None: no slurmdbd (accounting_storage/none)

    @property
    def nodeset(self) -> str:
        """The node names folded into a Slurm hostlist (cv-training-node[01-08])."""
        return str(NodeSet.fromlist(self.node_names))


def layout_for(settings: SlurmSettings, gres_mode: GresMode) -> SlurmLayout:
    """The stack's layout: the head node is the controller, its name resolves through /etc/hosts."""
    return SlurmLayout(
        cluster_name=settings.cluster_name,
        controller=settings.head_name,
        controller_addr=None,
        node_names=settings.node_names,
        cpus=settings.cpus,
        cores=settings.cores,
        threads_per_core=settings.threads_per_core,
        real_memory_mb=settings.real_memory_mb,
        gpu_type=settings.gpu_type,
        gpus_per_node=settings.gpus_per_node,
        gres_mode=gres_mode,
        partitions=settings.partitions,
        health_check=settings.health_check,
        switch_name=settings.switch_name,
        pyxis=True,
        accounting=_accounting(settings),
    )


def _accounting(settings: SlurmSettings) -> SlurmAccounting | None:
    a = settings.accounting
    if a is None:
        return None
    return SlurmAccounting(embedded=a.embedded, storage_host=a.host, storage_port=a.port, storage_user=a.user,
                           accounts=a.accounts, users=a.users, datadir_volume=a.volume is not None)  # fmt: skip


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("gpuforge.bootstrap", "templates/slurm"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render_slurm(layout: SlurmLayout, files: Sequence[str] | None = None) -> dict[str, str]:
    """`etc/slurm/<file>` -> text, for every file the layout needs (or just `files`)."""
    if not layout.node_names:
        raise ValueError("a Slurm layout needs at least one node")
    names = ["slurm.conf", "gres.conf", "topology.conf"] + (["cgroup.conf"] if layout.cgroup else [])
    names += ["plugstack.conf"] if layout.pyxis else []
    names += [SLURMDBD_TEMPLATE] if layout.accounting else []
    env = _env()
    ctx = {"l": layout, "p": layout.paths, "a": layout.accounting, "nodeset": layout.nodeset}
    return {
        f"{CONF_DIR.lstrip('/')}/{name}": env.get_template(f"{name}.j2").render(ctx)
        for name in names
        if files is None or name in files
    }


def render_accounting(layout: SlurmLayout) -> dict[str, str]:
    """The head's accounting files besides slurmdbd.conf.in: the MariaDB drop-in (embedded only)
    and the script that makes the database user and registers cluster, accounts and users."""
    a = layout.accounting
    if a is None:
        return {}
    env = _env()
    ctx = {"l": layout, "p": layout.paths, "a": a}
    files = {ACCOUNTING_SCRIPT: env.get_template("gpuforge-slurm-accounting.j2").render(ctx)}
    for unit in (HEALTH_SERVICE, HEALTH_TIMER):  # the head's accounting health, every 5 min
        files[unit] = env.get_template(unit.rsplit("/", 1)[1] + ".j2").render(ctx, script=ACCOUNTING_SCRIPT)
    if a.embedded:
        files[MARIADB_DROPIN] = env.get_template("90-gpuforge.cnf.j2").render(ctx)
    if a.embedded and a.datadir_volume:
        files[MARIADB_UNIT_DROPIN] = env.get_template("mariadb-datadir.conf.j2").render(ctx)
    return files


def render_users(layout: SlurmLayout) -> dict[str, str]:
    """The script that makes the teams' users with their UIDs, on the head and on every node."""
    a = layout.accounting
    if a is None or not a.users:
        return {}
    return {USERS_SCRIPT: _env().get_template("gpuforge-slurm-users.j2").render(a=a)}


ACCOUNTING_SCRIPT = "opt/gpuforge/bin/gpuforge-slurm-accounting"
USERS_SCRIPT = "opt/gpuforge/bin/gpuforge-slurm-users"
HEALTH_SERVICE = "etc/systemd/system/gpuforge-accounting-health.service"
HEALTH_TIMER = "etc/systemd/system/gpuforge-accounting-health.timer"
MARIADB_DROPIN = "etc/mysql/mariadb.conf.d/90-gpuforge.cnf"
# mariadb.service, not its alias mysql.service: systemd reads drop-ins under the unit's own name.
MARIADB_UNIT_DROPIN = "etc/systemd/system/mariadb.service.d/gpuforge-datadir.conf"
