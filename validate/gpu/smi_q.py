"""Parser for `nvidia-smi -q [-d ...]` text: one indentation tree per `GPU <bus id>` block.

Lines are `Key : Value` or a bare section title; nesting is by indentation. Values `N/A`,
`[N/A]` and `Not Supported` become None. We parse by key path and tolerate missing sections
(drivers add and rename them: `Clocks Throttle Reasons` became `Clocks Event Reasons`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpuforge.validate.checks import ParseError

_GPU_HEADER = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_ATTACHED = re.compile(r"^Attached GPUs\s*:\s*(?P<n>\d+)\s*$")
_KEY_VALUE = re.compile(r"^(?P<key>.+?)\s+:\s*(?P<value>.*)$")
_UNAVAILABLE = {"N/A", "[N/A]", "Not Supported", "[Not Supported]", ""}


@dataclass
class SmiBlock:
    """One GPU's tree: nested dicts of section -> {key: value | SmiBlock-like dict}."""

    bus_id: str
    tree: dict[str, Any] = field(default_factory=dict)

    def _walk(self, path: tuple[str, ...]) -> tuple[bool, Any]:
        """(whether the path is printed at all, its value or None)."""
        node: Any = self.tree
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return False, None
            node = node[part]
        return True, node

    def get(self, *path: str) -> Any:
        return self._walk(path)[1]

    def has(self, *path: str) -> bool:
        """Whether the key is printed at all (with any value, N/A included)."""
        return self._walk(path)[0]

    def first(self, *paths: tuple[str, ...]) -> Any:
        """The first path that exists (for keys renamed between driver versions)."""
        for path in paths:
            value = self.get(*path)
            if value is not None:
                return value
        return None


def parse_smi_q(stdout: str) -> list[SmiBlock]:
    """GPU blocks in order. ParseError when there are none, or fewer than `Attached GPUs` says."""
    blocks: list[SmiBlock] = []
    attached: int | None = None
    stack: list[tuple[int, dict[str, Any]]] = []
    for raw in stdout.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.startswith("="):
            continue
        m = _GPU_HEADER.match(line)
        if m:
            blocks.append(SmiBlock(m["bus"]))
            stack = [(-1, blocks[-1].tree)]
            continue
        if not blocks:
            a = _ATTACHED.match(line)
            if a:
                attached = int(a["n"])
            continue  # preamble: timestamp, driver version
        indent = len(line) - len(line.lstrip(" "))
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        kv = _KEY_VALUE.match(line.strip())
        if kv:  # keys are padded, so "Key   : value"; a bare title opens a section
            v = kv["value"].strip()
            parent[kv["key"].strip()] = None if v in _UNAVAILABLE else v
        else:
            child: dict[str, Any] = {}
            parent[line.strip()] = child
            stack.append((indent, child))
    if not blocks:
        raise ParseError("no 'GPU <bus id>' block in nvidia-smi -q output")
    # `nvidia-smi -q -i N` (other people's captures) prints the whole "Attached GPUs" count but one
    # block; a full -q block ends with its "Processes" section, so a complete single block is that,
    # not a cut-off output (our own command never selects a GPU).
    selected = len(blocks) == 1 and "Processes" in blocks[0].tree
    if attached is not None and attached != len(blocks) and not selected:
        raise ParseError(f"'Attached GPUs : {attached}' but {len(blocks)} GPU block(s): output truncated?")
    return blocks


def as_int(value: Any) -> int | None:
    if value is None or isinstance(value, dict):
        return None
    try:
        return int(str(value).split()[0])
    except ValueError:
        raise ParseError(f"not a count: {value!r}") from None


def as_yes(value: Any) -> bool | None:
    if value is None or isinstance(value, dict):
        return None
    text = str(value).strip().lower()
    if text in {"yes", "active"}:
        return True
    if text in {"no", "not active"}:
        return False
    raise ParseError(f"not yes/no: {value!r}")
