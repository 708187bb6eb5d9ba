"""Compare a rendered file set with its golden directory (and rewrite it under --update-golden).

Shared by tests/bootstrap and tests/slurm, whose goldens are both `{relative path: text}` trees.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def check_golden(root: Path, files: dict[str, str], label: str, area: str, update: bool) -> None:
    """Fail unless `root` holds exactly `files` with the same text; with `update`, write them first."""
    if update:
        shutil.rmtree(root, ignore_errors=True)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    on_disk = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert on_disk == set(files), f"{label}: file set changed; run pytest {area} --update-golden"
    for rel, text in files.items():
        assert (root / rel).read_text() == text, f"{label}/{rel} differs; pytest {area} --update-golden"
