"""The one result model shared by preflight and validate (DESIGN.md), and its renderings.

Every check yields `CheckResult`s. Missing, unparsed or timed-out evidence is `unknown` or
`error`, never `pass`. A `Report` renders as records (a table or plain lines, common/table.py), JSON, or JUnit XML, and decides
the exit code: 1 when any result is `error` (or `unknown` when unknowns are not allowed).
"""

from __future__ import annotations

import json
import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from gpuforge.common.errors import EXIT_CHECKS_FAILED, EXIT_OK
from gpuforge.common.table import Column, Rows, kv


class Level(str, Enum):
    PASS = "pass"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    UNKNOWN = "unknown"


_STYLE = {
    Level.PASS: "green",
    Level.INFO: "cyan",
    Level.WARNING: "yellow",
    Level.ERROR: "bold red",
    Level.UNKNOWN: "magenta",
}


@dataclass(frozen=True)
class CheckResult:
    check: str
    level: Level
    targets: tuple[str, ...]
    observed: Any
    expected: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["level"] = self.level.value
        d["targets"] = list(self.targets)
        return d


@dataclass
class Report:
    """Results of one run, plus free-form context (the chosen AZ, the stack, timings)."""

    kind: str  # "preflight" | "validate"
    results: list[CheckResult] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)

    def add(self, results: CheckResult | Iterable[CheckResult]) -> None:
        if isinstance(results, CheckResult):
            self.results.append(results)
        else:
            self.results.extend(results)

    def counts(self) -> dict[str, int]:
        out = {lvl.value: 0 for lvl in Level}
        for r in self.results:
            out[r.level.value] += 1
        return out

    def failed(self, unknown_fails: bool = True) -> bool:
        bad = {Level.ERROR, Level.UNKNOWN} if unknown_fails else {Level.ERROR}
        return any(r.level in bad for r in self.results)

    def exit_code(self, unknown_fails: bool = True) -> int:
        return EXIT_CHECKS_FAILED if self.failed(unknown_fails) else EXIT_OK

    def to_json(self) -> str:
        doc = {
            "kind": self.kind,
            "context": self.context,
            "summary": self.counts(),
            "results": [r.to_dict() for r in self.results],
        }
        return json.dumps(doc, indent=2, default=str, sort_keys=False)

    def rows(self, title: str | None = None) -> Rows:
        """The results as records for `common.table.emit`: a table on a terminal, plain in a pipe.

        Observed and expected values are `key=value` words, never JSON cut off with `…`.
        """
        styles = {lvl.value: style for lvl, style in _STYLE.items()}
        out = Rows(title or self.kind, [Column("check"), Column("level", styles=styles), Column("targets"),
                                        Column("observed"), Column("expected"), Column("message")])
        for r in self.results:
            out.add(r.check, r.level.value, fold_targets(r.targets), kv(r.observed), kv(r.expected), r.message)
        return out

    def write_junit(self, path: Path) -> None:
        """JUnit XML: one testcase per result; error -> failure, unknown -> error, info/warning pass."""
        suite = ET.Element(
            "testsuite",
            name=f"gpuforge-{self.kind}",
            tests=str(len(self.results)),
            failures=str(sum(r.level is Level.ERROR for r in self.results)),
            errors=str(sum(r.level is Level.UNKNOWN for r in self.results)),
        )
        for r in self.results:
            case = ET.SubElement(suite, "testcase", classname=f"gpuforge.{self.kind}", name=_case_name(r))
            if r.level is Level.ERROR:
                ET.SubElement(case, "failure", message=r.message).text = _detail(r)
            elif r.level is Level.UNKNOWN:
                ET.SubElement(case, "error", message=r.message).text = _detail(r)
            elif r.level is Level.WARNING:
                ET.SubElement(case, "system-out").text = f"warning: {r.message}"
        atomic_write(path, ET.tostring(suite, encoding="unicode", xml_declaration=True))


def fold_targets(targets: Sequence[str]) -> str:
    """Fold node names into ranges (node[1-4]) with ClusterShell where they are plain names."""
    if not targets:
        return "-"
    plain = [t for t in targets if "<->" not in t]
    pairs = [t for t in targets if "<->" in t]
    text = ""
    if plain:
        from ClusterShell.NodeSet import NodeSet, NodeSetException

        try:
            text = str(NodeSet.fromlist(plain))
        except NodeSetException:  # NodeSet rejects some names (e.g. with spaces); show them as they are
            text = ",".join(plain)
    return ", ".join([t for t in (text, *pairs) if t])


def _case_name(r: CheckResult) -> str:
    return f"{r.check}[{fold_targets(r.targets)}]" if r.targets else r.check


def _detail(r: CheckResult) -> str:
    return f"observed: {r.observed!r}\nexpected: {r.expected!r}\n{r.message}"


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` so that a failure never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
