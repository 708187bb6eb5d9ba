"""Every corpus file through its parser and evaluator, against the verdict its manifest entry
states (tests/validate/corpus/manifest.yaml, written from reading each capture). Real output
from many public sources (corpus/SOURCES.md); `bench/parser_corpus.py` prints right/total."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.validate.corpus.runner import CORPUS, TOOLS, Entry, judge, load_manifest

ENTRIES = load_manifest()


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.file for e in ENTRIES])
def test_corpus_file_gets_its_verdict(entry: Entry) -> None:
    outcome = judge(entry)
    wrong = {c: (lvl, outcome.got.get(c), outcome.messages.get(c)) for c, lvl in entry.expect.items()}
    assert outcome.right, {c: w for c, w in wrong.items() if w[0] != w[1]}


def test_manifest_names_real_files_and_known_tools() -> None:
    for e in ENTRIES:
        assert e.tool in TOOLS, e
        assert (CORPUS / e.file).is_file(), e.file
        assert e.expect, e.file
    listed = {(CORPUS / e.file).resolve() for e in ENTRIES}
    stored = {p.resolve() for p in CORPUS.rglob("*") if p.is_file() and p.parent != CORPUS}
    assert stored <= listed, f"corpus files with no manifest entry: {sorted(map(str, stored - listed))}"


def test_every_file_is_attributed_in_a_sources_file() -> None:
    sources = (CORPUS / "SOURCES.md").read_text() + (CORPUS.parent / "fixtures" / "SOURCES.md").read_text()
    sources += (CORPUS.parent / "netfix" / "SOURCES.md").read_text()
    missing = [e.file for e in ENTRIES if (e.file if not e.file.startswith("../") else e.file.rsplit("/", 1)[-1]) not in sources]
    assert not missing, missing


def test_each_tool_has_healthy_and_broken_captures() -> None:
    levels: dict[str, Counter[str]] = {}
    for e in ENTRIES:
        levels.setdefault(e.tool, Counter()).update(e.expect.values())
    for tool in ("topo", "nvlink", "smi_q", "smi_csv", "nccl"):
        assert levels[tool]["pass"] and levels[tool]["error"], (tool, levels[tool])
