"""Slurm accounting on the Slurm test bed: Debian's slurmdbd on Debian's MariaDB, next to the
bed's slurmctld, configured by gpuforge's rendered files and brought up in the order and by the
scripts of the head's slurm-accounting phase (bootstrap/templates/phases/slurm-accounting.sh.j2):

1. slurmctld and the slurmds are up first (the slurm phase runs before the accounting phase);
2. MariaDB with the rendered drop-in (90-gpuforge.cnf);
3. `gpuforge-slurm-accounting dbd-conf` writes slurmdbd.conf from the rendered slurmdbd.conf.in and
   the password on stdin (the phase pipes `ssm_get` into it; the bed pipes its own random password);
4. `gpuforge-slurm-accounting database` makes the database user; slurmdbd starts;
5. `gpuforge-slurm-accounting wait`, then `cluster`; slurmctld starts; then `register`: team
   accounts, users, GrpTRES (gres/gpu exists in the database once slurmctld has registered);
6. `gpuforge-slurm-users` makes the teams' users (run once: the bed's hosts share this machine's
   /etc/passwd, see tests/SUBSTITUTIONS.md).

What differs from the head, and why (each row is in tests/SUBSTITUTIONS.md): daemons run as root
and are started directly, not by systemd (no systemd on this machine); MariaDB's datadir, socket,
pid file and port and slurmdbd's port are the bed's own (other beds may run beside this one); the
admin client names the bed's socket; slurmdbd runs under its own UTS namespace with the
controller's name (DbdHost must be the host's name), as slurmctld does.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpuforge.bootstrap.slurm import (
    ACCOUNTING_SCRIPT,
    USERS_SCRIPT,
    SlurmAccounting,
    SlurmLayout,
    render_accounting,
    render_users,
)
from gpuforge.core.profiles import SlurmPartition
from gpuforge.core.scheduler import SlurmAccount, SlurmUser
from tests.slurm.slurmbed import CONTROLLER, SlurmBed, _kill, _sh, _wait_file, slurm_missing

ACCT_DAEMONS = ("slurmdbd", "sacctmgr", "sacct", "mariadbd", "mariadb-install-db", "mysql", "runuser")

# Two teams with one user each; UIDs far above any this machine hands out.
ACCOUNTS = (SlurmAccount("gfacct-vision", 16, "cc-4120"), SlurmAccount("gfacct-search", 8, "cc-3310"))
USERS = (
    SlurmUser("gfacct-ana", 42101, "gfacct-vision", gpu_limit=12),
    SlurmUser("gfacct-bo", 42102, "gfacct-search"),
)


def acct_missing() -> str | None:
    why = slurm_missing()
    if why:
        return why
    absent = [d for d in ACCT_DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    if absent:
        return f"missing {', '.join(absent)} (scripts/setup.sh --with-test-hosts installs slurmdbd and mariadb-server)"
    return None


@dataclass
class AcctBed(SlurmBed):
    accounts: tuple[SlurmAccount, ...] = ACCOUNTS
    users: tuple[SlurmUser, ...] = USERS
    dbd_pid: int | None = None
    mysqld: subprocess.Popen[bytes] | None = None
    created_users: list[str] = field(default_factory=list)
    registered: str = ""

    @property
    def dbd_port(self) -> int:
        return self.port + 1

    @property
    def mysql_port(self) -> int:
        return self.port + 2

    @property
    def mysql_socket(self) -> Path:
        return self.root / "mysql" / "mysqld.sock"

    def layout(self) -> SlurmLayout:
        base = super().layout()
        return dataclasses.replace(
            base,
            paths=dataclasses.replace(base.paths, conf_dir=str(self.root / "etc")),
            # The bed's exclusive partition (whole nodes) and a shared one for jobs on part of a node.
            partitions=(*base.partitions, SlurmPartition(name="shared", default=False, exclusive=False)),
            accounting=SlurmAccounting(
                embedded=True,
                dbd_port=self.dbd_port,
                storage_port=self.mysql_port,
                accounts=self.accounts,
                users=self.users,
                mysql_admin=f"mysql --socket={self.mysql_socket} -u root",
                mysql_datadir=str(self.root / "mysql" / "data"),
            ),
        )

    # -- lifecycle: the head's order. slurmctld starts last: with AccountingStorageEnforce=associations,
    # Slurm 22.05's slurmctld refuses to start while slurmdbd is down and it has no association state
    # ("fatal: slurmdbd and/or database must be up at slurmctld start time", seen on this bed), so
    # the head's slurm phase leaves slurmctld to the slurm-accounting phase, which starts it once
    # slurmdbd answers and the cluster is registered.

    _deferred: bool = False

    def _slurmctld(self) -> None:
        if not self._deferred:
            super()._slurmctld()

    def _slurmd(self, i: int) -> None:
        if not self._deferred:
            super()._slurmd(i)

    def _up(self) -> None:
        self._deferred = True
        try:
            super()._up()  # munged, files, replay shims; slurmctld and slurmd deferred
        finally:
            self._deferred = False
        # Jobs run as the teams' users: they reach munged's socket and read slurm.conf here.
        for d in (self.tb.root, self.root, self.root / "munge", self.root / "etc"):
            d.chmod(0o755)
        (self.root / "out").mkdir()
        (self.root / "out").chmod(0o1777)
        layout = self.layout()
        files = {**render_accounting(layout), **render_users(layout)}
        for rel in (ACCOUNTING_SCRIPT, USERS_SCRIPT):
            path = self.script(rel)
            path.write_text(files[rel])
            path.chmod(0o755)
        self._users()
        self._mariadb(files)
        self.accounting("dbd-conf", stdin=secrets.token_hex(16) + "\n")
        self.accounting("database")
        self.start_slurmdbd()
        self.accounting("wait", timeout=150)
        self.registered = self.accounting("cluster")
        self._slurmctld()
        self.registered += self.accounting("register", timeout=150)
        for h in self.tb.hosts:
            self._slurmd(h.index)

    def script(self, rel: str) -> Path:
        return self.root / "bin" / Path(rel).name

    def accounting(self, what: str, stdin: str | None = None, timeout: float = 60) -> str:
        res = subprocess.run([str(self.script(ACCOUNTING_SCRIPT)), what], input=stdin, capture_output=True, check=False,
                             text=True, timeout=timeout, env={**os.environ, **self.env})  # fmt: skip
        if res.returncode != 0:
            raise RuntimeError(f"gpuforge-slurm-accounting {what}: rc {res.returncode}: {res.stderr}{self.log_tail()}")
        return res.stdout

    def _users(self) -> None:
        out = _sh(str(self.script(USERS_SCRIPT))).stdout
        self.created_users = [line.split()[2] for line in out.splitlines() if line.startswith("created user ")]

    def _mariadb(self, files: dict[str, str]) -> None:
        d = self.root / "mysql"
        (d / "data").mkdir(parents=True)
        # The rendered drop-in, then what this bed changes (later lines win in one [mysqld] group).
        cnf = d / "my.cnf"
        dropin = files["etc/mysql/mariadb.conf.d/90-gpuforge.cnf"]
        cnf.write_text(
            dropin + f"socket = {self.mysql_socket}\npid-file = {d}/mysqld.pid\nlog-error = {self.root}/log/mariadb.log\n"
            "user = root\n"
        )
        _sh("mariadb-install-db", f"--defaults-file={cnf}", "--auth-root-authentication-method=socket", timeout=120)
        self.mysqld = subprocess.Popen(["mariadbd", f"--defaults-file={cnf}"], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip

    def start_slurmdbd(self) -> None:
        dbd_conf = self.root / "etc" / "slurmdbd.conf"
        # the directory systemd makes for the packaged unit's User= (RuntimeDirectory=slurmdbd; tests/SUBSTITUTIONS.md)
        pidfile = Path(self.layout().paths.slurmdbd_pidfile)
        pidfile.parent.mkdir(exist_ok=True)
        pidfile.unlink(missing_ok=True)
        # slurmdbd reads slurmdbd.conf next to slurm.conf (SLURM_CONF's directory).
        _sh("unshare", "--uts", "sh", "-c", f"hostname {CONTROLLER} && exec slurmdbd", env=self.env)
        self.dbd_pid = int(_wait_file(pidfile, "slurmdbd", self.root / "log" / "slurmdbd.log"))
        assert dbd_conf.stat().st_mode & 0o077 == 0, "slurmdbd.conf must be private to its user"

    def stop_slurmdbd(self) -> None:
        if self.dbd_pid is not None:
            _kill(self.dbd_pid)
            self.dbd_pid = None

    def down(self) -> None:
        self.stop_slurmdbd()
        try:
            super().down()
        finally:
            if self.mysqld is not None:
                self.mysqld.terminate()
                try:
                    self.mysqld.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.mysqld.kill()
                    self.mysqld.wait(timeout=10)
                self.mysqld = None
            for name in self.created_users:
                _sh("userdel", "--remove", name, check=False)
            self.created_users.clear()

    # -- clients

    def as_user(self, user: str, *args: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _sh("runuser", "-u", user, "--", *args, check=check, timeout=timeout, env=self.env)

    def wait_until(self, what: str, predicate: object, timeout_s: float = 60) -> object:
        """Poll `predicate()` until it returns something true; bounded."""
        assert callable(predicate)
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(1)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; last {last!r}{self.log_tail()}")

    def log_tail(self) -> str:
        return "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                       for p in sorted((self.root / "log").glob("*")) if p.is_file())  # fmt: skip
