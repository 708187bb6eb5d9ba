"""GPU interconnect: `nvidia-smi topo -m` matrix and `nvidia-smi nvlink -s` link states.

Expected shapes (validation-anchors.md §2.4, §5 F5/F6): NVSwitch boards show the same NV# on
every GPU pair (8xA100: NV12); the V100 hybrid cube-mesh shows NV1/NV2 with 6 links per GPU
in total and some SYS pairs; PCIe boards show no NV# at all. A baseline matrix, when given,
must match exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck, ParseError
from gpuforge.validate.thresholds import policy

# SOC is what drivers before NODE/SYS existed printed for the inter-socket path (legend "SOC =").
_CODE = re.compile(r"^(X|NV\d+|SYS|NODE|PHB|PXB|PIX|SOC)$")
_GPU = re.compile(r"^GPU\d+$")
# Driver 590 on wraps the header row in ANSI underline (ESC[4m ... ESC[0m) even when stdout is a
# pipe or a file (utkuozdemir/nvidia_gpu_exporter internal/captures/*__590.48.01.txt, written
# by `nvidia-smi topo -m >> file`): strip every CSI sequence before splitting into tokens.
# Pasted into a web page the ESC byte is often lost and "[4m"/"[0m" are left glued to the first and
# last header cell (sgl-project/sglang#26039, B300, 590.44.01): strip those remnants too.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\[[0-9;]*m(?=\S|$)")


@dataclass(frozen=True)
class Topology:
    gpus: tuple[str, ...]
    matrix: tuple[tuple[str, ...], ...]  # matrix[i][j]: path code from GPU i to GPU j

    def nvlinks(self, i: int, j: int) -> int:
        code = self.matrix[i][j]
        return int(code[2:]) if code.startswith("NV") else 0


def parse_topo(stdout: str) -> Topology:
    header: list[str] | None = None
    rows: dict[str, tuple[str, ...]] = {}
    for line in _ANSI.sub("", stdout).splitlines():
        tokens = line.split()
        if not tokens or tokens[0] == "Legend:":
            if rows:
                break
            continue
        if header is None and _GPU.match(tokens[0]) and (len(tokens) == 1 or not _CODE.match(tokens[1])):
            header = [t for t in tokens if _GPU.match(t)]
            continue
        if header is not None and _GPU.match(tokens[0]):
            codes = tuple(tokens[1 : 1 + len(header)])
            if len(codes) != len(header) or not all(_CODE.match(c) for c in codes):
                raise ParseError(f"row {tokens[0]} does not have {len(header)} path codes: {line.strip()[:80]!r}")
            rows[tokens[0]] = codes
    if header is None:
        raise ParseError("no GPU header row in nvidia-smi topo -m output")
    missing = [g for g in header if g not in rows]
    if missing:
        raise ParseError(f"no row for {missing} (truncated?)")
    for i, g in enumerate(header):
        if rows[g][i] != "X":
            raise ParseError(f"{g} row has {rows[g][i]!r} on the diagonal, not X")
    return Topology(tuple(header), tuple(rows[g] for g in header))


class TopologyCheck(NodeCheck[Topology]):
    name: ClassVar[str] = "gpu.topology"
    tier: ClassVar[int] = 0
    timeout_s: ClassVar[float] = 30.0

    def command(self) -> str:
        return "nvidia-smi topo -m"

    def parse(self, stdout: str) -> Topology:
        return parse_topo(stdout)

    def evaluate(self, node: str, measurement: Topology, expect: Expectations) -> list[CheckResult]:
        t = (node,)
        topo = measurement
        matrix = [list(r) for r in topo.matrix]
        n = len(topo.gpus)
        if expect.gpus_per_node is not None and n != expect.gpus_per_node:
            msg = f"topology shows {n} GPUs, expected {expect.gpus_per_node}"
            return [CheckResult(self.name, Level.ERROR, t, n, expect.gpus_per_node, msg)]
        baseline = policy(expect, "topology_matrix")
        if baseline is not None:
            diff = [
                f"GPU{i}-GPU{j}: {matrix[i][j]} (baseline {baseline[i][j]})"
                for i in range(n)
                for j in range(n)
                if len(baseline) == n and i != j and matrix[i][j] != baseline[i][j]
            ]
            if len(baseline) != n or diff:
                msg = "topology differs from baseline: " + ("; ".join(diff[:6]) or f"{len(baseline)} GPUs there")
                return [CheckResult(self.name, Level.ERROR, t, matrix, baseline, msg)]
            return [CheckResult(self.name, Level.PASS, t, matrix, baseline, "topology matches the baseline")]
        links = policy(expect, "nvlink_links_per_gpu")
        # both directions: a matrix is symmetric when healthy, so an odd cell either way counts
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
        if expect.interconnect == "nvswitch":
            want = f"NV{links}" if links else None
            codes = {matrix[i][j] for i, j in pairs}
            bad = [f"GPU{i}-GPU{j}: {matrix[i][j]}" for i, j in pairs if not matrix[i][j].startswith("NV")]
            if want:
                bad = [f"GPU{i}-GPU{j}: {matrix[i][j]}" for i, j in pairs if matrix[i][j] != want]
            elif len(codes) > 1:
                bad = bad or [f"unequal NVLink counts {sorted(codes)}"]
            if bad:
                msg = f"NVSwitch board should show {want or 'one NV#'} on every pair: " + "; ".join(bad[:6])
                return [CheckResult(self.name, Level.ERROR, t, matrix, want, msg)]
            return [CheckResult(self.name, Level.PASS, t, matrix, want, f"all {len(pairs) // 2} GPU pairs {sorted(codes)}")]
        if expect.interconnect == "nvlink":
            per_gpu = [sum(topo.nvlinks(i, j) for j in range(n) if j != i) for i in range(n)]
            bad = [f"GPU{i}: {c} links" for i, c in enumerate(per_gpu) if c == 0 or (links and c != links)]
            if bad:
                msg = f"expected {links or 'some'} NVLinks per GPU: " + "; ".join(bad)
                return [CheckResult(self.name, Level.ERROR, t, matrix, links, msg)]
            return [CheckResult(self.name, Level.PASS, t, matrix, links, f"NVLinks per GPU {per_gpu}")]
        paths = sorted({matrix[i][j] for i, j in pairs})
        if expect.interconnect in {"none", "pcie"} and not any(p.startswith("NV") for p in paths):
            msg = f"no NVLink between GPUs, as expected for {expect.interconnect}: paths {paths or ['single GPU']}"
            return [CheckResult(self.name, Level.PASS, t, matrix, expect.interconnect, msg)]
        msg = f"interconnect {expect.interconnect or 'not stated'}: GPU paths {paths or ['single GPU']}"
        return [CheckResult(self.name, Level.INFO, t, matrix, expect.interconnect, msg)]
