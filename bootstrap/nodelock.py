"""The node install's wheel set: gpuforge's base dependencies, pinned by sha256 per node target
(bootstrap/node-locks/, written by scripts/node_lock.py), plus gpuforge's own wheel.

Where the node gets it (the `gpuforge` bootstrap phase): `<source>/<prefix>` holds the target's
lock, `gpuforge.txt` (one hashed line for gpuforge's wheel) and the wheels. The source is the
stack's checkpoint bucket (the deploy uploads the set, components/nodeinstall.py; the node reads
it with its instance role) or, with `gpuforge:mirror` `gpuforge-wheels=URL`, the mirror.

Stdlib only: the render reads the lock's digest, the deploy uploads the files.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

LOCK_DIR = Path(__file__).resolve().parent / "node-locks"
# The bucket prefix under which the deploy uploads the node install, and the node role may only read.
BUCKET_PREFIX = "gpuforge-node"
GPUFORGE_LINE = "gpuforge.txt"  # the file with gpuforge's own hashed line, next to the lock


class NodeLockError(ValueError):
    """args: (message, fix)."""


@dataclass(frozen=True)
class Target:
    """A node interpreter: where it runs, its CPython and its glibc (the newest manylinux it takes)."""

    name: str  # py310
    where: str
    python: str  # 3.10
    python_full: str  # the distribution's patch release, for python_full_version markers
    glibc: tuple[int, int]
    arch: str = "x86_64"

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def lock_name(self) -> str:
        return f"node-{self.arch}-{self.name}.txt"

    @property
    def lock_file(self) -> Path:
        return LOCK_DIR / self.lock_name

    def prefix(self, version: str) -> str:
        """Where this target's set lies in the bucket or on the mirror: keyed by gpuforge's version,
        the architecture and the Python version (ParallelCluster keys its node wheels by arch too)."""
        return f"{version}/{self.arch}/{self.name}/"

    def platforms(self) -> list[str]:
        """manylinux tags this glibc runs, newest first (pip does not expand manylinux_2_X itself)."""
        major, newest = self.glibc
        tags = [f"manylinux_{major}_{minor}_{self.arch}" for minor in range(newest, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        return tags + [f"{legacy[m]}_{self.arch}" for m in sorted(legacy, reverse=True) if m <= newest]

    def pip_target_args(self) -> list[str]:
        """pip download's four target options (set all four, or pip picks wheels for this machine)."""
        args = ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp", "--abi", self.abi]
        for p in self.platforms():
            args += ["--platform", p]
        return args


# Ubuntu 22.04: python3 3.10.12, glibc 2.35; Ubuntu 24.04: python3 3.12.3, glibc 2.39 (jammy-updates
# and noble). py311 is the first-boot rehearsal's Debian 12 root (3.11.2, glibc 2.36; tests/SUBSTITUTIONS.md).
TARGETS = {
    t.name: t
    for t in (
        Target("py310", "Ubuntu 22.04 nodes", "3.10", "3.10.12", (2, 35)),
        Target("py312", "Ubuntu 24.04 nodes", "3.12", "3.12.3", (2, 39)),
        Target("py311", "the first-boot rehearsal's Debian 12 root", "3.11", "3.11.2", (2, 36)),
    )
}
OS_TARGET = {"ubuntu-22.04": "py310", "ubuntu-24.04": "py312"}


@dataclass(frozen=True)
class Entry:
    name: str  # normalised (PEP 503)
    version: str
    wheel: str
    sha256: str
    requires: tuple[str, ...]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_PIN = re.compile(r"([A-Za-z0-9._-]+)==(\S+) --hash=sha256:([0-9a-f]{64})")


def parse_lock(text: str) -> list[Entry]:
    """The entries of a lock (comment lines before each pin carry its wheel and its Requires-Dist)."""
    entries, wheel, requires = [], "", ""
    for line in text.splitlines():
        if line.startswith("# requires: "):
            requires = line.removeprefix("# requires: ")
        elif line.startswith("# ") and line.endswith(".whl"):
            wheel = line[2:]
        elif line and not line.startswith("#"):
            m = _PIN.fullmatch(line)
            if m is None or not wheel:
                raise NodeLockError(f"not a hashed pin after its wheel's name: {line!r}", "regenerate with scripts/node_lock.py")
            req_list = () if requires in ("-", "") else tuple(requires.split(" | "))
            entries.append(Entry(normalise(m[1]), m[2], wheel, m[3], req_list))
            wheel, requires = "", ""
    return entries


def render_entries(entries: list[Entry]) -> str:
    out = []
    for e in entries:
        out.append(f"# {e.wheel}")
        out.append(f"# requires: {' | '.join(e.requires)}" if e.requires else "# requires: -")
        out.append(f"{e.name}=={e.version} --hash=sha256:{e.sha256}")
    return "\n".join(out) + "\n"


def target_for_os(os_name: str) -> Target:
    return TARGETS[OS_TARGET[os_name]]


def lock_sha256(t: Target) -> str:
    """The digest the node checks the lock against before pip reads it (in the user data)."""
    return hashlib.sha256(t.lock_file.read_bytes()).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_dir(t: Target, version: str) -> Path:
    """Where this machine keeps a target's wheel set between runs (the deploy, the tests, the
    rehearsal): pip downloads each locked wheel once, later runs install offline from here."""
    base = Path(
        os.environ.get("GPUFORGE_NODE_WHEELS")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuforge" / "node-wheels"
    )
    return base / version / t.arch / t.name


def checkout_root() -> Path | None:
    """The source checkout this package runs from (editable install), or None (a wheel install)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "cli" / "__init__.py").is_file() else None


def build_wheel(out: Path, root: Path | None = None) -> Path:
    """gpuforge's wheel from the checkout, with pip (in every venv) and build isolation: pip installs
    the build backend pyproject.toml names (setuptools>=68) through pip's own configuration, as
    `python -m build` does. SOURCE_DATE_EPOCH keeps the wheel's zip times fixed."""
    src = root or checkout_root()
    if src is None:
        raise NodeLockError(
            "gpuforge runs from a wheel, not a checkout: it cannot build the wheel the nodes install",
            "deploy from a checkout (pip install -e '.[deploy]'), or serve the node wheels from gpuforge:mirror gpuforge-wheels=",
        )
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuforge-wheel-") as tmp:
        clean = _clean_source(src, Path(tmp) / "src")
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", "-w", tmp, str(clean)],
            check=True, stdout=subprocess.DEVNULL, env=_build_env(),
        )  # fmt: skip
        (whl,) = Path(tmp).glob("gpuforge-*.whl")
        dest = out / whl.name
        shutil.copyfile(whl, dest)
    return dest


def _clean_source(root: Path, dest: Path) -> Path:
    """What the wheel is built from: pyproject.toml, README.md and the folders its package-dir maps,
    without __pycache__. pip builds a local folder in place, and setuptools reuses the checkout's
    build/lib: a module deleted or moved since the last build would ride along in the wheel the
    nodes install (seen: gpuforge/pulumi_conformance.py, split away in issue 18, in 0.1.0's wheel)."""
    text = (root / "pyproject.toml").read_text()
    section = re.search(r"^\[tool\.setuptools\.package-dir\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if section is None:
        raise NodeLockError(f"{root / 'pyproject.toml'}: no [tool.setuptools.package-dir]", "build from a gpuforge checkout")
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(root / name, dest / name)
    for folder in sorted(set(re.findall(r'^\s*"[^"]+"\s*=\s*"([^"]+)"', section.group(1), re.M))):
        shutil.copytree(root / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _build_env() -> dict[str, str]:
    return {**os.environ, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "315532800")}


def wheelhouse(
    t: Target, out: Path, *, index: str | None = None, gpuforge_wheel: Path | None = None, cert: str | None = None
) -> Path:
    """`out` = the node install set of `t`: the locked wheels (downloaded by pip with
    --require-hashes, skipped when `out` already holds them), gpuforge's wheel, the lock and
    gpuforge.txt. `index`: an index URL or a folder of wheels, used alone (pip --isolated);
    None: pip's own configuration (the operator's pip.conf, proxies). Returns `out`."""
    out.mkdir(parents=True, exist_ok=True)
    entries = parse_lock(t.lock_file.read_text())
    if any(not (out / e.wheel).is_file() or sha256_file(out / e.wheel) != e.sha256 for e in entries):
        if index is None:
            src = []
        elif "://" in index:
            src = ["--isolated", "--index-url", index]
        else:
            src = ["--isolated", "--no-index", "--find-links", index]
        cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", *src,
               *t.pip_target_args(), "--no-deps", "--require-hashes", "-d", str(out), "-r", str(t.lock_file)]  # fmt: skip
        subprocess.run(cmd + (["--cert", cert] if cert else []), check=True, stdout=subprocess.DEVNULL)
    for stale in out.glob("gpuforge-*.whl"):
        if gpuforge_wheel is None or stale.name != gpuforge_wheel.name:
            stale.unlink()
    whl = gpuforge_wheel if gpuforge_wheel is not None else build_wheel(out)
    if whl.parent.resolve() != out.resolve():
        shutil.copyfile(whl, out / whl.name)
    version = whl.name.split("-")[1]
    shutil.copyfile(t.lock_file, out / t.lock_name)
    (out / GPUFORGE_LINE).write_text(f"# {whl.name}\ngpuforge=={version} --hash=sha256:{sha256_file(out / whl.name)}\n")
    return out


def node_files(t: Target, out: Path) -> list[Path]:
    """What the node fetches, in order: the lock, gpuforge.txt, then every wheel they name."""
    entries = parse_lock(t.lock_file.read_text())
    gline = (out / GPUFORGE_LINE).read_text().splitlines()[0].removeprefix("# ")
    return [out / t.lock_name, out / GPUFORGE_LINE, *(out / e.wheel for e in entries), out / gline]


VENV = "/opt/gpuforge/venv"  # where the node's gpuforge lives (the health-check wrapper execs its bin/gpuforge)


@dataclass(frozen=True)
class NodeInstall:
    """What the `gpuforge` phase installs, and from where (rendered into the phase)."""

    version: str
    target: Target
    lock_sha256: str
    region: str
    bucket_prefix: str  # the checkpoint bucket's name around the account id the node reads from IMDS
    bucket_suffix: str
    mirror: str | None = None  # gpuforge:mirror gpuforge-wheels location; None: the stack's bucket
    venv: str = VENV

    @property
    def key_prefix(self) -> str:
        """The bucket prefix of this version and target (the node role may read only this)."""
        return f"{BUCKET_PREFIX}/{self.target.prefix(self.version)}"

    @property
    def mirror_url(self) -> str | None:
        return self.mirror + self.target.prefix(self.version) if self.mirror else None
