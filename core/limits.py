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


# The characters a tag key or value may hold besides Unicode letters, numbers and spaces, and the
# prefix keys may not start with: not numbers, so not rows of the table. Source, as for the tag
# rows: https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html ("Generally allowed
# characters are: letters, numbers, and spaces representable in UTF-8, and the following
# characters: + - = . _ : / @." and "Do not use aws:, AWS:, or any upper or lowercase combination
# of such as a prefix for keys").
TAG_EXTRA_CHARACTERS = "+-=._:/@"
TAG_RESERVED_PREFIX = "aws:"


def tag_problem(text: str, *, key: bool) -> str | None:
    """Why `text` cannot be a tag key (key=True) or value; None when it can."""
    kind = "key" if key else "value"
    most = limit("tag_key_chars").value if key else limit("tag_value_chars").value
    if len(text) > most:
        return f"{len(text)} characters; a tag {kind} takes at most {most}"
    bad = sorted({c for c in text if not (c.isalnum() or c == " " or c in TAG_EXTRA_CHARACTERS)})
    if bad:
        allowed = " ".join(TAG_EXTRA_CHARACTERS)
        return f"{''.join(bad)!r} cannot be in a tag {kind} (allowed: letters, numbers, spaces and {allowed})"
    if key and text.lower().startswith(TAG_RESERVED_PREFIX):
        return f"tag keys may not start with {TAG_RESERVED_PREFIX!r} (reserved for AWS)"
    return None
