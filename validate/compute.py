"""GPU compute check: achieved matmul TFLOPS and memory copy bandwidth against the catalog peak.

The node runs validate/node_scripts/gpu_compute.py (torch) and prints JSON. The profile's
precision picks the peak (fp64 for risk-sim, fp16 tensor for cv-training; thresholds.yaml
`compute.precision_peak`). The seed says measured is typically 10-20% below theory, so below
0.8 x peak is a warning against a datasheet and an error against a baseline; a GPU well below
its node's median is an error either way (one weak GPU slows every collective).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck, ParseError
from gpuforge.validate.thresholds import policy

SCRIPT = Path(__file__).resolve().parent / "node_scripts" / "gpu_compute.py"
_HEREDOC = "GPUFORGE_COMPUTE_EOF"
_PRECISION_KEY = {"fp64": "fp64", "fp32": "fp32", "fp16": "fp16", "int8": "fp16"}  # the probe has no int8


@dataclass(frozen=True)
class GpuCompute:
    index: int
    name: str
    matmul_tflops: dict[str, float]
    copy_gbs: float


@dataclass(frozen=True)
class ComputeRun:
    error: str | None
    backend: str | None
    gpus: tuple[GpuCompute, ...]


def parse_compute(stdout: str) -> ComputeRun:
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise ParseError("compute probe printed nothing")
    try:
        doc = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise ParseError(f"compute probe output is not JSON: {exc.msg}") from None
    if not isinstance(doc, dict) or doc.get("tool") != "gpuforge-compute" or doc.get("schema") != 1:
        raise ParseError("not gpuforge-compute schema 1 output")
    if "error" in doc:
        return ComputeRun(str(doc["error"]), None, ())
    try:
        gpus = tuple(
            GpuCompute(
                int(g["index"]),
                str(g["name"]),
                {k: float(v) for k, v in g["matmul_tflops"].items()},
                float(g["copy_gbs"]),
            )
            for g in doc["gpus"]
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ParseError(f"compute probe output lacks a field: {exc}") from None
    for g in gpus:
        if g.copy_gbs <= 0 or any(v <= 0 for v in g.matmul_tflops.values()):
            raise ParseError(f"GPU {g.index}: non-positive figure in {g}")
    return ComputeRun(None, str(doc.get("backend")), gpus)


class ComputeCheck(NodeCheck[ComputeRun]):
    name: ClassVar[str] = "compute"
    tier: ClassVar[int] = 1
    timeout_s: ClassVar[float] = 180.0

    def command(self) -> str:
        # the script travels inside the command, so no file copy step can be skipped or stale
        return f"${{GPUFORGE_PYTHON:-python3}} - <<'{_HEREDOC}'\n{SCRIPT.read_text()}{_HEREDOC}\n"

    def parse(self, stdout: str) -> ComputeRun:
        return parse_compute(stdout)

    def evaluate(self, node: str, measurement: ComputeRun, expect: Expectations) -> list[CheckResult]:
        t = (node,)
        run = measurement
        if run.error is not None:
            return [CheckResult(self.name, Level.UNKNOWN, t, None, None, f"compute probe could not run: {run.error}")]
        if expect.gpus_per_node is not None and len(run.gpus) != expect.gpus_per_node:
            msg = f"probe saw {len(run.gpus)} GPUs, expected {expect.gpus_per_node}"
            return [CheckResult(self.name, Level.ERROR, t, len(run.gpus), expect.gpus_per_node, msg)]
        precision = str(policy(expect, "compute_precision") or "fp32")
        key = _PRECISION_KEY.get(precision, "fp32")
        tflops = {g.index: g.matmul_tflops.get(key) for g in run.gpus}
        if None in tflops.values():
            return [CheckResult("compute.matmul", Level.UNKNOWN, t, tflops, None, f"probe did not measure {key}")]
        values = {i: float(v) for i, v in tflops.items() if v is not None}
        copy = {g.index: g.copy_gbs for g in run.gpus}
        return [
            _against_peak("compute.matmul", t, values, policy(expect, "compute_tflops"), f"{key} TFLOPS", expect),
            _against_peak("compute.membw", t, copy, policy(expect, "memory_bandwidth_gbs"), "GB/s copy", expect),
            _peers(t, {f"matmul GPU{i}": v for i, v in values.items()} | {f"copy GPU{i}": v for i, v in copy.items()},
                   float(policy(expect, "compute_peer_min_fraction"))),
        ]  # fmt: skip


def _against_peak(
    check: str, t: tuple[str, ...], per_gpu: dict[int, float], peak: Any, unit: str, expect: Expectations
) -> CheckResult:
    worst = min(per_gpu.values())
    if peak is None:
        msg = f"slowest GPU {worst:g} {unit}; the catalog has no peak for this GPU: baseline it"
        return CheckResult(check, Level.INFO, t, worst, None, msg)
    frac = float(policy(expect, "compute_min_fraction"))
    ratio = worst / float(peak)
    text = f"slowest GPU {worst:g} {unit} = {ratio:.0%} of {peak:g}"
    if ratio < frac:
        level = Level(policy(expect, "compute_below_level") or "warning")
        return CheckResult(check, level, t, worst, peak, f"{text}, below {frac:.0%} (source: {_src(expect, check)})")
    return CheckResult(check, Level.PASS, t, worst, peak, text)


def _src(expect: Expectations, check: str) -> str:
    key = "compute_tflops" if check == "compute.matmul" else "memory_bandwidth_gbs"
    return expect.sources.get(key, "?")


def _peers(t: tuple[str, ...], figures: dict[str, float], min_fraction: float) -> CheckResult:
    """Each GPU against its node's median of the same measurement (matmul or copy)."""
    slow: dict[str, float] = {}
    for kind in ("matmul", "copy"):
        group = {k: v for k, v in figures.items() if k.startswith(kind)}
        median = statistics.median(group.values())
        slow |= {k: round(v / median, 3) for k, v in group.items() if v < min_fraction * median}
    if slow:
        msg = "GPU(s) below {:.0%} of the node median: {}".format(
            min_fraction, ", ".join(f"{k} ({v:.0%})" for k, v in slow.items())
        )
        return CheckResult("compute.peers", Level.ERROR, t, slow, min_fraction, msg)
    return CheckResult("compute.peers", Level.PASS, t, None, min_fraction, f"{len(figures)} figures within the median band")
