"""Benchmark: the base install against the full (deploy) install, built from the same wheel in one run.

Builds gpuforge's wheel from this checkout as the deploy builds the nodes' wheel (bootstrap/nodelock.py
build_wheel: from a clean copy, never the checkout's stale build/), then two clean venvs:

- base: the wheel and the base dependencies only, with the node's own command (`pip install
  --require-hashes --only-binary :all: --no-index --find-links`, this host's py311 lock, the wheel
  set cached under ~/.cache/gpuforge/node-wheels after the first run);
- full: `pip install '<wheel>[deploy]'` from the configured index (what an operator installs
  to deploy, and what the whole distribution was before issue 18).

For each: site-packages in MB (pip, setuptools, pkg_resources, _distutils_hack and their
dist-info excluded: the goal counts gpuforge and its dependencies), the same without the .pyc
files pip compiles at install (about half of the base: what the wheels themselves unpack), the number of installed
distributions (pip and setuptools excluded), and the wall time of `gpuforge --help` and
`gpuforge validate --help` (median of 5, after one warm-up run). Goal: base under 40 MB.

    .venv/bin/python bench/install_size.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

from gpuforge import __version__
from gpuforge.bootstrap.nodelock import GPUFORGE_LINE, TARGETS, build_wheel, cache_dir, wheelhouse

ROOT = Path(__file__).resolve().parent.parent
NOT_COUNTED = ("pip", "setuptools", "pkg_resources", "_distutils_hack", "distutils-precedence.pth")
GOAL_MB = 40.0


def make_venv(home: Path) -> Path:
    venv.EnvBuilder(with_pip=True).create(home)
    return home / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True)  # fmt: skip
    return Path(out.stdout.strip())


def counted(entry: Path) -> bool:
    name = entry.name
    if name in ("__pycache__",):
        return True
    base = name.split("-")[0].lower() if name.endswith(".dist-info") else name
    return base not in NOT_COUNTED


def size_mb(sp: Path, *, pyc: bool = True) -> float:
    """MB of site-packages (counted entries); `pyc` False: without the .pyc pip compiled at install."""
    total = 0
    for entry in sp.iterdir():
        if not counted(entry):
            continue
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file() and not p.is_symlink()]
        total += sum(p.stat().st_size for p in files if pyc or p.suffix != ".pyc")
    return total / 1e6


def distributions(python: Path) -> int:
    out = subprocess.run([str(python), "-m", "pip", "--isolated", "list", "--format", "json"], check=True,
                         capture_output=True, text=True)  # fmt: skip
    return sum(1 for d in json.loads(out.stdout) if d["name"].lower() not in ("pip", "setuptools"))


def startup_s(exe: Path, *args: str, repeat: int = 5) -> float:
    subprocess.run([str(exe), *args], check=True, capture_output=True, cwd="/")  # warm-up (.pyc, page cache)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([str(exe), *args], check=True, capture_output=True, cwd="/")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(label: str, python: Path) -> dict[str, object]:
    exe = python.parent / "gpuforge"
    return {
        "install": label,
        "site_packages_mb": round(size_mb(site_packages(python)), 1),
        "no_pyc_mb": round(size_mb(site_packages(python), pyc=False), 1),
        "distributions": distributions(python),
        "help_s": round(startup_s(exe, "--help"), 3),
        "validate_help_s": round(startup_s(exe, "validate", "--help"), 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", type=Path, help="build the venvs here and keep them (default: a temp dir)")
    ap.add_argument("--index", default=os.environ.get("GPUFORGE_LOCK_INDEX", "https://pypi.org/simple"),
                    help="where the node wheel set is downloaded from the first time")  # fmt: skip
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="install-size-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        whl = build_wheel(work / "dist", ROOT)
        t = TARGETS["py311"]
        wh = wheelhouse(t, cache_dir(t, __version__), index=args.index, gpuforge_wheel=whl, cert=os.environ.get("PIP_CERT"))
        base = make_venv(work / "base")
        subprocess.run([str(base), "-m", "pip", "--isolated", "install", "-q", "--require-hashes", "--only-binary", ":all:",
                        "--no-index", "--find-links", str(wh), "-r", str(wh / t.lock_name), "-r", str(wh / GPUFORGE_LINE)],
                       check=True)  # fmt: skip
        full = make_venv(work / "full")
        # the configured index (pip.conf), as an operator's pip would use it
        subprocess.run([str(full), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{whl}[deploy]"], check=True)
        rows = [measure("base (nodes, validate, health-check)", base), measure("full ([deploy])", full)]
    cols = [("install", "install"), ("site_packages_mb", "site-packages MB"), ("no_pyc_mb", "MB without .pyc"),
            ("distributions", "distributions"),
            ("help_s", "gpuforge --help s"), ("validate_help_s", "validate --help s")]  # fmt: skip
    print("| " + " | ".join(title for _, title in cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[key]) for key, _ in cols) + " |")
    base_mb = float(str(rows[0]["site_packages_mb"]))
    print(f"\nbase {base_mb} MB against the goal of {GOAL_MB} MB: {'met' if base_mb < GOAL_MB else 'NOT met'}"
          f"; python {sys.version.split()[0]}, gpuforge {__version__}")  # fmt: skip
    return 0 if base_mb < GOAL_MB else 1


if __name__ == "__main__":
    sys.exit(main())
