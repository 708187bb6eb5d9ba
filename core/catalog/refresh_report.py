"""What `gpuforge catalog refresh` did, field by field: refreshed, kept (and why), added or removed.

refresh.py merges and checks, aws_reads.py calls the APIs and writer.py writes the files; each adds
to the one report, which lives here so that none of them imports another for its type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Item:
    field: str
    scope: str
    status: str  # refreshed | kept | added | removed
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "scope": self.scope, "status": self.status, "detail": self.detail}


@dataclass
class RefreshReport:
    out_dir: Path
    regions: list[str]
    items: list[Item] = field(default_factory=list)
    written: list[str] = field(default_factory=list)

    def add(self, fld: str, scope: str, status: str, detail: str = "") -> None:
        self.items.append(Item(fld, scope, status, detail))

    def kept(self) -> list[Item]:
        return [i for i in self.items if i.status == "kept"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "out_dir": str(self.out_dir),
            "regions": self.regions,
            "written": self.written,
            "items": [i.to_dict() for i in self.items],
        }
