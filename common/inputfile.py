"""One reader for every file gpuforge takes from its user (issue 22).

Stack and project files, team files, inventories, baselines, a node's expected state, the
catalog and its sources: each is read through `read_document` (or `read_text`), so each gets the
same treatment and the same messages:

- the path: "not found", "is a directory", "broken symlink to X", "permission denied";
- a size bound, checked before anything is parsed and stated in the error (a 42 MB stack file
  once grew a preview to 24 GB);
- UTF-8 text with no NUL bytes ("save it as UTF-8");
- an empty file, invalid YAML/JSON (with the line), the wrong top-level type;
- unknown keys, each with a did-you-mean (`refuse_unknown_keys`).

Every problem is an InputError: one `error:` line naming the file, a `fix:` line, exit 2.
Output paths are checked before a run starts (`check_output_file`, `check_output_dir`).

Pure Python (PyYAML only): it runs in the base install, on nodes, with no Pulumi or boto3.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuforge.common.errors import InputError

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class FileKind:
    """What a file is to its reader: how it is named in messages, how large it may be, how it
    is parsed and what its top level must be."""

    what: str  # "inventory", "stack file", ...: named in every message
    max_bytes: int
    syntax: str = "yaml"  # "yaml" (JSON is YAML too) or "json"
    top: type = dict
    example: str = ""  # where a good one is: "see stacks/teams/platform.yaml"


# The bounds: each far above any real file of the kind, far below what would hurt to parse.
# A stack file of the largest real stack is ~3 KiB; an inventory of 256 nodes (MAX_NODES) as
# `pulumi stack output --json` prints it is ~120 KiB; the catalog's largest file ~10 KiB.
STACK = FileKind("stack file", 256 * KIB, example="see stacks/Pulumi.cv-training.yaml")
PROJECT = FileKind("project file", 256 * KIB, example="Pulumi.yaml of the gpuforge project")
TEAM = FileKind("team file", 64 * KIB, example="see stacks/teams/platform.yaml")
INVENTORY = FileKind("inventory", 4 * MIB,
                     example="pass `pulumi stack output --json inventory`, or write {profile, ssh, nodes: [...]}")  # fmt: skip
BASELINE = FileKind("baseline", 1 * MIB, syntax="json", example="pass a file written by validate --save-baseline")
EXPECTED = FileKind("expected-state file", 64 * KIB, syntax="json",
                    example="pass the /etc/gpuforge/expected.json bootstrap wrote ({profile, expect})")  # fmt: skip
PROFILE = FileKind("profile", 256 * KIB, example="see core/profiles/cv-training.yaml")
CATALOG = FileKind("catalog file", 1 * MIB, example="see core/catalog/meta.yaml")
PRICING = FileKind("pricing file", 64 * KIB, syntax="json",
                   example="pass /etc/gpuforge/slurm-pricing.json from the Slurm head node")  # fmt: skip
POC_RESULT = FileKind("POC result", 1 * MIB, syntax="json", example="pass the folder `gpuforge poc --out` wrote")
KUBECONFIG = FileKind("kubeconfig", 4 * MIB, example="pass the file `aws eks update-kubeconfig` wrote")
CATALOG_TABLE = FileKind("catalog table", 1 * MIB, syntax="text", top=str, example="see core/catalog/")

_TYPE_NAMES = {dict: "a mapping", list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}


def type_name(value: Any) -> str:
    if value is None:
        return "nothing"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _size(n: int) -> str:
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    if n >= KIB:
        return f"{n / KIB:.0f} KiB"
    return f"{n} bytes"


def _label(path: Path | str, flag: str | None) -> str:
    return f"{flag} {path}" if flag else str(path)


def check_path(path: Path, kind: FileKind, flag: str | None = None) -> None:
    """The path names a regular file we may read: else one InputError saying what it is instead."""
    label = _label(path, flag)
    try:
        st = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise InputError(f"{label}: broken symlink to {os.readlink(path)}",
                             f"point the link at the {kind.what}, or put the file itself there") from None  # fmt: skip
        raise InputError(f"{label}: no such file", f"check the path of the {kind.what}") from None
    except NotADirectoryError:
        raise InputError(f"{label}: a part of the path is a file, not a directory", "check the path") from None
    except PermissionError:
        raise InputError(f"{label}: permission denied (a directory on the path cannot be searched)",
                         "check the permissions of the directories on the path") from None  # fmt: skip
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{label}: is a directory", f"pass the {kind.what} itself, not the directory holding it")
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISFIFO(st.st_mode):
        raise InputError(f"{label}: not a regular file", f"pass the {kind.what} as a file")
    if stat.S_ISREG(st.st_mode) and st.st_size > kind.max_bytes:
        raise InputError(f"{label}: {_size(st.st_size)}, more than the {_size(kind.max_bytes)} a {kind.what} may be",
                         f"pass the right file; a real {kind.what} is far smaller ({kind.example})")  # fmt: skip


def read_bytes(path: Path | str, kind: FileKind, flag: str | None = None) -> bytes:
    """The file's bytes (or stdin's for `-`), at most kind.max_bytes, after check_path."""
    label = _label(path, flag)
    if str(path) == "-":
        raw = getattr(sys.stdin, "buffer", None)  # a text-only stdin (a test's StringIO) has no bytes
        data = raw.read(kind.max_bytes + 1) if raw is not None else sys.stdin.read(kind.max_bytes + 1).encode()
    else:
        path = Path(path).expanduser()
        check_path(path, kind, flag)
        try:
            with path.open("rb") as fh:
                data = fh.read(kind.max_bytes + 1)  # a FIFO or a file growing under us: still bounded
        except PermissionError:
            raise InputError(f"{label}: permission denied (cannot read it as uid {os.geteuid()})",
                             "check the file's permissions (ls -l), or run as a user who may read it") from None  # fmt: skip
        except IsADirectoryError:
            raise InputError(f"{label}: is a directory", f"pass the {kind.what} itself") from None
    if len(data) > kind.max_bytes:
        raise InputError(f"{label}: more than the {_size(kind.max_bytes)} a {kind.what} may be",
                         f"pass the right file; a real {kind.what} is far smaller ({kind.example})")  # fmt: skip
    return data


def decode(data: bytes, label: str, kind: FileKind) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{label}: not UTF-8 text (byte {exc.start}, line {line})",
                         f"save the {kind.what} as UTF-8") from None  # fmt: skip
    if "\x00" in text:
        where = text.index("\x00")
        raise InputError(f"{label}: binary data (a NUL byte at byte {where}), not text",
                         f"pass the {kind.what}, saved as UTF-8 text") from None  # fmt: skip
    return text.removeprefix("\ufeff")  # a BOM is how some editors say UTF-8


def read_text(path: Path | str, kind: FileKind, flag: str | None = None) -> str:
    """UTF-8 text of a bounded, readable file (or stdin for `-`)."""
    label = "<stdin>" if str(path) == "-" else _label(path, flag)
    return decode(read_bytes(path, kind, flag), label, kind)


def parse_text(text: str, label: str, kind: FileKind) -> Any:
    """Parse `text` as kind.syntax and check its top-level type; empty files are refused."""
    if not text.strip():
        raise InputError(f"{label}: the file is empty", f"{kind.example}" if kind.example else f"write the {kind.what}")
    if kind.syntax == "json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{label}: not valid JSON (line {exc.lineno}: {exc.msg})",
                             f"fix the {kind.what}'s syntax, or {kind.example}") from None  # fmt: skip
    elif kind.syntax == "yaml":
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            problem = getattr(exc, "problem", None)
            raise InputError(f"{label}: not valid YAML{where}" + (f": {problem}" if problem else ""),
                             f"fix the {kind.what}'s syntax") from None  # fmt: skip
        except RecursionError:
            raise InputError(f"{label}: nested too deeply to read", f"fix the {kind.what}") from None
        expanded = expanded_size(doc)
        if expanded > MAX_EXPANDED_NODES:
            raise InputError(f"{label}: its YAML aliases expand to more than {MAX_EXPANDED_NODES:,} values "
                             f"({len(text):,} bytes written)", f"write the {kind.what} without nested anchors")  # fmt: skip
    else:
        return text
    return check_top(doc, label, kind)


# YAML anchors and aliases let a few hundred bytes stand for billions of values (the "billion
# laughs"): PyYAML shares the objects, but every consumer that walks or serialises them (a stack's
# lists become JSON) expands them. The size bound alone cannot see that, so the expanded count is
# bounded too: far above any real file (a 256-node inventory is ~3,000 values).
MAX_EXPANDED_NODES = 1_000_000


def expanded_size(doc: Any) -> int:
    """How many values `doc` holds once every alias is expanded; linear in the distinct objects."""
    memo: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, (dict, list)):
            return 1
        key = id(value)
        if key not in memo:
            memo[key] = 0  # a cycle (a recursive alias) counts once
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            memo[key] = 1 + sum(size(v) for v in items)
        return memo[key]

    return size(doc)


def check_top(doc: Any, label: str, kind: FileKind) -> Any:
    if doc is None:
        raise InputError(f"{label}: the file holds nothing (only comments or `null`)", kind.example or f"write the {kind.what}")
    if not isinstance(doc, kind.top):
        raise InputError(f"{label}: the {kind.what} must be {_TYPE_NAMES[kind.top]}, not {type_name(doc)}",
                         kind.example or f"write the {kind.what} as {_TYPE_NAMES[kind.top]}")  # fmt: skip
    return doc


def read_document(path: Path | str, kind: FileKind, flag: str | None = None) -> Any:
    """Read, bound, decode, parse and type-check one file (or stdin for `-`)."""
    label = "<stdin>" if str(path) == "-" else _label(path, flag)
    return parse_text(read_text(path, kind, flag), label, kind)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' when a close match exists, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _norm(key: str) -> str:
    return re.sub(r"[-_ ]", "", key.lower())


def one_slip(a: str, b: str) -> bool:
    """True when `a` is `b` with one slip of the keyboard: a letter missing, extra, wrong or two
    neighbours swapped, after case, `-` and `_` are set aside (`instanceType` for `instance_type`)."""
    a, b = _norm(a), _norm(b)
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1 or min(len(a), len(b)) < 3:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if len(diff) == 1:
            return True
        i, j = diff if len(diff) == 2 else (0, 0)
        return j == i + 1 and a[i] == b[j] and a[j] == b[i]
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1 :] == short for i in range(len(long_)))


def refuse_unknown_keys(doc: Mapping[Any, Any], known: Iterable[str], source: str, prefix: str = "", *,
                        open_shape: bool = False) -> None:
    """Unknown keys are refused, each named with a did-you-mean.

    With `open_shape` (a mapping that may carry keys of the user's own, e.g. extra facts per
    inventory node) a key is refused only when it is one slip from a known key (`one_slip`:
    `hots`, `instace_type`, `instanceType`); any other key of the user's own passes. The README
    states this rule.
    """
    known = list(known)
    for key in doc:
        name = str(key)
        if name in known:
            continue
        if open_shape:
            close = next((k for k in known if one_slip(name, k)), None)
            if close is not None:
                raise InputError(
                    f"{source}: {prefix}{name}: unknown key (did you mean {close!r}?)",
                    f"rename it to {close}; a key of your own must differ from a known key by more than one letter",
                )
            continue
        raise InputError(f"{source}: {prefix}{name}: unknown key{did_you_mean(name, known)}",
                         f"remove or rename it (known keys: {', '.join(known)})")  # fmt: skip


# --- outputs ------------------------------------------------------------------------------------


def check_output_file(path: Path, flag: str) -> None:
    """Before a run: the file can be created (or replaced) where it is named. Creates the parent
    directories as the writer would; leaves no file behind."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag} {path}: is a directory", "give a file path")
    if path.is_symlink() and not path.exists():
        raise InputError(f"{flag} {path}: broken symlink to {os.readlink(path)}", "remove the link or give another path")
    check_output_dir(path.parent, flag, shown=path)
    if path.exists() and not os.access(path, os.W_OK) and not _root():
        raise InputError(f"{flag} {path}: not writable", "choose a path you may write")


def check_output_dir(directory: Path, flag: str, shown: Path | None = None) -> None:
    """Before a run: `directory` exists or can be made, and a file can be created in it."""
    shown = shown or directory
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{flag} {shown}: cannot create {directory}: a file is in the way", "choose another path")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{flag} {shown}: cannot create {directory}: {(exc.strerror or str(exc)).lower()}",
                         "pass a path in a directory you may write") from None  # fmt: skip
    probe = directory / f".gpuforge-write-test-{os.getpid()}"
    try:
        probe.open("x").close()
    except OSError as exc:
        raise InputError(f"{flag} {shown}: cannot write in {directory}: {(exc.strerror or str(exc)).lower()}",
                         "pass a path in a directory you may write") from None  # fmt: skip
    finally:
        probe.unlink(missing_ok=True)


def _root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
