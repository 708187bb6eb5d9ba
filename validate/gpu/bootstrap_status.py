"""The bootstrap stage's status file, /var/lib/gpuforge/bootstrap-status.json.

Format (schema 1) as bootstrap/templates/status.py.j2 writes it: `state` running|succeeded|
failed, `started_at`/`finished_at`, `current_phase`, `error` {phase, message, exit_code},
`versions` {expected, observed}, `phases` [{name, state, ...}]. A node not built by gpuforge
(on-prem) has no file: that is `info` unless the profile says gpuforge bootstrapped it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck, ParseError
from gpuforge.validate.thresholds import policy

PATH = "/var/lib/gpuforge/bootstrap-status.json"
MISSING = "# gpuforge bootstrap-status missing"
SCHEMA = 1
_STATES = {"running", "succeeded", "failed"}


@dataclass(frozen=True)
class BootstrapStatus:
    present: bool
    doc: dict[str, Any]


class BootstrapStatusCheck(NodeCheck[BootstrapStatus]):
    name: ClassVar[str] = "bootstrap.status"
    tier: ClassVar[int] = 0
    timeout_s: ClassVar[float] = 15.0

    def command(self) -> str:
        return f"if [ -e {PATH} ]; then cat {PATH}; else echo '{MISSING}'; fi"

    def parse(self, stdout: str) -> BootstrapStatus:
        if stdout.strip() == MISSING:
            return BootstrapStatus(False, {})
        try:
            doc = json.loads(stdout)
        except json.JSONDecodeError as exc:
            raise ParseError(f"status file is not JSON ({exc.msg} at line {exc.lineno}): truncated?") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ParseError(f"status file schema {doc.get('schema') if isinstance(doc, dict) else '?'}, want {SCHEMA}")
        if doc.get("state") not in _STATES:
            raise ParseError(f"status file state {doc.get('state')!r} not one of {sorted(_STATES)}")
        return BootstrapStatus(True, doc)

    def evaluate(self, node: str, measurement: BootstrapStatus, expect: Expectations) -> list[CheckResult]:
        t = (node,)
        if not measurement.present:
            expected = bool(policy(expect, "bootstrap_expected"))
            level = Level.ERROR if expected else Level.INFO
            why = "the profile says gpuforge bootstrapped it" if expected else "not a gpuforge-bootstrapped node?"
            return [CheckResult(self.name, level, t, None, "succeeded", f"no {PATH} ({why})")]
        doc = measurement.doc
        state = doc["state"]
        if state == "failed":
            err = doc.get("error") or {}
            msg = f"bootstrap failed in phase {err.get('phase')!r}: {err.get('message')} (exit {err.get('exit_code')})"
            return [CheckResult(self.name, Level.ERROR, t, state, "succeeded", msg)]
        if state == "running":
            # Not evidence of a fault: the node is not done yet. slurmd runs the health check as it
            # starts, inside the bootstrap's slurm-start phase; as an error it drained the node, the
            # self-check then failed on the drain, and the failed bootstrap kept it drained (first-boot
            # rehearsal of a cv-training cluster). Unknown is held (missing evidence never drains).
            msg = f"bootstrap still running phase {doc.get('current_phase')!r} (started {doc.get('started_at')})"
            return [CheckResult(self.name, Level.UNKNOWN, t, state, "succeeded", msg)]
        versions = doc.get("versions") or {}
        want, got = versions.get("expected") or {}, versions.get("observed") or {}
        drift = {k: {"expected": want[k], "observed": got[k]} for k in want if k in got and str(got[k]) != str(want[k])}
        if drift:
            msg = "versions differ from the manifest: " + ", ".join(f"{k} {v['observed']}" for k, v in drift.items())
            return [CheckResult(self.name, Level.ERROR, t, drift, want, msg)]
        msg = f"bootstrap succeeded at {doc.get('finished_at')} (run {doc.get('run')})"
        return [CheckResult(self.name, Level.PASS, t, got, want, msg)]
