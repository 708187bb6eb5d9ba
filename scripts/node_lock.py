"""The node install's hashed locks (issue 18, research/packaging-anchors.md §8, §9).

    python scripts/node_lock.py lock [--target py310 ...]       # rewrite bootstrap/node-locks/*.txt
    python scripts/node_lock.py wheelhouse --target py311 DIR   # the locked wheels + gpuforge's wheel

`lock` resolves pyproject.toml's base dependencies for one node interpreter with `pip download
--only-binary=:all: --platform ... --python-version ... --implementation cp --abi ...` (all four
set, or pip picks wheels for this machine), then closes the set with the target's own environment
markers: pip evaluates markers with the interpreter that runs it (pypa/pip#11664), so from a 3.11
host a dependency guarded by `python_version < "3.11"` would be missed for 3.10. Each entry
records its wheel's file name and Requires-Dist, so tests/bootstrap/test_node_locks.py checks
coverage and tags offline; the sha256 is of the downloaded file.

`wheelhouse` is gpuforge.bootstrap.nodelock.wheelhouse: the set the deploy uploads and the node
installs with `pip install --require-hashes --only-binary :all: --no-index --find-links`.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import tomllib
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from gpuforge.bootstrap.nodelock import LOCK_DIR, TARGETS, Entry, Target, render_entries, sha256_file, wheelhouse

ROOT = Path(__file__).resolve().parent.parent
INDEX = os.environ.get("GPUFORGE_LOCK_INDEX", "https://pypi.org/simple")


def marker_env(t: Target) -> dict[str, str]:
    # Marker.evaluate fills the keys not given here from this interpreter (platform_release, ...).
    return dict(
        python_version=t.python,
        python_full_version=t.python_full,
        implementation_name="cpython",
        implementation_version=t.python_full,
        platform_python_implementation="CPython",
        platform_machine=t.arch,
        platform_system="Linux",
        sys_platform="linux",
        os_name="posix",
    )


def base_requirements() -> list[Requirement]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return [Requirement(r) for r in tomllib.load(fh)["project"]["dependencies"]]


def wheel_requires(path: Path) -> tuple[str, ...]:
    """Requires-Dist of a wheel, without those that need an extra (never installed on the node)."""
    with zipfile.ZipFile(path) as zf:
        (meta,) = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        headers = HeaderParser().parsestr(zf.read(meta).decode())
    reqs = [Requirement(raw) for raw in headers.get_all("Requires-Dist") or []]
    return tuple(sorted(str(r) for r in reqs if r.marker is None or "extra" not in str(r.marker)))


def closure(roots: list[Requirement], entries: dict[str, Entry], env: dict[str, str]) -> tuple[set[str], list[Requirement]]:
    """(names the target needs that the entries cover, requirements no entry satisfies), with the
    target's markers. tests/bootstrap/test_node_locks.py walks the committed locks the same way."""
    seen: set[str] = set()
    missing: list[Requirement] = []
    todo = list(roots)
    while todo:
        req = todo.pop()
        if req.marker is not None and not Marker(str(req.marker)).evaluate(env):
            continue
        name = canonicalize_name(req.name)
        entry = entries.get(name)
        if entry is None or not req.specifier.contains(entry.version, prereleases=True):
            missing.append(req)
            continue
        if name not in seen:
            seen.add(name)
            todo.extend(Requirement(r) for r in entry.requires)
    return seen, missing


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", *args]
    if os.environ.get("PIP_CERT"):
        cmd += ["--cert", os.environ["PIP_CERT"]]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def _scan(folder: Path) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    for whl in sorted(folder.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(whl.name)
        entries[name] = Entry(name, str(version), whl.name, sha256_file(whl), wheel_requires(whl))
    return entries


def resolve(t: Target) -> list[Entry]:
    roots = base_requirements()
    env = marker_env(t)
    with tempfile.TemporaryDirectory(prefix=f"node-lock-{t.name}-") as tmp:
        folder = Path(tmp)
        reqs = [str(r) for r in roots]
        for _ in range(4):
            _pip("download", "--index-url", INDEX, *t.pip_target_args(), "-d", str(folder), *reqs)
            entries = _scan(folder)
            names, missing = closure(roots, entries, env)
            if not missing:
                return [entries[n] for n in sorted(names)]
            # Needed by the target's markers, not by this host's: fetch those too.
            reqs += [str(m) for m in missing]
            for whl in folder.glob("*.whl"):
                if parse_wheel_filename(whl.name)[0] in {canonicalize_name(m.name) for m in missing}:
                    whl.unlink()
        raise SystemExit(f"error: {t.name}: cannot close the dependency set: {', '.join(map(str, missing))}")


def render_lock(t: Target, entries: list[Entry]) -> str:
    head = [
        f"# The node install's hashed lock: gpuforge's base dependencies for {t.where}",
        f"# (CPython {t.python}, {t.abi}, {t.arch}, glibc {t.glibc[0]}.{t.glibc[1]}). Generated by scripts/node_lock.py",
        "# from pyproject.toml [project] dependencies; regenerate, do not edit. Each entry: its wheel, the",
        "# wheel's Requires-Dist (what tests/bootstrap/test_node_locks.py closes the set with), the pin.",
        "# gpuforge's own wheel is pinned next to it in gpuforge.txt by the deploy (bootstrap/nodelock.py).",
    ]
    return "\n".join(head) + "\n" + render_entries(entries)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lk = sub.add_parser("lock", help="rewrite bootstrap/node-locks/ from pyproject.toml (needs the index)")
    lk.add_argument("--target", action="append", choices=sorted(TARGETS))
    wh = sub.add_parser("wheelhouse", help="download a target's locked wheels and build gpuforge's wheel")
    wh.add_argument("--target", required=True, choices=sorted(TARGETS))
    wh.add_argument("--index", default=INDEX, help="an index URL, or a folder of wheels (offline)")
    wh.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "lock":
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        for name in args.target or sorted(TARGETS):
            t = TARGETS[name]
            entries = resolve(t)
            t.lock_file.write_text(render_lock(t, entries))
            print(f"{t.lock_file.relative_to(ROOT)}: {len(entries)} wheels")
    else:
        print(wheelhouse(TARGETS[args.target], args.out, index=args.index, cert=os.environ.get("PIP_CERT")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
