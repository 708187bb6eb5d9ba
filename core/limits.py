"""The one table of AWS limits that config checks before the first resource (aws_limits.yaml).

Each row names the limit, its value and the public source that states it. Code reads a row with
`limit("key").value`, so a number never appears twice and every refusal can cite its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

LIMITS_FILE = Path(__file__).resolve().parent / "aws_limits.yaml"


@dataclass(frozen=True)
class Limit:
    key: str
    value: int
    unit: str
    what: str
    source: str
    says: str


@cache
def limits() -> dict[str, Limit]:
    doc = yaml.safe_load(LIMITS_FILE.read_text(encoding="utf-8"))
    return {key: Limit(key=key, **row) for key, row in doc["limits"].items()}


def limit(key: str) -> Limit:
    """One row; a key that is not in the table is a programming error (KeyError names it)."""
    try:
        return limits()[key]
    except KeyError:
        raise KeyError(f"no AWS limit {key!r} in {LIMITS_FILE.name}; add a row there (its header says how)") from None
