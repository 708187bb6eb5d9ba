"""GPU health from `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE`.

ECC counters (SRAM/DRAM split on A100+, single/double bit on V100/T4), row remapping (A100+)
or retired pages (V100/T4), and the active clock throttle reasons. Limits are Azure NHC's
(thresholds.yaml `ecc`, `throttle`). A counter the driver does not report is unknown, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck
from gpuforge.validate.gpu.smi_q import SmiBlock, as_int, as_yes, parse_smi_q
from gpuforge.validate.thresholds import policy

_THROTTLE_SECTIONS = (("Clocks Event Reasons",), ("Clocks Throttle Reasons",))
# Drivers up to the 470 branch spell it "Ecc Mode" (thamada/gls GTX680_smi.py, 470.256.02, in
# tests/validate/corpus/smi_q/); later ones "ECC Mode".
_ECC_MODE = ("ECC Mode", "Ecc Mode")


@dataclass(frozen=True)
class GpuHealth:
    bus_id: str
    ecc_mode: str | None
    sram_uncorrectable: int | None  # the larger of the volatile and aggregate (lifetime) counts
    sram_correctable: int | None
    dram_max: int | None  # the largest DRAM count, corrected or not, volatile or aggregate
    double_bit: int | None  # pre-Ampere drivers: volatile+aggregate double-bit totals
    retired_pages: int | None
    retired_pending: bool | None
    remap_pending: bool | None
    remap_failure: bool | None
    throttle_active: tuple[str, ...] | None  # None: not reported
    # printed at all (N/A included)? A section the output has but fills with N/A is a GPU that
    # does not support it (GeForce: no ECC; MIG mode: no row remapping), a verdict of its own;
    # a section missing from the output is evidence we do not have (unknown).
    ecc_mode_na: bool = False  # "ECC Mode / Current : N/A": the GPU has no ECC (GeForce)
    memory_na: bool = False  # row remapping printed as a bare "N/A": not available on this GPU
    throttle_na: bool = False  # "Clocks Throttle Reasons : N/A" as one line: no such counters (Kepler)
    # Which count it was: since the driver loaded (Volatile), and Hopper's own RMA flag
    # ("Aggregate / SRAM Threshold Exceeded", driver 580: fixtures/smi_q_h200_580_lent_sram_ue.txt)
    sram_uncorrectable_volatile: int | None = None
    sram_threshold_exceeded: bool | None = None


_SRAM_UNC = ("SRAM Uncorrectable", "SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED")


def _counts(block: SmiBlock, keys: tuple[str, ...], scopes: tuple[str, ...] = ("Volatile", "Aggregate")) -> list[int]:
    values = [as_int(block.get("ECC Errors", scope, key)) for scope in scopes for key in keys]
    return [v for v in values if v is not None]


def _health(block: SmiBlock) -> GpuHealth:
    # Hopper drivers (565, 590) split the SRAM uncorrectable count into Parity and SEC-DED
    # (fixtures/smi_q_h100_590_exporter_capture.txt); either one over the limit fails.
    sram_unc = _counts(block, _SRAM_UNC)
    sram_unc_volatile = _counts(block, _SRAM_UNC, ("Volatile",))
    sram_cor = _counts(block, ("SRAM Correctable",))
    dram = _counts(block, ("DRAM Correctable", "DRAM Uncorrectable"))
    dbe = [
        v
        for scope in ("Volatile", "Aggregate")
        if (v := as_int(block.get("ECC Errors", scope, "Double Bit", "Total"))) is not None
    ]
    retired = [v for key in ("Single Bit ECC", "Double Bit ECC") if (v := as_int(block.get("Retired Pages", key))) is not None]
    throttle: tuple[str, ...] | None = None
    for path in _THROTTLE_SECTIONS:
        section = block.get(*path)
        if isinstance(section, dict):
            throttle = tuple(sorted(_active(section)))
            break
    return GpuHealth(
        bus_id=block.bus_id,
        ecc_mode=_str(block.first(*((key, "Current") for key in _ECC_MODE))),
        sram_uncorrectable=max(sram_unc) if sram_unc else None,
        sram_correctable=max(sram_cor) if sram_cor else None,
        dram_max=max(dram) if dram else None,
        double_bit=max(dbe) if dbe else None,
        retired_pages=sum(retired) if retired else None,
        retired_pending=as_yes(block.first(("Retired Pages", "Pending Page Blacklist"), ("Retired Pages", "Pending"))),
        remap_pending=as_yes(block.get("Remapped Rows", "Pending")),
        remap_failure=as_yes(block.get("Remapped Rows", "Remapping Failure Occurred")),
        throttle_active=throttle,
        ecc_mode_na=any(block.has(key, "Current") and block.get(key, "Current") is None for key in _ECC_MODE),
        # GeForce and MIG print "Remapped Rows : N/A" as one bare line (exporter captures)
        memory_na=block.has("Remapped Rows") and block.get("Remapped Rows") is None,
        throttle_na=throttle is None and any(block.has(*p) and block.get(*p) is None for p in _THROTTLE_SECTIONS),
        sram_uncorrectable_volatile=sum(sram_unc_volatile) if sram_unc_volatile else None,
        sram_threshold_exceeded=as_yes(block.get("ECC Errors", "Aggregate", "SRAM Threshold Exceeded")),
    )


def _active(section: dict[str, Any]) -> list[str]:
    """Active reasons, including nested ones (HW Slowdown > HW Thermal Slowdown)."""
    out = []
    for key, value in section.items():
        if isinstance(value, dict):
            out.extend(_active(value))
        elif as_yes(value):
            out.append(key)
    return out


def _str(value: Any) -> str | None:
    return None if value is None or isinstance(value, dict) else str(value)


class GpuHealthCheck(NodeCheck[list[GpuHealth]]):
    name: ClassVar[str] = "gpu.health"
    tier: ClassVar[int] = 0
    timeout_s: ClassVar[float] = 30.0

    def command(self) -> str:
        return "nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE"

    def parse(self, stdout: str) -> list[GpuHealth]:
        return [_health(b) for b in parse_smi_q(stdout)]

    def evaluate(self, node: str, measurement: list[GpuHealth], expect: Expectations) -> list[CheckResult]:
        t = (node,)
        limits = policy(expect, "ecc")
        return [
            _ecc(t, measurement, limits),
            _memory_retirement(t, measurement, limits),
            _throttle(t, measurement, policy(expect, "throttle_benign")),
        ]


def _sram_when(g: GpuHealth) -> str:
    """Say which count it was: a lifetime count with none since the driver loaded is an old error
    (the GPU was reset since), still a fault under the rule (Azure NHC2019 fails either count)."""
    parts = []
    if g.sram_uncorrectable_volatile is not None:
        v = g.sram_uncorrectable_volatile
        parts.append("lifetime count" if v == 0 else f"{v} since the driver loaded")
    if g.sram_threshold_exceeded is not None:
        parts.append(f"NVIDIA's SRAM Threshold Exceeded: {'Yes' if g.sram_threshold_exceeded else 'No'}")
    return f" ({'; '.join(parts)})" if parts else ""


def _ecc(t: tuple[str, ...], gpus: list[GpuHealth], limits: dict[str, Any]) -> CheckResult:
    bad: dict[str, str] = {}
    silent = []
    for g in gpus:
        counters = (g.sram_uncorrectable, g.sram_correctable, g.dram_max, g.double_bit)
        if all(c is None for c in counters):
            silent.append(g.bus_id)
            continue
        if g.sram_uncorrectable is not None and g.sram_uncorrectable > limits["sram_uncorrectable_max"]:
            bad[g.bus_id] = f"SRAM uncorrectable {g.sram_uncorrectable}" + _sram_when(g)
        elif g.sram_correctable is not None and g.sram_correctable > limits["sram_correctable_max"]:
            bad[g.bus_id] = f"SRAM correctable {g.sram_correctable} > {limits['sram_correctable_max']}"
        elif g.dram_max is not None and g.dram_max > limits["dram_max"]:
            bad[g.bus_id] = f"DRAM ECC count {g.dram_max} > {limits['dram_max']}"
        elif g.double_bit is not None and g.double_bit > 0:
            bad[g.bus_id] = f"double-bit ECC errors {g.double_bit}"
    if bad:
        return CheckResult("gpu.ecc", Level.ERROR, t, bad, limits, "; ".join(f"{k}: {v}" for k, v in bad.items()))
    quiet = [g for g in gpus if g.bus_id in silent]
    unexplained = [g.bus_id for g in quiet if not g.ecc_mode_na and str(g.ecc_mode).lower() != "disabled"]
    if unexplained:
        modes = sorted({str(g.ecc_mode) for g in quiet})
        msg = f"no ECC counters reported (ECC mode {modes})"
        return CheckResult("gpu.ecc", Level.UNKNOWN, t, unexplained, limits, msg)
    disabled = [g.bus_id for g in quiet if g.ecc_mode is not None]
    if disabled:
        modes = sorted({str(g.ecc_mode) for g in gpus if g.bus_id in disabled})
        msg = f"ECC mode {modes}: no ECC protection on {', '.join(disabled)}"
        return CheckResult("gpu.ecc", Level.WARNING, t, disabled, limits, msg)
    if silent:
        msg = f"ECC not supported by {', '.join(silent)} (ECC mode N/A)"
        return CheckResult("gpu.ecc", Level.INFO, t, silent, limits, msg)
    return CheckResult("gpu.ecc", Level.PASS, t, 0, limits, f"ECC counters within limits on {len(gpus)} GPU(s)")


def _memory_retirement(t: tuple[str, ...], gpus: list[GpuHealth], limits: dict[str, Any]) -> CheckResult:
    """Row remapping (A100+) or page retirement (V100/T4): whichever the GPU reports."""
    bad: dict[str, str] = {}
    silent = []
    for g in gpus:
        if g.remap_pending is None and g.remap_failure is None and g.retired_pages is None:
            silent.append(g.bus_id)
        elif g.remap_failure and limits["remap_failure_fails"]:
            bad[g.bus_id] = "row remapping failure occurred (RMA)"
        elif g.remap_pending and limits["remap_pending_fails"]:
            bad[g.bus_id] = "row remap pending (needs a GPU reset)"
        elif g.retired_pages is not None and g.retired_pages >= limits["retired_pages_max"] and g.retired_pending:
            bad[g.bus_id] = f"{g.retired_pages} retired pages with a retirement pending"
    if bad:
        return CheckResult("gpu.remap", Level.ERROR, t, bad, None, "; ".join(f"{k}: {v}" for k, v in bad.items()))
    unknown = [b for b in silent if not next(g for g in gpus if g.bus_id == b).memory_na]
    if unknown:
        msg = "neither remapped rows nor retired pages reported"
        return CheckResult("gpu.remap", Level.UNKNOWN, t, unknown, None, msg)
    if silent:
        msg = f"row remapping and page retirement N/A on {', '.join(silent)} (not supported, or MIG mode)"
        return CheckResult("gpu.remap", Level.INFO, t, silent, None, msg)
    return CheckResult("gpu.remap", Level.PASS, t, None, None, "no pending or failed row remaps / page retirements")


def _throttle(t: tuple[str, ...], gpus: list[GpuHealth], benign: list[str]) -> CheckResult:
    silent = [g.bus_id for g in gpus if g.throttle_active is None and not g.throttle_na]
    if silent:
        return CheckResult("gpu.throttle", Level.UNKNOWN, t, silent, None, "clock throttle reasons not reported")
    na = [g.bus_id for g in gpus if g.throttle_active is None]
    if na and len(na) == len(gpus):
        msg = f"clock throttle reasons N/A on {', '.join(na)} (not supported by this GPU)"
        return CheckResult("gpu.throttle", Level.INFO, t, na, None, msg)
    benign_l = {b.lower() for b in benign}
    odd = {g.bus_id: [r for r in g.throttle_active or () if r.lower() not in benign_l] for g in gpus}
    odd = {k: v for k, v in odd.items() if v}
    if odd:
        msg = "clocks held back by " + "; ".join(f"{k}: {', '.join(v)}" for k, v in odd.items())
        return CheckResult("gpu.throttle", Level.WARNING, t, odd, benign, msg)
    return CheckResult("gpu.throttle", Level.PASS, t, None, benign, "no throttle reason beyond idle / SW power cap")
