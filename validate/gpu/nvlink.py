"""NVLink link state and speed from `nvidia-smi nvlink -s`.

Every link of every GPU must be up at the expected speed (A100 12 x 25 GB/s, V100-SXM2
6 x 25.781 GB/s; validation-anchors.md §5 F5). `<inactive>` is a down link; "all links are
inactive" is a GPU whose NVLink is gone (Azure test/data/bad_nvlink_status.txt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from common.results import CheckResult, Level
from validate.checks import Expectations, NodeCheck, ParseError
from validate.thresholds import policy

_GPU = re.compile(r"^GPU (?P<idx>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)$")
_LINK = re.compile(r"^Link (?P<n>\d+): (?:(?P<speed>[\d.]+) GB/s|(?P<inactive><inactive>))$")
_ALL_DOWN = "all links are inactive"


@dataclass
class NvlinkGpu:
    index: int
    name: str
    links: dict[int, float | None] = field(default_factory=dict)  # None = <inactive>
    all_inactive: bool = False


def parse_nvlink(stdout: str) -> list[NvlinkGpu]:
    """GPUs in order; an empty output means no NVLink-capable GPU (PCIe boards)."""
    gpus: list[NvlinkGpu] = []
    for raw in stdout.splitlines():
        line = raw.strip()
        if not line:
            continue
        if m := _GPU.match(line):
            gpus.append(NvlinkGpu(int(m["idx"]), m["name"]))
        elif gpus and (k := _LINK.match(line)):
            gpus[-1].links[int(k["n"])] = None if k["inactive"] else float(k["speed"])
        elif gpus and _ALL_DOWN in line:
            gpus[-1].all_inactive = True
        else:
            raise ParseError(f"unexpected line in nvlink -s output: {line[:80]!r}")
    return gpus


class NvlinkCheck(NodeCheck[list[NvlinkGpu]]):
    name: ClassVar[str] = "gpu.nvlink"
    tier: ClassVar[int] = 0
    timeout_s: ClassVar[float] = 30.0

    def command(self) -> str:
        return "nvidia-smi nvlink -s"

    def parse(self, stdout: str) -> list[NvlinkGpu]:
        return parse_nvlink(stdout)

    def evaluate(self, node: str, measurement: list[NvlinkGpu], expect: Expectations) -> list[CheckResult]:
        t = (node,)
        links = policy(expect, "nvlink_links_per_gpu")
        speed = policy(expect, "nvlink_link_gbs")
        if expect.interconnect not in {"nvlink", "nvswitch"}:
            n = sum(len(g.links) for g in measurement)
            msg = f"no NVLink expected (interconnect {expect.interconnect or 'not stated'}); {n} link(s) listed"
            return [CheckResult(self.name, Level.INFO, t, n, None, msg)]
        if not measurement:
            return [CheckResult(self.name, Level.ERROR, t, 0, links, "NVLink expected but no GPU lists any link")]
        bad: dict[str, str] = {}
        for g in measurement:
            up = [s for s in g.links.values() if s is not None]
            if g.all_inactive:
                bad[f"GPU{g.index}"] = "all links inactive"
            elif len(up) < len(g.links):
                bad[f"GPU{g.index}"] = f"{len(g.links) - len(up)} of {len(g.links)} links inactive"
            elif links is not None and len(up) != links:
                bad[f"GPU{g.index}"] = f"{len(up)} links, expected {links}"
            elif speed is not None and up and min(up) < speed:
                bad[f"GPU{g.index}"] = f"link at {min(up)} GB/s, expected {speed}"
        expected = {"links_per_gpu": links, "link_gbs": speed}
        if bad:
            msg = "; ".join(f"{k}: {v}" for k, v in bad.items())
            return [CheckResult(self.name, Level.ERROR, t, bad, expected, msg)]
        listed = len(measurement)
        if expect.gpus_per_node is not None and listed < expect.gpus_per_node:
            msg = f"links fine on the {listed} GPU(s) listed, but {expect.gpus_per_node} expected: the rest unseen"
            return [CheckResult(self.name, Level.UNKNOWN, t, listed, expect.gpus_per_node, msg)]
        if links is None or speed is None:
            msg = f"all listed links up on {listed} GPU(s); no expected link count/speed to compare"
            return [CheckResult(self.name, Level.INFO, t, listed, expected, msg)]
        msg = f"{listed} GPU(s) x {links} links up at >= {speed} GB/s"
        return [CheckResult(self.name, Level.PASS, t, listed, expected, msg)]
