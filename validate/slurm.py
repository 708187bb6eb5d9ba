"""Reach nodes through Slurm instead of SSH: `srun -w NODE` per node check, one
`srun --mpi=pmix` allocation across nodes for NCCL, and the scontrol/sinfo calls the health
check drains and resumes nodes with.

The transport runs where Slurm's client commands work (the head node, a login node, or a
test bed's controller namespace: `launcher` prefixes every command). The inventory's node names
are Slurm's NodeNames (gpuforge renders slurm.conf from the same names). Every wait is bounded:
`--immediate` bounds the wait for an allocation (a drained, down or busy node fails fast, as its
own outcome), `timeout` bounds the command on the node, and a local deadline bounds srun itself.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuforge.validate.inventory import Node
from gpuforge.validate.transport import KILL_AFTER_S, LOCAL_SLACK_S, TIMEOUT_RCS, CommandResult, Outcome, run_bounded, wrap

# srun's own failures, as Slurm 22.05 prints them (src/srun/libsrun/allocate.c, launch.c): the
# node is out of reach for this run, not a failed check.
_NO_ALLOCATION = re.compile(
    r"^srun: error: (Unable to allocate resources|.*Required node not available|.*Invalid node name"
    r"|.*Requested node configuration is not available|Unable to create step|.*Immediate execution impossible"
    r"|.*Node count specification invalid|.*Access/permission denied|.*Unable to contact slurm controller).*$",
    re.MULTILINE,
)
# srun that never reached a controller: no slurm.conf and no configless source (Slurm 22.05
# src/common/fetch_config.c: "fetch_config: DNS SRV lookup failed", then src/srun/srun.c
# "srun: fatal: Could not establish a configuration source"), or any other fatal of its own.
_SRUN_FATAL = re.compile(r"^srun: fatal: .*$", re.MULTILINE)


@dataclass(frozen=True)
class SlurmClient:
    """How to call Slurm's clients. `launcher` prefixes each command (e.g. `ssh head` or
    `ip netns exec NS`); `env` is added to the environment (e.g. SLURM_CONF)."""

    launcher: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    partition: str | None = None
    immediate_s: int = 10  # how long srun may wait for its allocation before the node counts as unavailable
    job_name: str = "gpuforge-validate"
    # NodeName -> `gpu:<type>:<count>`, what each step asks for (gres_by_node). A node missing
    # here is asked of Slurm itself (its configured Gres, sinfo %G).
    gres: Mapping[str, str] = field(default_factory=dict)


def gres_by_node(nodes: Sequence[Node]) -> dict[str, str]:
    """Each node's GPUs as Slurm names them, from the catalog by the inventory's instance type:
    under the rendered ConstrainDevices=yes a step that asks for no GPU is fenced off every GPU
    (the bed saw 0 GPUs without --gres and 8 with it), so every check would judge no GPU."""
    from gpuforge.core.scheduler import gpu_gres

    found = {n.name: gpu_gres(n.instance_type) for n in nodes if n.instance_type}
    return {name: spec for name, spec in found.items() if spec}


def _run(argv: Sequence[str], settings: SlurmClient, deadline_s: float) -> tuple[int | None, str, str, float]:
    """A client command through the launcher, with the settings' environment and a local deadline."""
    return run_bounded([*settings.launcher, *argv], deadline_s, {**os.environ, **settings.env})


_GRES_GPU = re.compile(r"(?:^|,)(gpu(?::[^:,(]+)?:\d+)")


def _gpu_gres(sinfo_g: str) -> str | None:
    """The GPU part of sinfo's %G (`gpu:a100:8(S:0-1)`, `gpu:8,nic:1`); None without GPUs."""
    m = _GRES_GPU.search(sinfo_g.strip().splitlines()[0] if sinfo_g.strip() else "")
    return m.group(1) if m else None


class SlurmTransport:
    """validate's Transport over srun: one single-task step per node check."""

    kind = "slurm"

    def __init__(self, settings: SlurmClient | None = None) -> None:
        self.settings = settings or SlurmClient()
        # One srun per node at a time: on an exclusive partition a second allocation on the same
        # node would wait behind the first and then fail --immediate.
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._gres: dict[str, str | None] = {}

    def _lock(self, node: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(node, threading.Lock())

    def gres(self, node: str) -> str | None:
        """`gpu:<type>:<count>` of a node: the client's (catalog), else Slurm's configured Gres."""
        if node in self.settings.gres:
            return self.settings.gres[node]
        with self._locks_lock:
            if node in self._gres:
                return self._gres[node]
        _, spec = self._configured_gres(node)
        with self._locks_lock:
            self._gres[node] = spec
        return spec

    def _configured_gres(self, node: str) -> tuple[bool, str | None]:
        """Slurm's own view of a node's GPUs (sinfo %G): (whether sinfo answered, `gpu:<type>:<n>` or None)."""
        rc, out, _, _ = _run(["sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%G"], self.settings, 30)
        return rc == 0, _gpu_gres(out) if rc == 0 else None

    def srun_argv(self, nodes: Sequence[str], tasks_per_node: int = 1, mpi: str | None = None) -> list[str]:
        s = self.settings
        argv = [
            "srun",
            f"--nodelist={','.join(nodes)}",
            f"--nodes={len(nodes)}",
            f"--ntasks-per-node={tasks_per_node}",
            f"--immediate={s.immediate_s}",
            f"--job-name={s.job_name}",
            "--kill-on-bad-exit=1",
            "--quiet",
        ]
        # Every GPU of every node: one request per node, so the nodes of one step must agree.
        specs = {self.gres(n) for n in nodes}
        if len(specs) == 1 and None not in specs:
            argv.append(f"--gres={specs.pop()}")
        elif None not in specs:
            # different GPU shapes in one step: --gres counts per node, so the smaller count
            argv.append(f"--gres=gpu:{min(int(str(x).rsplit(':', 1)[1]) for x in specs)}")
        if s.partition:
            argv.append(f"--partition={s.partition}")
        if mpi:
            argv.append(f"--mpi={mpi}")
        return argv

    def run(self, node: Node, command: str, timeout_s: float) -> CommandResult:
        argv = [*self.srun_argv([node.name]), "sh", "-c", wrap(command, timeout_s)]
        with self._lock(node.name):
            return self._result(node.name, command, argv, timeout_s)

    def run_allocation(self, nodes: Sequence[str], tasks_per_node: int, argv: Sequence[str], timeout_s: float,
                       *, mpi: str = "pmix", env: Mapping[str, str] | None = None) -> CommandResult:
        """One step across `nodes` (e.g. all_reduce_perf, one rank per GPU under PMIx); the
        result is reported on the first node, as the SSH path reports an mpirun on its first host."""
        exports = [f"--export=ALL,{','.join(f'{k}={v}' for k, v in env.items())}"] if env else []
        full = [*self.srun_argv(nodes, tasks_per_node, mpi), *exports,
                "timeout", "-k", f"{KILL_AFTER_S:g}", f"{timeout_s:g}", *argv]  # fmt: skip
        locks = [self._lock(n) for n in sorted(nodes)]  # sorted: no two allocations deadlock
        for lk in locks:
            lk.acquire()
        try:
            return self._result(nodes[0], " ".join(shlex.quote(a) for a in argv), full, timeout_s)
        finally:
            for lk in reversed(locks):
                lk.release()

    def _result(self, node: str, command: str, argv: list[str], timeout_s: float) -> CommandResult:
        deadline = timeout_s + self.settings.immediate_s + KILL_AFTER_S + LOCAL_SLACK_S
        rc, out, err, took = _run(argv, self.settings, deadline)
        # 124/137 from `timeout` mean the bound ran out; srun also exits 137 for tasks it killed
        # after a failed launch, in well under the bound: that is the command failing, not a timeout.
        if rc is None or (rc in TIMEOUT_RCS and took >= timeout_s):
            return CommandResult(node, command, Outcome.TIMEOUT, None, out, err, took,
                                 f"command ran past its bound ({took:.1f} s)")  # fmt: skip
        refused = _NO_ALLOCATION.search(err) or _SRUN_FATAL.search(err)
        if rc != 0 and refused and not out.strip():
            detail = "slurm: " + refused.group(0).removeprefix("srun: error: ").strip()
            if "Requested node configuration is not available" in detail:
                detail += self._gres_mismatch(node)
            return CommandResult(node, command, Outcome.UNREACHABLE, None, out, err, took, detail, "connect")
        return CommandResult(node, command, Outcome.OK, rc, out, err, took)

    def _gres_mismatch(self, node: str) -> str:
        """Why Slurm may have refused the step's shape: it asked for the GPUs of the inventory's
        instance type (the catalog), and Slurm configures this node with others. Seen with a one-GPU
        node named p5en.48xlarge in the inventory: `--gres=gpu:h200:8` against Slurm's `gpu:h200:1`."""
        asked = self.settings.gres.get(node)
        if asked is None:
            return ""
        answered, has = self._configured_gres(node)
        if not answered or has == asked:
            return ""
        return (f" (asked for --gres={asked}, the GPUs of the inventory's instance type; Slurm configures "
                f"{has or 'no GPU gres'} on {node}: a GPU missing from gres.conf or from the node, or the "
                "wrong instance_type in the inventory)")  # fmt: skip

    def close(self) -> None:
        return None


# ----------------------------------------------------------------------------- node state


@dataclass(frozen=True)
class NodeStatus:
    name: str
    state: str  # sinfo %T: idle, allocated, mixed, drained, draining, down, ...
    reason: str  # sinfo %E: "none" when there is none
    # sinfo %H: when slurmctld set the reason (its clock, whole seconds; node_mgr.c update_node
    # `reason_time = now`); None when sinfo says Unknown
    reason_time: int | None = None

    @property
    def drained(self) -> bool:
        return self.state.rstrip("*~#!%$@^-") in {"drained", "draining", "drain"} or "drain" in self.state


class SlurmError(RuntimeError):
    """A Slurm client command failed (controller unreachable, permission denied)."""


class SlurmControl:
    """The node states the health check reads and the updates it makes, via sinfo and scontrol."""

    def __init__(self, settings: SlurmClient | None = None, deadline_s: float = 30.0) -> None:
        self.settings = settings or SlurmClient()
        self.deadline_s = deadline_s

    def _call(self, argv: list[str], env: Mapping[str, str] | None = None) -> str:
        settings = self.settings
        if env:
            settings = replace(settings, env={**settings.env, **env})
        rc, out, err, _ = _run(argv, settings, self.deadline_s)
        if rc != 0:
            why = "timed out" if rc is None else f"exit {rc}"
            raise SlurmError(f"{' '.join(argv[:3])}: {why}: {err.strip()[-300:]}")
        return out

    def nodes(self) -> dict[str, NodeStatus]:
        """Every node once (sinfo prints a node once per partition). The reason comes last, as it
        may hold any character; its time as epoch seconds (SLURM_TIME_FORMAT is a strftime format,
        Slurm 22.05 src/common/parse_time.c slurm_make_time_str)."""
        out = self._call(["sinfo", "--noheader", "--Node", "--format=%N|%T|%H|%E"], {"SLURM_TIME_FORMAT": "%s"})
        found: dict[str, NodeStatus] = {}
        for line in out.splitlines():
            name, _, rest = line.partition("|")
            state, _, rest = rest.partition("|")
            when, _, reason = rest.partition("|")
            if name.strip():
                stamp = int(when.strip()) if when.strip().isdigit() else None
                found.setdefault(name.strip(), NodeStatus(name.strip(), state.strip(), reason.strip(), stamp))
        return found

    def drain(self, node: str, reason: str) -> None:
        self._call(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])

    def resume(self, node: str) -> None:
        self._call(["scontrol", "update", f"nodename={node}", "state=resume"])
