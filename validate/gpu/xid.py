"""Xid scan: NVIDIA driver error events in the kernel log of the current boot.

The command prints a `source=` marker first and an `end` marker last, so "no Xid lines" is
only a pass when the log was actually readable and the output is complete; an unreadable log
(dmesg_restrict, no journal access) is `unknown`, never a pass (validation-anchors.md §7.3).
Current boot only: a reboot resets the GPUs, and Azure NHC also scans a recent window (§2.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck, ParseError
from gpuforge.validate.thresholds import policy

MARK = "# gpuforge xid-scan"
_SOURCE = re.compile(rf"^{MARK} source=(?P<src>journalctl|dmesg|none)$")
# The driver's formats (NVIDIA/open-gpu-kernel-modules: the Xid printer in src/nvidia/src/kernel/
# gpu/rc/kernel_rc.c, and gpu/arch/ampere/kern_gpu_error_cont_ga100.c at df1c9a3, whose comment
# shows all three): "NVRM: Xid (PCI:%04x:%02x:%02x): %d, ..." and, for an error
# attributed to a MIG instance, "(PCI:%04x:%02x:%02x GPU-I:%02u)" or "... GPU-I:%02u GPU-CI:%02u)".
# Older drivers printed no "PCI:" prefix: "NVRM: Xid (0000:03:00): 14, Channel 00000001" (the
# example in NVIDIA's Xid documentation, as quoted by leptonai/gpud's tests).
# A GPU that drops off the bus is logged without any Xid line by newer drivers (570: "NVRM: The
# NVIDIA GPU 0000:b3:00.0 / (PCI ID: ...) installed in this system has / fallen off the bus and is
# not responding to commands." over three lines, NVIDIA/NVSentinel#155, leptonai/gpud#1209) and
# by old ones ("NVRM: GPU at 0000:01:00.0 has fallen off the bus.", Bumblebee-Project/Bumblebee#554).
# It is reported as Xid 79 (GPU has fallen off the bus), which is what it is.
GREP = r"NVRM: Xid|fallen off the bus|NVRM: The NVIDIA GPU [0-9A-Fa-f]"
_GPU_LINE = re.compile(r"NVRM: (?:The NVIDIA GPU|GPU at) (?P<bdf>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)")
_FALLEN = "fallen off the bus"
FALLEN_XID = 79
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bdf>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)"
    r"(?P<mig>(?:\s+GPU-C?I:\s*\d+)*)\s*\):?\s*(?P<code>\d+)\b"
)


# Xid 154 (GPU_RECOVERY_ACTION_CHANGED) carries the driver's own verdict: "GPU recovery action
# changed from 0x%x (%s) to 0x%x (%s)" (NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/
# gpu.c gpuRefreshRecoveryAction, nverror.h, at df1c9a3). The codes are NV2080_CTRL_GPU_RECOVERY_
# ACTION (ctrl2080gpu.h): 0 None, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset,
# 5 recover the IMEX domain (not this GPU). The names vary by driver ("OS Reboot", "PF FLR"), so
# the code decides: a GPU that needs any action but none/IMEX is not usable until it gets it.
HEALTHY_RECOVERY_ACTIONS = {0, 5}
RECOVERY_ACTION_XID = 154
_RECOVERY = re.compile(r"recovery action changed from 0x[0-9A-Fa-f]+ \([^)]*\)\s+to 0x(?P<to>[0-9A-Fa-f]+) \((?P<name>[^)]*)\)")


@dataclass(frozen=True)
class XidEvent:
    pci: str
    code: int
    line: str
    mig: str | None = None  # "GPU-I:05 GPU-CI:00" when the driver attributed it to a MIG instance
    recovery: tuple[int, str] | None = None  # Xid 154: the action the driver now requires

    def needs_recovery(self) -> bool:
        return self.recovery is not None and self.recovery[0] not in HEALTHY_RECOVERY_ACTIONS


@dataclass(frozen=True)
class XidScan:
    source: str  # journalctl | dmesg | none
    events: tuple[XidEvent, ...]


class XidScanCheck(NodeCheck[XidScan]):
    name: ClassVar[str] = "gpu.xid"
    tier: ClassVar[int] = 0
    timeout_s: ClassVar[float] = 30.0

    def command(self) -> str:
        # readable = at least one kernel line of this boot comes back (a silent permission
        # failure would otherwise look like a clean log)
        return (
            'if [ -n "$(journalctl -k -b --no-pager -q -n 1 2>/dev/null)" ]; then '
            f"echo '{MARK} source=journalctl'; journalctl -k -b --no-pager -q | grep -E '{GREP}' || true; "
            'elif [ -n "$(dmesg 2>/dev/null | head -n 1)" ]; then '
            f"echo '{MARK} source=dmesg'; dmesg | grep -E '{GREP}' || true; "
            f"else echo '{MARK} source=none'; fi; echo '{MARK} end'"
        )

    def parse(self, stdout: str) -> XidScan:
        lines = [ln.rstrip() for ln in stdout.splitlines() if ln.strip()]
        if not lines or not (m := _SOURCE.match(lines[0])):
            raise ParseError("missing the xid-scan source marker")
        if lines[-1] != f"{MARK} end":
            raise ParseError("output ends before the xid-scan end marker (truncated or timed out)")
        events = []
        last_gpu: str | None = None  # the GPU a multi-line "fallen off the bus" message names first
        for line in lines[1:-1]:
            x = _XID.search(line)
            if x is not None:
                mig = " ".join(x["mig"].split()) or None
                r = _RECOVERY.search(line) if int(x["code"]) == RECOVERY_ACTION_XID else None
                recovery = (int(r["to"], 16), r["name"]) if r else None
                events.append(XidEvent(f"PCI:{x['bdf']}", int(x["code"]), line.strip(), mig, recovery))
                continue
            if g := _GPU_LINE.search(line):
                last_gpu = g["bdf"]
            if _FALLEN in line:
                events.append(XidEvent(f"PCI:{last_gpu or 'unknown'}", FALLEN_XID, line.strip()))
            elif g is None:
                raise ParseError(f"unexpected line in Xid scan: {line[:80]!r}")
        return XidScan(m["src"], tuple(events))

    def evaluate(self, node: str, measurement: XidScan, expect: Expectations) -> list[CheckResult]:
        t = (node,)
        if measurement.source == "none":
            return [CheckResult(self.name, Level.UNKNOWN, t, None, None, "kernel log not readable (journal or dmesg)")]
        fatal_codes = set(policy(expect, "xid_fatal"))
        fatal = [e for e in measurement.events if e.code in fatal_codes or e.needs_recovery()]
        other = [e for e in measurement.events if e not in fatal]
        observed = [{"pci": e.pci, "xid": e.code} for e in measurement.events]
        if fatal:
            where = sorted({(e.code, e.pci) for e in fatal})
            msg = "fatal Xid " + ", ".join(f"{c} on {p}" for c, p in where) + f": {fatal[0].line[:160]}"
            return [CheckResult(self.name, Level.ERROR, t, observed, sorted(fatal_codes), msg)]
        if other:
            seen = sorted({e.code for e in other})
            return [CheckResult(self.name, Level.WARNING, t, observed, None, f"non-fatal Xid(s) {seen} this boot")]
        msg = f"no Xid in this boot's kernel log ({measurement.source})"
        return [CheckResult(self.name, Level.PASS, t, [], None, msg)]
