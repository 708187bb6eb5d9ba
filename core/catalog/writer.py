"""Writing the refreshed catalog: each file rendered as text, then all of them or none.

The YAML files keep their header comments (where the data comes from); regions.yaml is kept byte
for byte when its AZ lists did not change, so a refresh diff shows news only; meta.yaml records
when, from where, what was refreshed and what was kept. `write_all_or_none` stages every file
next to its target and only then swaps them in, with a rollback if a swap fails.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from gpuforge.core.catalog.refresh_report import RefreshReport


def _header_comments(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


def _dump_yaml(path: Path, doc: dict[str, Any]) -> str:
    # The header comment says where the data comes from; keep it when the body is rewritten.
    return _header_comments(path) + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100, default_flow_style=None)


def regions_text(path: Path, doc: dict[str, Any]) -> str:
    # Unchanged AZ lists: keep the file byte for byte (its comments and layout), so a refresh diff shows news only.
    return path.read_text() if yaml.safe_load(path.read_text()) == doc else _dump_yaml(path, doc)


def meta_text(path: Path, report: RefreshReport, now: datetime) -> str:
    """meta.yaml with only its `refreshed:` block rewritten: the hand-written rest (comments,
    `>-` folded sources, key order) stays byte for byte, so `--in-place` shows news only in the
    diff (a whole-file yaml.safe_dump turned every folded block into quoted text; issue 22)."""
    text = path.read_text()
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    block = {"refreshed": {
        "at": now.isoformat(timespec="seconds"),
        "regions": report.regions,
        "endpoint": endpoint or "AWS",
        "refreshed": sorted({i.field for i in report.items if i.status in ("refreshed", "added", "removed")}),
        "kept": [i.to_dict() for i in report.kept()],
    }}  # fmt: skip
    dumped = yaml.safe_dump(block, sort_keys=False, allow_unicode=True, width=100, default_flow_style=None)
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(r"^refreshed:", line)), None)
    if start is None:
        return (text if text.endswith("\n") or not text else text + "\n") + dumped
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^[^\s#]", lines[i])), len(lines))
    return "".join(lines[:start]) + dumped + "".join(lines[end:])


def write_all_or_none(files: dict[Path, str]) -> None:
    """Write every file or none: stage each next to its target, then swap them in, undoing on failure.

    This is common.results.atomic_write for a set of files: a single atomic_write per file would
    leave a mixed old/new catalog if the third of five writes failed.
    """
    staged: dict[Path, Path] = {}
    backups: dict[Path, Path] = {}
    swapped: list[Path] = []
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            staged[path] = Path(tmp_name)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
        for path in files:
            if path.exists():
                fd, bak = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".bak")
                os.close(fd)
                shutil.copy2(path, bak)
                backups[path] = Path(bak)
        try:
            for path, staged_file in staged.items():
                os.replace(staged_file, path)
                swapped.append(path)
        except BaseException:
            for path in swapped:  # put back what was there before this refresh
                if path in backups:
                    os.replace(backups.pop(path), path)
                else:
                    path.unlink(missing_ok=True)
            raise
    finally:
        for leftover in [*staged.values(), *backups.values()]:
            leftover.unlink(missing_ok=True)
