"""The one table of AWS limits (core/aws_limits.yaml): every row has a source, and code reads it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuforge.core.limits import LIMITS_FILE, limit, limits

ROOT = Path(__file__).resolve().parents[2]
CODE = [p for d in ("core", "components", "bootstrap", "cli", "policy") for p in (ROOT / d).rglob("*.py")]


def test_every_row_states_its_value_and_public_source() -> None:
    assert limits()
    for row in limits().values():
        assert isinstance(row.value, int) and row.value > 0, row.key
        assert re.match(r"https://\S+$", row.source), row.key
        assert row.what and row.says and row.unit, row.key


@pytest.mark.parametrize("key", sorted(limits()))
def test_every_row_is_read_by_a_check(key) -> None:
    readers = [p for p in CODE if f'limit("{key}")' in p.read_text(encoding="utf-8")]
    assert readers, f"no code reads {key} of {LIMITS_FILE.name}: a row no check enforces"


def test_an_unknown_row_names_the_table() -> None:
    with pytest.raises(KeyError, match=r"aws_limits\.yaml"):
        limit("no_such_limit")
