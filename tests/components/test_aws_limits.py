"""The tag rules of the one AWS limits table (core/aws_limits.yaml, core/limits.py), which the
stack's team, owner and costCenter must keep (they become tags on every resource)."""

from __future__ import annotations

from gpuforge.core.limits import tag_problem


def test_tag_rules() -> None:
    assert tag_problem("platform-team", key=False) is None
    assert tag_problem("cc 12/3@x:y=z+1_a.b", key=False) is None
    assert "at most 256" in (tag_problem("v" * 257, key=False) or "")
    assert "at most 128" in (tag_problem("k" * 129, key=True) or "")
    assert "'#'" in (tag_problem("a#b", key=False) or "")
    assert "reserved" in (tag_problem("AWS:thing", key=True) or "")
