"""A real Slurm cluster on the validate test bed: Debian's slurmctld, slurmd and munged on
network-namespace hosts, configured by gpuforge's own templates (bootstrap/slurm.py).

Built on tests/validate/testbed.py (a namespace per host with its own sshd, bridge with a
blackhole route, per-process names). On top of it:
- one munged with this bed's own key and socket (AuthInfo=socket=...), shared by every host
  (munge talks over a Unix socket; the key is the cluster's, as on a real cluster);
- slurmctld in the root network namespace on the bridge address, under its own UTS namespace so
  its hostname is the controller's name, on a port of its own (per-process);
- a slurmd per host, entered into that host's sshd namespaces (nsenter: network, UTS, mount),
  so it answers to the host's name and address and sees the same replayed GPU tools as SSH does;
- per host, a copy of the replay shims with a `scenario` file, bind-mounted over /usr/local/bin:
  `set_scenario` flips what nvidia-smi replays for SSH sessions and Slurm tasks alike.

The stack's rendered files with its plugins: proctrack/cgroup, task/cgroup,task/affinity and a
cgroup.conf with ConstrainCores/Devices/RAMSpace=yes; each host's slurmd gets its own subtree of
this machine's cgroup v1 hierarchies, bind-mounted where slurmd looks (/sys/fs/cgroup/<name>).
Everything this bed changes, and why, is listed in tests/SUBSTITUTIONS.md (rows "slurm bed"):
cgroup/v1 (this kernel) for cgroup/v2, Debian's 22.05 for Ubuntu's 23.11, daemons started by
hand instead of through their units, CPUs/RealMemory, GPU stand-ins (c 195:N, no driver), paths,
ports, the health-check wrapper. slurmd runs configless (--conf-server), as on a stack's GPU nodes.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpuforge.bootstrap.slurm import SlurmLayout, SlurmPaths, render_slurm
from gpuforge.core.profiles import SlurmHealthCheck, SlurmPartition
from tests.validate.testbed import REPLAY_DIR, Testbed, missing_requirements

FIXTURES = REPLAY_DIR.parent / "fixtures"
DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "scontrol", "sinfo", "nsenter")
CONTROLLER = "ctl"
CGROUP_HIERARCHIES = (("freezer", "freezer"), ("cpuset", "cpuset"), ("memory", "memory"), ("devices", "devices"),
                      ("systemd", "none,name=systemd"))  # fmt: skip
GPU_MAJOR = 195  # NVIDIA's character major (/dev/nvidiaN): the stand-ins open with ENXIO, no driver here


def slurm_missing() -> str | None:
    why = missing_requirements()
    if why:
        return why
    absent = [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    if absent:
        return f"missing {', '.join(absent)} (scripts/setup.sh --with-test-hosts installs slurmctld, slurmd, munge)"
    return None


def _sh(*args: str, check: bool = True, timeout: float = 30, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})  # fmt: skip


@dataclass
class SlurmBed:
    n: int = 3
    scenarios: dict[int, str] = field(default_factory=dict)  # host index -> replay scenario
    interval_s: int = 10  # HealthCheckInterval
    tb: Testbed = field(init=False)
    pids: list[int] = field(default_factory=list)
    munged_pid: int | None = None

    def __post_init__(self) -> None:
        self.tb = Testbed(self.n)
        self.port = 20000 + os.getpid() % 20000  # slurmctld listens in the root namespace: one port per run
        self.root = self.tb.root / "slurm"

    # -- the environment a Slurm client needs here

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.root / "etc" / "slurm.conf")}

    @property
    def controller_addr(self) -> str:
        return f"{self.tb.net}.254"  # the bridge's address in the root namespace

    def layout(self) -> SlurmLayout:
        names = tuple(h.name for h in self.tb.hosts)
        return SlurmLayout(
            cluster_name="gfbed",
            controller=CONTROLLER,
            controller_addr=self.controller_addr,
            node_names=names,
            # One rank per GPU (8) for NCCL through srun needs 8 CPUs a node; this machine has 2.
            # config_overrides: slurmctld takes slurm.conf's figures and drains no node for having
            # fewer (slurm.conf(5): "intended for testing"). Stacks never render it.
            cpus=8,
            slurmd_parameters="config_overrides",
            real_memory_mb=500,
            gpu_type="a100",
            gpus_per_node=8,
            gres_mode="files",
            gpu_device_prefix=str(self.root / "dev" / "nvidia"),
            partitions=(SlurmPartition(name="train", default=True, max_time="INFINITE", exclusive=True),),
            # model_construct: the profile model keeps production intervals >= 30 s; the bed wants 10 s
            health_check=SlurmHealthCheck.model_construct(
                interval_s=self.interval_s, node_state="ANY", max_drained_percent=50
            ),
            switch_name="gfbed-pg",
            cgroup_plugin="cgroup/v1",  # this machine's kernel mounts v1 hierarchies only
            paths=SlurmPaths(
                slurm_user="root",
                slurmctld_port=self.port,
                slurmd_port=6818,  # each slurmd has its own network namespace
                state_save=str(self.root / "state"),
                slurmd_spool=str(self.root / "spool" / "%n"),
                log_dir=str(self.root / "log"),
                run_dir=str(self.root / "run"),
                munge_socket=str(self.root / "munge" / "munge.socket.2"),
                health_check_program=str(self.root / "bin" / "health-check"),
            ),
            node_addrs={h.name: h.ip for h in self.tb.hosts},
        )

    # -- lifecycle

    def up(self) -> SlurmBed:
        try:
            self.tb.up()
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def _up(self) -> None:
        for sub in ("etc", "state", "spool", "log", "run", "munge", "bin", "dev"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for g in range(8):  # stand-ins for /dev/nvidiaN (c 195:N): slurmd drops a GPU gres without File=,
            # and ConstrainDevices fences each by its own device number
            os.mknod(self.root / "dev" / f"nvidia{g}", 0o666 | stat.S_IFCHR, os.makedev(GPU_MAJOR, g))
        for h in self.tb.hosts:
            (self.root / "spool" / h.name).mkdir()
        for rel, text in render_slurm(self.layout()).items():
            (self.root / "etc" / Path(rel).name).write_text(text)
        # The bed's hosts share one /tmp, where PMIx puts /tmp/spmix_appdir_<uid>_<step> for each
        # node's part of a step: the second node's "File exists" aborts the launch. Each host gets
        # its own directory at one path (bind-mounted in its namespace, like a real node's /tmp).
        (self.root / "pmix").mkdir()
        (self.root / "etc" / "mpi.conf").write_text(f"PMIxCliTmpDirBase={self.root}/pmix\n")
        self._health_wrapper()
        self._munged()
        for h in self.tb.hosts:
            self._replay(h.index, self.scenarios.get(h.index, "h100-590"))
        self._slurmctld()
        for h in self.tb.hosts:
            self._slurmd(h.index)

    def _munged(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))  # the cluster's key, made for this bed
        key.chmod(0o400)
        (self.root / "munge").chmod(0o700)
        pidfile = self.root / "munge" / "munged.pid"
        _sh("munged", "--force", f"--socket={self.root}/munge/munge.socket.2", f"--key-file={key}",
            f"--pid-file={pidfile}", f"--log-file={self.root}/log/munged.log",
            f"--seed-file={self.root}/munge/seed")  # fmt: skip
        self.munged_pid = int(_wait_file(pidfile, "munged"))

    def _slurmctld(self) -> None:
        conf = self.env["SLURM_CONF"]
        # the directory systemd makes for the packaged unit's User= (RuntimeDirectory=slurmctld; tests/SUBSTITUTIONS.md)
        pidfile = Path(self.layout().paths.slurmctld_pidfile)
        pidfile.parent.mkdir(exist_ok=True)
        _sh("unshare", "--uts", "sh", "-c", f"hostname {CONTROLLER} && exec slurmctld -f {conf}", env=self.env)
        self.pids.append(int(_wait_file(pidfile, "slurmctld", self.root / "log" / "slurmctld.log")))

    def _slurmd(self, i: int) -> None:
        h = self.tb.hosts[i - 1]
        assert h.sshd_pid is not None
        # `ip netns exec` remounted /sys for the namespace, without the cgroup hierarchies. The
        # rendered proctrack/cgroup and task/cgroup (ConstrainDevices=yes) need them: this host's
        # kernel has the v1 ones (cgroup/v1 here, where stacks name cgroup/v2: SUBSTITUTIONS.md).
        # Each host gets its own subtree of every hierarchy at the mount point slurmd looks at, so
        # two slurmd of one job never share a job's cgroup.
        tag = self._cgroup_tag(h.name)
        steps = []
        for d, o in CGROUP_HIERARCHIES:
            steps += [f"mkdir -p /sys/fs/cgroup/{d}", f"mount -t cgroup -o {o} cgroup /sys/fs/cgroup/{d}",
                      f"mkdir -p /sys/fs/cgroup/{d}/{tag}"]  # fmt: skip
            if d == "cpuset":  # a new cpuset has no CPUs or memory nodes until given its parent's
                steps += [f"cat /sys/fs/cgroup/{d}/cpuset.cpus >/sys/fs/cgroup/{d}/{tag}/cpuset.cpus",
                          f"cat /sys/fs/cgroup/{d}/cpuset.mems >/sys/fs/cgroup/{d}/{tag}/cpuset.mems"]  # fmt: skip
            steps.append(f"mount --bind /sys/fs/cgroup/{d}/{tag} /sys/fs/cgroup/{d}")
        mounts = "mount -t tmpfs cgroup /sys/fs/cgroup && " + " && ".join(steps)
        _sh("nsenter", "-t", str(h.sshd_pid), "-m", "sh", "-c", f"mountpoint -q /sys/fs/cgroup || {{ {mounts}; }}")
        (h.dir / "pmix").mkdir(exist_ok=True)
        _sh("nsenter", "-t", str(h.sshd_pid), "-m", "mount", "--bind", str(h.dir / "pmix"), str(self.root / "pmix"))
        # Configless, as stacks run it (bootstrap slurm phase: --conf-server): slurmd fetches
        # slurm.conf and the rest from slurmctld into its spool's conf-cache. Before it has them it
        # knows only munged's default socket, so this host sees the bed's munge directory there.
        # (/run/munge is munge's own directory; created empty when missing, and left.)
        Path("/run/munge").mkdir(exist_ok=True)
        _sh("nsenter", "-t", str(h.sshd_pid), "-m", "mount", "--bind", str(self.root / "munge"), "/run/munge")
        # slurmd links /run/slurm/conf to its conf-cache, where a node's scontrol/srun find the files
        # (read_config.c _establish_config_source): each host its own /run/slurm, as on a node
        # (the machine's /run/slurm is made empty when missing, and left).
        (h.dir / "run-slurm").mkdir(exist_ok=True)
        Path("/run/slurm").mkdir(exist_ok=True)
        _sh("nsenter", "-t", str(h.sshd_pid), "-m", "mount", "--bind", str(h.dir / "run-slurm"), "/run/slurm")
        _sh("nsenter", "-t", str(h.sshd_pid), "-n", "-u", "-m", "slurmd", "--conf-server",
            f"{self.controller_addr}:{self.port}", "-N", h.name,
            env={"PATH": "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})  # fmt: skip
        self.pids.append(int(_wait_file(self.root / "run" / f"slurmd-{h.name}.pid", f"slurmd {h.name}",
                                        self.root / "log" / f"slurmd-{h.name}.log")))  # fmt: skip

    def _cgroup_tag(self, host: str) -> str:
        return f"gfbed-{os.getpid()}-{host}"

    def _remove_cgroups(self) -> None:
        """This bed's subtrees of the machine's cgroup hierarchies, deepest first (bounded)."""
        for d, _ in CGROUP_HIERARCHIES:
            for h in self.tb.hosts:
                top = Path("/sys/fs/cgroup") / d / self._cgroup_tag(h.name)
                if not top.is_dir():
                    continue
                subs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
                for sub in [*subs, top]:
                    for _ in range(20):
                        try:
                            sub.rmdir()
                            break
                        except OSError:
                            time.sleep(0.1)

    def _replay(self, i: int, scenario: str) -> None:
        """This host's own copy of the replay shims, with its scenario, over /usr/local/bin."""
        h = self.tb.hosts[i - 1]
        mine = h.dir / "replay"
        shutil.copytree(REPLAY_DIR, mine, ignore=shutil.ignore_patterns("__pycache__"))
        (h.dir / "fixtures").symlink_to(FIXTURES)  # _replay.py finds ../fixtures of the mount's source
        (mine / "scenario").write_text(scenario + "\n")
        assert h.sshd_pid is not None
        _sh("nsenter", "-t", str(h.sshd_pid), "-m", "mount", "--bind", str(mine), "/usr/local/bin")

    def set_scenario(self, i: int, scenario: str) -> None:
        (self.tb.hosts[i - 1].dir / "replay" / "scenario").write_text(scenario + "\n")

    def _health_wrapper(self) -> None:
        """The HealthCheckProgram: slurmd runs it with SLURMD_NODENAME and little else, so it sets
        PATH and SLURM_CONF itself. It acts only while the `enabled` flag file exists."""
        # The hosts' /root is the test bed's empty home (testbed.py), which hides an interpreter that
        # lives under /root (pyenv): run gpuforge with the system Python 3 and this environment's
        # packages instead (same 3.11 ABI as the venv here), as a site directory: its .pth files
        # map the gpuforge.* names onto the repository's folders (the editable install).
        site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
        inv = self.health_inventory
        script = self.root / "bin" / "health-check"
        race = self.root / "bin" / "race"
        race.mkdir(parents=True, exist_ok=True)
        # The one interleaving a race test needs, made certain (SUBSTITUTIONS.md): while `race/on`
        # exists, each node's first sinfo asks the real sinfo, then holds its answer (bounded, 20 s)
        # until every node has its own, so every node has read before any can drain. Otherwise
        # (and every later call) the real sinfo answers directly.
        shim = race / "sinfo"
        shim.write_text(
            "#!/bin/sh\n"
            f"race={race}\n"
            'if [ -e "$race/on" ] && [ ! -e "$race/read-$SLURMD_NODENAME" ]; then\n'
            '  out=$(/usr/bin/sinfo "$@"); rc=$?\n'
            '  : >"$race/read-$SLURMD_NODENAME"; i=0\n'
            f'  while [ "$(ls "$race" | grep -c "^read-")" -lt {self.n} ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done\n'
            '  printf "%s\\n" "$out"; exit $rc\n'
            "fi\n"
            'exec /usr/bin/sinfo "$@"\n'
        )
        shim.chmod(0o755)
        script.write_text(
            "#!/bin/sh\n"
            f"export PATH={race}:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
            f"export SLURM_CONF={self.env['SLURM_CONF']}\n"
            f"[ -e {self.root}/bin/enabled ] || exit 0\n"
            f"exec /usr/bin/python3 -c 'import site, sys; site.addsitedir(\"{site}\"); from gpuforge.cli import main; "
            "sys.argv[0] = \"gpuforge\"; main()' "
            f"health-check --node \"$SLURMD_NODENAME\" --inventory {inv} --checks gpu "
            f"--max-drained-percent 50 --log {self.root}/log/health-check.jsonl\n"
        )
        script.chmod(0o755)

    @property
    def health_inventory(self) -> Path:
        """What the health check expects of each node (its instance type): tests rewrite it."""
        return self.root / "health-inventory.json"

    def enable_health_check(self, on: bool = True) -> None:
        flag = self.root / "bin" / "enabled"
        if on:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def force_race(self, on: bool = True) -> None:
        """Hold each node's first sinfo of the health check until every node has read (see above)."""
        race = self.root / "bin" / "race"
        for f in race.glob("read-*"):
            f.unlink()
        if on:
            (race / "on").touch()
        else:
            (race / "on").unlink(missing_ok=True)

    def down(self) -> None:
        for pid in reversed(self.pids):
            _kill(pid)
        self.pids.clear()
        if self.munged_pid is not None:
            _kill(self.munged_pid)
            self.munged_pid = None
        self.tb.down()  # also kills whatever is left in the hosts' namespaces and removes the directory
        self._remove_cgroups()

    # -- clients

    def client(self, *args: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _sh(*args, check=check, timeout=timeout, env=self.env)

    def states(self) -> dict[str, tuple[str, str]]:
        out = self.client("sinfo", "--noheader", "--Node", "--format=%N|%T|%E").stdout
        found: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            name, state, reason = [*line.split("|", 2), "", ""][:3]
            found.setdefault(name.strip(), (state.strip(), reason.strip()))
        return found

    def wait_for(self, what: str, predicate: object, timeout_s: float = 90) -> dict[str, tuple[str, str]]:
        """Poll sinfo until `predicate(states)` holds; bounded."""
        assert callable(predicate)
        deadline = time.monotonic() + timeout_s
        states: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline:
            try:
                states = self.states()
            except subprocess.CalledProcessError:
                states = {}
            if predicate(states):
                return states
            time.sleep(1)
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted((self.root / "log").glob("*")))
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; last states {states}\n{logs}")


def _wait_file(path: Path, what: str, log: Path | None = None) -> str:
    for _ in range(150):  # daemons fork, then write their pid file: 15 s at most
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.1)
    tail = log.read_text()[-1500:] if log is not None and log.is_file() else ""
    raise RuntimeError(f"{what} did not start (no {path}): {tail}")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
