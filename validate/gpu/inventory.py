"""GPU inventory and identity: count, model, memory, driver, VBIOS, persistence mode.

Tier 0: a node that fails this never joins a collective (validation-anchors.md §7.4; a
7-of-8-GPU node must fail fast with its name, NVIDIA/aicr#1858). `cluster_consistency` is the
cross-node half: driver and VBIOS must be the same everywhere, naming the odd node out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck, ParseError
from gpuforge.validate.gpu.smi_csv import as_float, parse_headerless_rows, parse_query_csv
from gpuforge.validate.thresholds import policy

FIELDS = (
    "index",
    "name",
    "uuid",
    "serial",
    "pci.bus_id",
    "memory.total",
    "driver_version",
    "vbios_version",
    "persistence_mode",
)
MIXED = "<mixed>"  # a node whose GPUs disagree among themselves
# --query-gpu accepts several names for one field (`nvidia-smi --help-query-gpu`: "gpu_name" or
# "name", "gpu_bus_id" or "pci.bus_id", ...); the header echoes the name that was asked for.
_ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_serial": "serial",
    "gpu_bus_id": "pci.bus_id",
}


@dataclass(frozen=True)
class GpuIdentity:
    index: str | None
    name: str | None
    uuid: str | None
    serial: str | None
    bus_id: str | None
    memory_mib: float | None
    driver: str | None
    vbios: str | None
    persistence: str | None


@dataclass(frozen=True)
class GpuInventory:
    gpus: tuple[GpuIdentity, ...]
    # the fields the output had a column for: a field never asked for is "not in this output"
    # (info), one asked for but N/A is unknown. Our own command asks for all of FIELDS.
    columns: frozenset[str] = frozenset(FIELDS)

    def single(self, attr: str) -> str | None:
        """The node's one value of `attr`, MIXED when its GPUs differ, None when any is unknown."""
        values = {getattr(g, attr) for g in self.gpus}
        if not values or None in values:
            return None
        return values.pop() if len(values) == 1 else MIXED


class GpuInventoryCheck(NodeCheck[GpuInventory]):
    name: ClassVar[str] = "gpu.inventory"
    tier: ClassVar[int] = 0
    timeout_s: ClassVar[float] = 30.0

    def command(self) -> str:
        # csv with header and units: the header proves the column layout (see smi_csv.py)
        return f"nvidia-smi --query-gpu={','.join(FIELDS)} --format=csv"

    def compare(self, per_node: dict[str, GpuInventory]) -> list[CheckResult]:
        return cluster_consistency(per_node)

    def parse(self, stdout: str) -> GpuInventory:
        # One row per GPU whatever the fields, so any --query-gpu CSV with a header counts GPUs;
        # the fields it lacks are reported as absent, not guessed (other people's captures ask
        # for other fields: tests/validate/corpus/smi_csv/).
        try:
            parsed = parse_query_csv(stdout)
        except ParseError as header_error:
            # `--format=csv,noheader` (published captures): read only the cells whose shape
            # names them; if that fails too, the header complaint is the useful one
            try:
                parsed = parse_headerless_rows(stdout)
            except ParseError:
                raise header_error from None
        rows = [{_ALIASES.get(k, k): v for k, v in r.items()} for r in parsed]
        if not rows:
            raise ParseError("header but no GPU rows")
        # `--query-gpu ... -l N` repeats every GPU once per sample (lestofante/ksysguard-gpu#27:
        # thirteen rows of index 0): one GPU per identity, its first sample kept
        key = next((k for k in ("pci.bus_id", "uuid", "index") if k in rows[0]), None)
        if key is not None and all(r.get(key) is not None for r in rows):
            rows = list({r[key]: r for r in reversed(rows)}.values())[::-1]
        elif "timestamp" in rows[0] and len({str(r.get("timestamp"))[:19] for r in rows}) > 1:
            # a log sampled over time with no GPU identity column: rows are samples, not GPUs
            raise ParseError("samples over time without an index, UUID or bus id column: GPU count unknown")
        columns = frozenset(rows[0])
        return GpuInventory(
            tuple(
                GpuIdentity(
                    index=r.get("index"),
                    name=r.get("name"),
                    uuid=r.get("uuid"),
                    serial=r.get("serial"),
                    bus_id=r.get("pci.bus_id"),
                    memory_mib=as_float(r.get("memory.total")),
                    driver=r.get("driver_version"),
                    vbios=r.get("vbios_version"),
                    persistence=r.get("persistence_mode"),
                )
                for r in rows
            ),
            columns,
        )

    def evaluate(self, node: str, measurement: GpuInventory, expect: Expectations) -> list[CheckResult]:
        t = (node,)
        gpus = measurement.gpus
        cols = measurement.columns
        out = [_count(t, len(gpus), expect.gpus_per_node)]
        for field, check, judge in (
            ("name", "gpu.model", _model),
            ("memory.total", "gpu.memory", _memory),
        ):
            out.append(judge(t, gpus, expect) if field in cols else _absent(t, check, field))
        for attr, label, field in (("driver", "driver", "driver_version"), ("vbios", "VBIOS", "vbios_version")):
            value = measurement.single(attr)
            check = f"gpu.{attr}"
            if field not in cols:
                out.append(_absent(t, check, field))
            elif value is None:
                out.append(CheckResult(check, Level.UNKNOWN, t, None, "one version", f"{label} not reported"))
            elif value == MIXED:
                seen = sorted({str(getattr(g, attr)) for g in gpus})
                out.append(CheckResult(check, Level.ERROR, t, seen, "one version", f"GPUs disagree on {label}"))
            else:
                out.append(CheckResult(check, Level.PASS, t, value, "one version", f"{label} {value} on all GPUs"))
        out.append(
            _persistence(t, gpus, expect) if "persistence_mode" in cols else _absent(t, "gpu.persistence", "persistence_mode")
        )
        return out


def _absent(t: tuple[str, ...], check: str, field: str) -> CheckResult:
    return CheckResult(check, Level.INFO, t, None, None, f"{field} not in this --query-gpu output: not judged")


def _count(t: tuple[str, ...], n: int, expected: int | None) -> CheckResult:
    if expected is None:
        return CheckResult("gpu.count", Level.INFO, t, n, None, f"{n} GPUs; no expected count given")
    if n == expected:
        return CheckResult("gpu.count", Level.PASS, t, n, expected, f"{n} GPUs")
    return CheckResult("gpu.count", Level.ERROR, t, n, expected, f"{n} GPUs visible, expected {expected}")


def _model(t: tuple[str, ...], gpus: tuple[GpuIdentity, ...], expect: Expectations) -> CheckResult:
    names = [str(g.name) for g in gpus if g.name is not None]
    patterns = policy(expect, "gpu_name_patterns")
    if len(names) < len(gpus):
        observed = [g.name for g in gpus]
        return CheckResult("gpu.model", Level.UNKNOWN, t, observed, expect.gpu_model, "a GPU did not report its name")
    if not patterns:
        return CheckResult("gpu.model", Level.INFO, t, sorted(set(names)), expect.gpu_model, "no expected model")
    bad = [n for n in names if not any(p.lower() in str(n).lower() for p in patterns)]
    if bad:
        return CheckResult("gpu.model", Level.ERROR, t, sorted(set(names)), patterns, f"unexpected model {bad[0]!r}")
    return CheckResult("gpu.model", Level.PASS, t, sorted(set(names))[0], expect.gpu_model, "model as expected")


def _memory(t: tuple[str, ...], gpus: tuple[GpuIdentity, ...], expect: Expectations) -> CheckResult:
    mems = [g.memory_mib for g in gpus]
    if expect.gpu_memory_gib is None:
        return CheckResult("gpu.memory", Level.INFO, t, mems, None, "no expected GPU memory")
    if None in mems:
        return CheckResult("gpu.memory", Level.UNKNOWN, t, mems, expect.gpu_memory_gib, "memory.total not reported")
    frac = float(policy(expect, "gpu_memory_min_fraction"))
    smallest_gib = min(float(m) for m in mems if m is not None) / 1024
    floor = frac * expect.gpu_memory_gib
    if smallest_gib < floor:
        msg = f"smallest GPU has {smallest_gib:.2f} GiB, below {frac} x {expect.gpu_memory_gib} GiB"
        return CheckResult("gpu.memory", Level.ERROR, t, round(smallest_gib, 2), expect.gpu_memory_gib, msg)
    return CheckResult("gpu.memory", Level.PASS, t, round(smallest_gib, 2), expect.gpu_memory_gib, "memory as expected")


def _persistence(t: tuple[str, ...], gpus: tuple[GpuIdentity, ...], expect: Expectations) -> CheckResult:
    modes = [g.persistence for g in gpus]
    if modes and all(m is None for m in modes):
        # the column is there but N/A on every GPU: Windows (WDDM/TCC) has no persistence mode
        msg = "persistence mode N/A on every GPU (not applicable on this platform)"
        return CheckResult("gpu.persistence", Level.INFO, t, modes, "Enabled", msg)
    if None in modes:
        return CheckResult("gpu.persistence", Level.UNKNOWN, t, modes, "Enabled", "persistence mode not reported")
    off = [g.index for g in gpus if g.persistence != "Enabled"]
    if off:
        level = Level(policy(expect, "persistence_level"))
        return CheckResult("gpu.persistence", level, t, off, "Enabled", f"persistence mode off on GPU(s) {off}")
    return CheckResult("gpu.persistence", Level.PASS, t, "Enabled", "Enabled", "persistence mode on")


def cluster_consistency(per_node: dict[str, GpuInventory]) -> list[CheckResult]:
    """Driver and VBIOS the same across nodes; name the odd node(s) out against the majority.

    Pure: measurements in, results out. Nodes that did not report are `unknown`, not counted.
    """
    out = []
    for attr, label in (("driver", "driver"), ("vbios", "VBIOS")):
        check = f"gpu.cluster.{attr}"
        values = {node: inv.single(attr) for node, inv in per_node.items()}
        silent = sorted(n for n, v in values.items() if v is None)
        known = {n: v for n, v in values.items() if v is not None}
        if silent:
            out.append(CheckResult(check, Level.UNKNOWN, tuple(silent), None, None, f"{label} not reported"))
        if not known:
            continue
        counts = Counter(known.values())
        top = counts.most_common()
        if len(top) == 1 and top[0][0] != MIXED:
            out.append(CheckResult(check, Level.PASS, tuple(sorted(known)), top[0][0], None, f"one {label}"))
            continue
        tie = len(top) > 1 and top[0][1] == top[1][1]
        majority = None if tie or top[0][0] == MIXED else top[0][0]
        odd = sorted(n for n, v in known.items() if v != majority)
        seen = {v: sorted(n for n, x in known.items() if x == v) for v in counts}
        if majority is None:
            msg = f"no majority {label}: " + "; ".join(f"{v} on {', '.join(ns)}" for v, ns in seen.items())
        else:
            msg = f"{label} differs from the majority {majority}: " + ", ".join(f"{n}={known[n]}" for n in odd)
        out.append(CheckResult(check, Level.ERROR, tuple(odd), {n: known[n] for n in odd}, majority, msg))
    return out
