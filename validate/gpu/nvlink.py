"""NVLink link state and speed from `nvidia-smi nvlink -s`.

Every link of every GPU must be up at the expected speed (A100 12 x 25 GB/s, V100-SXM2
6 x 25.781 GB/s; validation-anchors.md §5 F5). `<inactive>` is a down link; "all links are
inactive" is a GPU whose NVLink is gone (Azure test/data/bad_nvlink_status.txt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck, ParseError
from gpuforge.validate.thresholds import policy

_GPU = re.compile(r"^GPU (?P<idx>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)$")
_LINK = re.compile(r"^Link (?P<n>\d+): (?:(?P<speed>[\d.]+) ?GB/s|(?P<inactive><inactive>))$", re.IGNORECASE)
# What the driver prints under a GPU instead of links (lower-cased substrings). Real captures:
# "NVML: Unable to retrieve NVLink information as all links are inactive" (Azure NHC
# test/data/bad_nvlink_status.txt; 595/610 spell it "inActive": nvidia_gpu_exporter captures),
# "Device does not have or support Nvlink" (RTX 4080 SUPER, 595.71.05: a board without NVLink),
# "Nvlink queries are not supported for Devices in MIG mode" (H100/H200 MIG, 590.48.01).
_ALL_DOWN = "all links are inactive"
_UNSUPPORTED = "does not have or support nvlink"
_MIG = "not supported for devices in mig mode"
_NO_GPU = "no devices were found"

# NvlinkGpu.state
LINKS = "links"  # link lines follow (possibly none)
ALL_INACTIVE = "all_inactive"
UNSUPPORTED = "unsupported"  # the board has no NVLink at all
MIG = "mig"  # MIG mode: NVLink not queryable (and not used for peer traffic)


@dataclass
class NvlinkGpu:
    index: int
    name: str
    links: dict[int, float | None] = field(default_factory=dict)  # None = <inactive>
    state: str = LINKS

    @property
    def all_inactive(self) -> bool:
        return self.state == ALL_INACTIVE


def parse_nvlink(stdout: str) -> list[NvlinkGpu]:
    """GPUs in order; an empty output (or "No devices were found") means no GPU listed any link."""
    gpus: list[NvlinkGpu] = []
    for raw in stdout.splitlines():
        line = raw.strip()
        low = line.lower()
        if not line:
            continue
        if m := _GPU.match(line):
            gpus.append(NvlinkGpu(int(m["idx"]), m["name"]))
        elif gpus and (k := _LINK.match(line)):
            gpus[-1].links[int(k["n"])] = None if k["inactive"] else float(k["speed"])
        elif gpus and _ALL_DOWN in low:
            gpus[-1].state = ALL_INACTIVE
        elif gpus and _UNSUPPORTED in low:
            gpus[-1].state = UNSUPPORTED
        elif gpus and _MIG in low:
            gpus[-1].state = MIG
        elif not gpus and _NO_GPU in low:
            continue
        elif line.startswith("# (exit code"):
            continue  # the nvidia_gpu_exporter collector's own note, kept in its captures
        else:
            raise ParseError(f"unexpected line in nvlink -s output: {line[:80]!r}")
    return gpus


def _slowest(gpu: NvlinkGpu) -> float:
    return min((s for s in gpu.links.values() if s is not None), default=0.0)


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
        mig = [f"GPU{g.index}" for g in measurement if g.state == MIG]
        up = sum(1 for g in measurement for s in g.links.values() if s is not None)
        if expect.interconnect in {"none", "pcie"}:
            if up:
                msg = f"{up} active NVLink link(s) on a node expected to have {expect.interconnect}: other hardware?"
                return [CheckResult(self.name, Level.INFO, t, up, 0, msg)]
            how = sorted({g.state for g in measurement}) or ["no GPU listed"]
            msg = f"no active NVLink, as expected for {expect.interconnect} ({', '.join(how)})"
            return [CheckResult(self.name, Level.PASS, t, 0, 0, msg)]
        if expect.interconnect not in {"nvlink", "nvswitch"}:
            n = sum(len(g.links) for g in measurement)
            msg = f"no NVLink expectation (interconnect not stated); {n} link(s) listed, {up} up"
            return [CheckResult(self.name, Level.INFO, t, n, None, msg)]
        if not measurement:
            return [CheckResult(self.name, Level.ERROR, t, 0, links, "NVLink expected but no GPU lists any link")]
        unsupported = [f"GPU{g.index}" for g in measurement if g.state == UNSUPPORTED]
        if unsupported:
            msg = f"{', '.join(unsupported)}: the driver says the device has no NVLink ({expect.interconnect} expected)"
            return [CheckResult(self.name, Level.ERROR, t, unsupported, expect.interconnect, msg)]
        if mig and len(mig) == len(measurement):
            msg = (
                f"{', '.join(mig)} in MIG mode: NVLink cannot be queried and MIG instances do not use it; "
                "disable MIG to check the links"
            )
            return [CheckResult(self.name, Level.WARNING, t, mig, expect.interconnect, msg)]
        bad: dict[str, str] = {}
        for g in measurement:
            live = [s for s in g.links.values() if s is not None]
            if g.state == MIG:
                bad[f"GPU{g.index}"] = "in MIG mode while other GPUs are not"
            elif g.all_inactive:
                bad[f"GPU{g.index}"] = "all links inactive"
            elif len(live) < len(g.links):
                bad[f"GPU{g.index}"] = f"{len(g.links) - len(live)} of {len(g.links)} links inactive"
            elif links is not None and len(live) != links:
                bad[f"GPU{g.index}"] = f"{len(live)} links, expected {links}"
            elif speed is not None and live and min(live) < speed:
                bad[f"GPU{g.index}"] = f"link at {min(live)} GB/s, expected {speed}"
        expected = {"links_per_gpu": links, "link_gbs": speed}
        if bad:
            msg = "; ".join(f"{k}: {v}" for k, v in bad.items())
            return [CheckResult(self.name, Level.ERROR, t, bad, expected, msg)]
        listed = len(measurement)
        # Fewer GPUs listed than expected: `nvlink -s -i N` (how most published captures are
        # taken), or GPUs gone, which gpu.count judges and gates on; the links shown are fine.
        partial = (
            f" ({listed} of {expect.gpus_per_node} GPUs listed; the GPU count is gpu.count's verdict)"
            if expect.gpus_per_node is not None and listed < expect.gpus_per_node
            else ""
        )
        if links is None or speed is None:
            # No figure for this model (B300: 18 x 53.125 GB/s in the XE9780 capture, corpus/nvlink/):
            # every GPU listing the same number of links, all up at one speed, is the healthy shape
            # of an NVLink/NVSwitch board; a GPU with fewer links or a slower one is not.
            shapes = {(len(g.links), _slowest(g)) for g in measurement}
            counts = {len(g.links) for g in measurement}
            if len(shapes) == 1 and 0 not in counts:
                (n_links, gbs), = shapes
                msg = f"{listed} GPU(s) x {n_links} links up at {gbs:g} GB/s, the same on every GPU{partial}"
                return [CheckResult(self.name, Level.PASS, t, listed, expected, msg)]
            per_gpu = {f"GPU{g.index}": (len(g.links), _slowest(g)) for g in measurement}
            msg = f"GPUs differ in NVLink count or speed (links, slowest GB/s): {per_gpu}{partial}"
            return [CheckResult(self.name, Level.ERROR, t, per_gpu, expected, msg)]
        msg = f"{listed} GPU(s) x {links} links up at >= {speed} GB/s{partial}"
        return [CheckResult(self.name, Level.PASS, t, listed, expected, msg)]
