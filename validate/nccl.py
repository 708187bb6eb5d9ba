"""nccl-tests all_reduce_perf: command builders (one node; many nodes via mpirun), a parser of
its real output table, and a pure evaluator.

Judged on the bus bandwidth at the largest message, never on "Avg bus bandwidth", which
averages every size of the sweep (validation-anchors.md §2.3: 52.98 average vs 437.8 at 2 GiB
in F2). Wrong results (#wrong > 0, out-of-bounds FAILED) fail even when fast; a `-T` timeout
is an error. The parser maps columns by the header row, so the legacy layout (no `root`,
float `error`), `-I`/`-S` extra columns and rank prefixes (`0: `, `[1,0]<stdout>:`) all parse,
and a row that does not fit the header is a layout error, not a misread number.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck, ParseError
from gpuforge.validate.thresholds import policy

# Open MPI of the EFA installer. Called by absolute path: a non-login SSH session has no
# /opt/amazon/openmpi/bin on PATH (the installer adds it in /etc/profile.d only), and Open MPI
# treats an absolute mpirun path as --prefix, so the remote orted is found under the same
# prefix without the remote PATH (mpirun(1) of Open MPI 4.x: "invoking mpirun via an absolute
# path name is equivalent to specifying the --prefix option").
EFA_MPIRUN = "/opt/amazon/openmpi/bin/mpirun"
# `timeout` outlives nccl-tests' own -T by this much, so -T (which names the hang) fires first.
TIMEOUT_GRACE_S = 30
_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+: )")
_OOB = re.compile(r"^# Out of bounds values\s*:\s*(?P<n>\d+)\s+(?P<ok>OK|FAILED)")
_AVG = re.compile(r"^# Avg bus bandwidth\s*:\s*(?P<bw>[\d.eE+-]+)(?:\s+(?P<ok>OK|FAILED))?")
_NET = re.compile(r"NCCL INFO Using network (?P<net>\S.*)$")
# nccl-tests' own failure reports (src/common.h CUDACHECK/NCCLCHECK/TESTCHECK):
# "<host>: Test CUDA failure common.cu:389 '...'", "<host>: Test NCCL failure ...",
# " .. <host> pid N: Test failure common.cu:519". They may land on the end of a half-printed
# row (NVIDIA/nccl-tests#355), so they are looked for anywhere in a line, before the row is split.
_FAILURE = re.compile(r"\bTest (?:CUDA |NCCL |)failure\b.*$")


@dataclass(frozen=True)
class NcclPlan:
    """How to run all_reduce_perf. Defaults: a sweep from 8 B to 8 GiB (small-message time and
    large-message busbw in one run), data checked once (-c 1), nccl-tests' own -T timeout."""

    binary: str = "all_reduce_perf"
    min_bytes: str = "8"
    max_bytes: str = "8G"
    factor: int = 2
    iters: int = 20
    check_iters: int = 1
    timeout_s: int = 300

    def args(self, gpus_per_process: str) -> list[str]:
        return [
            self.binary,
            "-b", self.min_bytes,
            "-e", self.max_bytes,
            "-f", str(self.factor),
            "-g", gpus_per_process,
            "-n", str(self.iters),
            "-c", str(self.check_iters),
            "-T", str(self.timeout_s),
        ]  # fmt: skip


def local_command(plan: NcclPlan = NcclPlan(), gpus: int | None = None) -> str:
    """One process driving every GPU of this node (-g N): no MPI needed within a node.

    With `gpus` None the node counts its own GPUs; the inventory check judges that count.
    """
    g = str(gpus) if gpus is not None else "$(nvidia-smi -L | grep -c '^GPU ')"
    argv = " ".join(shlex.quote(a) for a in plan.args("__G__")).replace("__G__", g)
    return f"timeout {plan.timeout_s + TIMEOUT_GRACE_S} {argv}"


def hostfile_text(hosts: Sequence[str], slots: int) -> str:
    """An Open MPI hostfile: one rank per GPU on each host."""
    return "".join(f"{h} slots={slots}\n" for h in hosts)


def multinode_env(*, socket_ifname: str | None = None, efa: bool = False, gpudirect_rdma: bool = False,
                  ring: bool = False) -> dict[str, str]:
    """The environment every rank of a multi-node run gets (mpirun -x, or srun --export)."""
    env = {"NCCL_DEBUG": "INFO"}  # INFO prints the transport chosen (Socket vs EFA)
    if socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = socket_ifname
    if efa:
        env["FI_PROVIDER"] = "efa"
        env["FI_EFA_FORK_SAFE"] = "1"
        if gpudirect_rdma:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    if ring:
        env["NCCL_ALGO"] = "Ring"
    return env


def multinode_command(
    hosts: Sequence[str],
    gpus_per_node: int,
    hostfile: str,
    plan: NcclPlan = NcclPlan(),
    *,
    socket_ifname: str | None = None,
    efa: bool = False,
    gpudirect_rdma: bool = False,
    ring: bool = False,
    mpirun: str = "mpirun",
) -> str:
    """mpirun across `hosts` (one rank per GPU), with the env passed to remote ranks via -x.

    `-x` matters: without it only the local rank sees NCCL_SOCKET_IFNAME (NVIDIA/nccl#876).
    FI_EFA_USE_DEVICE_RDMA only where the instance has GPUDirect RDMA (p4d+, not p3dn).
    `ring` forces NCCL_ALGO=Ring: on 2 nodes tree can report busbw above the wire (nccl-tests#22).
    """
    if len(hosts) < 2:
        raise ValueError("multinode_command needs at least two hosts")
    env = multinode_env(socket_ifname=socket_ifname, efa=efa, gpudirect_rdma=gpudirect_rdma, ring=ring)
    argv = [
        mpirun,
        "-np", str(len(hosts) * gpus_per_node),
        "-N", str(gpus_per_node),
        "--hostfile", hostfile,
        "--bind-to", "none",
        "--mca", "pml", "^ucx",
        "--mca", "btl", "tcp,self",
    ]  # fmt: skip
    for key, value in env.items():
        argv += ["-x", f"{key}={value}"]
    argv += plan.args("1")
    return f"timeout {plan.timeout_s + TIMEOUT_GRACE_S} " + " ".join(shlex.quote(a) for a in argv)


@dataclass(frozen=True)
class NcclRow:
    size: int
    oop_time_us: float
    oop_busbw: float
    oop_wrong: int | None  # None: not checked (N/A) or legacy float error column
    ip_time_us: float
    ip_busbw: float
    ip_wrong: int | None


@dataclass(frozen=True)
class NcclRun:
    rows: tuple[NcclRow, ...]
    legacy: bool  # pre-2022 layout: float `error` column, no per-row #wrong
    oob: int | None
    oob_ok: bool | None
    avg_busbw: float | None  # parsed for the record only; never judged
    avg_ok: bool | None
    timed_out: bool
    networks: tuple[str, ...]
    failures: tuple[str, ...] = ()  # nccl-tests' "Test ... failure" lines: the run died


def _num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ParseError(f"not a number in the table: {text!r}") from None


def _wrong(text: str, legacy: bool) -> int | None:
    if legacy or text == "N/A":
        return None
    try:
        # nccl-tests prints #wrong with "%g"-style formatting in some versions: above 1e6 it is
        # e-notation ("1.04858e+06"), still a count of wrong elements.
        value = float(text)
    except ValueError:
        raise ParseError(f"#wrong is not a count: {text!r}") from None
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise ParseError(f"#wrong is not a count: {text!r}")
    return int(value)


def parse_nccl(stdout: str) -> NcclRun:
    header: list[str] | None = None
    rows: list[NcclRow] = []
    oob = oob_ok = avg = avg_ok = None
    timed_out = False
    networks: list[str] = []
    failures: list[str] = []
    for raw in stdout.splitlines():
        line = _PREFIX.sub("", raw.rstrip())
        if "Test timeout" in line:
            timed_out = True
        if f := _FAILURE.search(line):
            failures.append(f.group(0).strip())
            continue  # a failure glued to a half-printed row: the row is not a measurement
        if n := _NET.search(line):
            networks.append(n["net"].strip())
        if line.startswith("#"):
            tokens = line[1:].split()
            if "size" in tokens and "busbw" in tokens and tokens[0] == "size":
                header = tokens
            elif m := _OOB.match(line):
                oob, oob_ok = int(m["n"]), m["ok"] == "OK"
            elif m := _AVG.match(line):
                avg = float(m["bw"])
                avg_ok = None if m["ok"] is None else m["ok"] == "OK"
            continue
        tokens = line.split()
        if header is None or not tokens or not tokens[0].isdigit():
            continue  # NCCL INFO lines, warnings, the `...` of an excerpt
        if len(tokens) != len(header):
            raise ParseError(f"row has {len(tokens)} columns, header has {len(header)}: {line.strip()[:80]!r}")
        rows.append(_row(header, tokens))
    if header is None and not failures:
        raise ParseError("no all_reduce_perf table header (# size count type ...)")
    if not rows and not timed_out and not failures:
        raise ParseError("table header but no result rows")
    legacy = header is not None and "error" in header and "#wrong" not in header
    return NcclRun(
        tuple(rows), legacy, oob, oob_ok, avg, avg_ok, timed_out, tuple(dict.fromkeys(networks)), tuple(failures)
    )


def _row(header: list[str], tokens: list[str]) -> NcclRow:
    legacy = "#wrong" not in header
    wrong_col = "error" if legacy else "#wrong"

    def col(name: str, nth: int) -> str:
        idx = [i for i, h in enumerate(header) if h == name]
        if len(idx) < nth + 1:
            raise ParseError(f"header lacks a {'second ' if nth else ''}{name!r} column: {header}")
        return tokens[idx[nth]]

    return NcclRow(
        size=int(tokens[header.index("size")]),
        oop_time_us=_num(col("time", 0)),
        oop_busbw=_num(col("busbw", 0)),
        oop_wrong=_wrong(col(wrong_col, 0), legacy),
        ip_time_us=_num(col("time", 1)),
        ip_busbw=_num(col("busbw", 1)),
        ip_wrong=_wrong(col(wrong_col, 1), legacy),
    )


def evaluate_nccl(
    targets: tuple[str, ...], run: NcclRun, expect: Expectations, *, scope: str = "intra"
) -> list[CheckResult]:
    """Correctness, large-message busbw and small-message time of one all_reduce_perf run.

    `scope` "intra" judges against `nccl_busbw_gbps` (one node), "inter" against the two-node
    figure `nccl_inter_2node_busbw_gbps`. Pure: the runner calls it for pairs of nodes too.
    """
    out = [_correctness(targets, run)]
    out.append(_busbw(targets, run, expect, scope))
    lat = _latency(targets, run, expect)
    if lat is not None:
        out.append(lat)
    if expect.efa_interfaces and scope == "inter" and any("socket" in n.lower() for n in run.networks):
        msg = f"NCCL used {run.networks} although the nodes have EFA: traffic went over TCP sockets"
        out.append(CheckResult("nccl.transport", Level.ERROR, targets, list(run.networks), "EFA (libfabric)", msg))
    return out


def _correctness(t: tuple[str, ...], run: NcclRun) -> CheckResult:
    if run.timed_out:
        return CheckResult("nccl.run", Level.ERROR, t, "timeout", None, "all_reduce_perf hit its -T timeout (hang?)")
    if run.failures:
        msg = f"nccl-tests failed after {len(run.rows)} size(s): {run.failures[0][:160]}"
        return CheckResult("nccl.run", Level.ERROR, t, list(run.failures[:5]), None, msg)
    wrong = [(r.size, w) for r in run.rows for w in (r.oop_wrong, r.ip_wrong) if w]
    if wrong or (run.oob is not None and run.oob > 0) or run.oob_ok is False:
        where = f"{len(wrong)} row(s) with #wrong > 0, first at {wrong[0][0]} B" if wrong else f"{run.oob} out of bounds"
        return CheckResult("nccl.run", Level.ERROR, t, wrong or run.oob, 0, f"wrong results: {where}")
    if run.avg_ok is False:
        msg = "nccl-tests itself reported FAILED (average below 0.9 x NCCL_TESTS_MIN_BW)"
        return CheckResult("nccl.run", Level.ERROR, t, run.avg_busbw, None, msg)
    per_row = any(w is not None for r in run.rows for w in (r.oop_wrong, r.ip_wrong))
    # with -c 0 nccl-tests still prints "Out of bounds values : 0 OK": N/A rows outweigh it
    checked = per_row or (run.oob is not None and (run.legacy or not run.rows))
    if not checked and not run.legacy and run.rows:
        # "#wrong N/A" on every row: the run was told not to check (-c 0, e.g. PerfKitBenchmarker's
        # nccl_output.txt); a choice of the run, said as such, not missing evidence
        msg = "data not checked by this run (#wrong N/A, -c 0): bandwidth only"
        return CheckResult("nccl.run", Level.INFO, t, None, 0, msg)
    if not checked:
        return CheckResult("nccl.run", Level.UNKNOWN, t, None, 0, "results were not checked (-c 0 or no footer)")
    if run.oob is None:
        msg = "no wrong results in the rows, but no 'Out of bounds' footer: was the run cut short?"
        return CheckResult("nccl.run", Level.WARNING, t, 0, 0, msg)
    return CheckResult("nccl.run", Level.PASS, t, 0, 0, f"{len(run.rows)} sizes, no wrong results")


def _busbw(t: tuple[str, ...], run: NcclRun, expect: Expectations, scope: str) -> CheckResult:
    check = "nccl.busbw" if scope == "intra" else "nccl.busbw.inter"
    expected = expect.nccl_busbw_gbps if scope == "intra" else policy(expect, "nccl_inter_2node_busbw_gbps")
    if not run.rows:
        return CheckResult(check, Level.UNKNOWN, t, None, expected, "no result rows")
    big = max(run.rows, key=lambda r: r.size)
    busbw = max(big.oop_busbw, big.ip_busbw)
    need = int(policy(expect, "nccl_min_large_bytes"))
    if big.size < need:
        msg = f"largest message {big.size} B < {need} B: busbw there says little about the links"
        # a complete run that chose a small sweep (its footer printed) is a verdict: not judged;
        # a run cut short, hung or failed before the large sizes is missing evidence
        complete = (run.oob is not None or run.avg_busbw is not None) and not run.timed_out and not run.failures
        return CheckResult(check, Level.INFO if complete else Level.UNKNOWN, t, busbw, expected, msg)
    at = f"{busbw:.2f} GB/s at {big.size} B"
    if expected is None:
        msg = f"{at}; no published figure for this shape: save a baseline from a healthy run"
        return CheckResult(check, Level.INFO, t, busbw, None, msg)
    frac = float(policy(expect, "nccl_pass_fraction"))
    floor = frac * float(expected)
    if busbw < floor:
        return CheckResult(check, Level.ERROR, t, busbw, expected, f"{at}, below {frac} x {expected} GB/s")
    return CheckResult(check, Level.PASS, t, busbw, expected, f"{at} (>= {frac} x {expected})")


def _latency(t: tuple[str, ...], run: NcclRun, expect: Expectations) -> CheckResult | None:
    # Only a small message says anything about latency: a sweep that starts at 512 MiB has no
    # latency figure at all, rather than its first (bandwidth-bound) row judged as one.
    limit = int(policy(expect, "nccl_small_max_bytes"))
    small = [r for r in run.rows if 0 < r.size <= limit]
    if not small:
        return None
    row = min(small, key=lambda r: r.size)
    mean_us = min(row.oop_time_us, row.ip_time_us)
    target = float(policy(expect, "nccl_small_latency_us"))
    honest = (
        f"mean {mean_us:g} µs at {row.size} B; nccl-tests reports the mean time per size over its "
        f"iterations, not a P99, so this only approximates the seed's P99 < {target:g} µs target"
    )
    level = Level.PASS if mean_us <= target else Level.WARNING
    return CheckResult("nccl.latency", level, t, mean_us, target, honest)


class NcclLocalCheck(NodeCheck[NcclRun]):
    """all_reduce_perf over every GPU of one node (tier 1: only on nodes that passed tier 0)."""

    name: ClassVar[str] = "nccl.local"
    tier: ClassVar[int] = 1
    timeout_s: ClassVar[float] = float(NcclPlan().timeout_s + 2 * TIMEOUT_GRACE_S)

    def __init__(self, plan: NcclPlan = NcclPlan()) -> None:
        self.plan = plan

    def command(self) -> str:
        return local_command(self.plan)

    def parse(self, stdout: str) -> NcclRun:
        return parse_nccl(stdout)

    def evaluate(self, node: str, measurement: NcclRun, expect: Expectations) -> list[CheckResult]:
        return evaluate_nccl((node,), measurement, expect, scope="intra")
