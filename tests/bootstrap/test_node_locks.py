"""The node install's hashed locks (bootstrap/node-locks/, scripts/node_lock.py): for each node
interpreter, every base dependency of pyproject.toml and everything they need under that
interpreter's markers is pinned with a sha256, by exactly one wheel whose tags that interpreter
installs. Ubuntu 22.04 runs CPython 3.10, 24.04 runs 3.12; the first-boot rehearsal's Debian 12
runs 3.11 (tests/SUBSTITUTIONS.md). Offline: the locks carry each wheel's name and Requires-Dist."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from gpuforge.bootstrap.nodelock import OS_TARGET, TARGETS, Entry, Target, parse_lock

ROOT = Path(__file__).resolve().parents[2]
# Dependencies with compiled code: the ones a wrong tag would break on the node (issue 18 names them).
COMPILED = {"pydantic-core", "cryptography", "bcrypt", "pynacl", "cffi", "pyyaml"}


def base_requirements() -> list[Requirement]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return [Requirement(r) for r in tomllib.load(fh)["project"]["dependencies"]]


def interpreter_tags(t: Target) -> set[Tag]:
    """What `pip install` on that node accepts (packaging.tags as pip computes them for CPython)."""
    version = tuple(int(p) for p in t.python.split("."))
    return {*cpython_tags(version, abis=[t.abi], platforms=t.platforms()),
            *compatible_tags(version, interpreter=t.abi, platforms=t.platforms())}  # fmt: skip


def marker_env(t: Target) -> dict[str, str]:
    # Marker.evaluate fills the keys not given here from this interpreter (platform_release, ...).
    return dict(python_version=t.python, python_full_version=t.python_full, implementation_name="cpython",
               platform_python_implementation="CPython", platform_machine=t.arch, sys_platform="linux",
               platform_system="Linux", os_name="posix")  # fmt: skip


def problems(t: Target, entries: list[Entry]) -> list[str]:
    """Everything wrong with `entries` as the lock of `t` (empty: the node's pip will install it)."""
    out: list[str] = []
    by_name = {e.name: e for e in entries}
    if len(by_name) != len(entries):
        out.append("a distribution is pinned twice")
    tags = interpreter_tags(t)
    env = marker_env(t)
    needed: set[str] = set()
    todo = base_requirements()
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        entry = by_name.get(name)
        if entry is None:
            out.append(f"{req} is needed on {t.name} and not pinned")
            continue
        if not req.specifier.contains(entry.version, prereleases=True):
            out.append(f"{req} is needed and {name}=={entry.version} is pinned")
        if name not in needed:
            needed.add(name)
            todo.extend(Requirement(r) for r in entry.requires)
    for e in entries:
        wname, wversion, _, wtags = parse_wheel_filename(e.wheel)
        if (wname, str(wversion)) != (e.name, e.version):
            out.append(f"{e.name}=={e.version}: its wheel is {e.wheel}")
        if not wtags & tags:
            out.append(f"{e.wheel} does not install on CPython {t.python} ({t.where})")
        if e.name not in needed:
            out.append(f"{e.name} is pinned but nothing needs it on {t.name}")
    return out


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_base_dependency_has_a_hashed_wheel_for_the_node_interpreter(target: str) -> None:
    t = TARGETS[target]
    entries = parse_lock(t.lock_file.read_text())
    assert problems(t, entries) == []
    names = {e.name for e in entries}
    # the base dependencies themselves, and the compiled ones paramiko and pydantic pull in
    assert {canonicalize_name(r.name) for r in base_requirements()} <= names
    assert names >= COMPILED
    for e in entries:
        if e.name in COMPILED:
            # a compiled wheel, for this interpreter's ABI or the stable ABI (cryptography, bcrypt, pynacl)
            (tag, *_) = sorted(parse_wheel_filename(e.wheel)[3], key=str)
            assert tag.abi in (t.abi, "abi3"), e.wheel
            assert tag.platform != "any", e.wheel


def test_each_ubuntu_release_installs_its_own_lock() -> None:
    assert {os: TARGETS[name].python for os, name in OS_TARGET.items()} == {"ubuntu-22.04": "3.10", "ubuntu-24.04": "3.12"}


def test_the_check_refuses_a_wheel_for_another_interpreter() -> None:
    """pydantic-core's 3.11 wheel in the 3.10 lock: the coverage check says so (it is not vacuous)."""
    py310, py311 = TARGETS["py310"], TARGETS["py311"]
    entries = parse_lock(py310.lock_file.read_text())
    other = {e.name: e for e in parse_lock(py311.lock_file.read_text())}["pydantic-core"]
    swapped = [other if e.name == "pydantic-core" else e for e in entries]
    assert any("does not install on CPython 3.10" in p for p in problems(py310, swapped))


def test_the_check_follows_the_target_interpreters_markers() -> None:
    """cryptography needs typing-extensions only below 3.11 (a marker): dropping every other reason
    for it, the 3.10 lock still needs it and the 3.12 lock does not."""
    for name, still_needed in (("py310", True), ("py312", False)):
        t = TARGETS[name]
        entries = parse_lock(t.lock_file.read_text())
        # Only cryptography's marked requirement may pull typing-extensions in this variant.
        keep = [(e, tuple(r for r in e.requires if "typing" not in r or e.name == "cryptography")) for e in entries]
        trimmed = [
            Entry(e.name, e.version, e.wheel, e.sha256, reqs)
            for e, reqs in keep
            if e.name not in ("typing-extensions", "typing-inspection", "pydantic", "pydantic-core", "annotated-types")
        ]
        got = problems(t, trimmed)
        assert any(p.startswith("typing-extensions") and "not pinned" in p for p in got) is still_needed, (name, got)
