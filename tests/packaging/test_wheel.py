"""Issue 18: the built distribution, installed as a node installs it.

`python -m build` makes the wheel and the sdist once per session; `twine check` accepts both. The
wheel's only top-level import name is gpuforge. A clean venv gets ONLY the base wheel and the base
dependencies, with the node's own command (`pip install --require-hashes --only-binary :all:
--no-index --find-links`, the first-boot rehearsal's py311 lock: this host's Python is 3.11), from
a wheel set that pip downloads once into the node-wheel cache (bootstrap/nodelock.py cache_dir) and
every later run installs offline. In it the CLI, validate (local transport) and the health check
run, every check the registry names loads, nothing imports Pulumi, boto3, jinja2 or kubernetes,
rich is absent and tables are plain text, and a deploy command says which extra to install in one
`error:` line, exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuforge import __version__
from gpuforge.bootstrap.nodelock import GPUFORGE_LINE, TARGETS, build_wheel, cache_dir, parse_lock, wheelhouse

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pulumi", "pulumi_aws", "pulumi_kubernetes", "pulumi_random", "pulumi_policy", "boto3", "botocore",
         "jinja2", "kubernetes", "kubernetes_validate", "jsonschema")  # fmt: skip
# Runs the console script's main() and reports which of HEAVY it imported (sys.modules).
WRAPPER = f"""
import sys
from gpuforge.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted({{m.partition(".")[0] for m in sys.modules}} & set({HEAVY!r}))
print("imported-heavy:" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""
DEPLOY_COMMANDS = [
    ["preview", "--stack", "cv-training"],
    ["bootstrap", "render", "--stack", "cv-training"],
    ["preflight", "--stack", "cv-training"],
    ["stack", "list"],
]


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str

    @property
    def heavy(self) -> list[str]:
        line = next(x for x in self.err.splitlines() if x.startswith("imported-heavy:"))
        return [m for m in line.removeprefix("imported-heavy:").split(",") if m]


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], check=True, capture_output=True,
                   env=env, timeout=600)  # fmt: skip
    (whl,) = out.glob("gpuforge-*.whl")
    (sdist,) = out.glob("gpuforge-*.tar.gz")
    return Dist(whl, sdist)


@pytest.fixture(scope="session")
def base_venv(tmp_path_factory: pytest.TempPathFactory, dist: Dist) -> Path:
    t = TARGETS["py311"]
    assert sys.version_info[:2] == (3, 11), "the py311 lock is this host's interpreter"
    wh = wheelhouse(t, cache_dir(t, __version__), index=os.environ.get("GPUFORGE_LOCK_INDEX", "https://pypi.org/simple"),
                    gpuforge_wheel=dist.wheel, cert=os.environ.get("PIP_CERT"))  # fmt: skip
    home = tmp_path_factory.mktemp("base") / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(home)
    subprocess.run(
        [str(home / "bin" / "python"), "-m", "pip", "--isolated", "--disable-pip-version-check", "install", "-q",
         "--require-hashes", "--only-binary", ":all:", "--no-index", "--find-links", str(wh),
         "-r", str(wh / t.lock_name), "-r", str(wh / GPUFORGE_LINE)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return home


def run(python: Path | str, *args: str, cwd: Path | None = None) -> Run:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COLUMNS")}
    p = subprocess.run([str(python), "-c", WRAPPER, *args], check=False, capture_output=True, text=True, timeout=120, env=env,
                       cwd=cwd or Path("/"))  # fmt: skip
    return Run(p.returncode, p.stdout, p.stderr)


def test_twine_accepts_the_wheel_and_the_sdist(dist: Dist) -> None:
    p = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(dist.wheel), str(dist.sdist)], check=False,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("PASSED") == 2


def test_the_wheels_only_top_level_import_name_is_gpuforge(dist: Dist) -> None:
    names = zipfile.ZipFile(dist.wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"gpuforge"}
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert zipfile.ZipFile(dist.wheel).read(top_level).decode().split() == ["gpuforge"]
    # what the node needs from the package itself: its lock files and the validate data
    assert {"gpuforge/bootstrap/node-locks/node-x86_64-py310.txt", "gpuforge/validate/data/thresholds.yaml"} <= set(names)


def test_the_nodes_wheel_holds_what_the_published_wheel_holds(dist: Dist, tmp_path: Path) -> None:
    """The deploy builds the nodes' wheel with pip (bootstrap/nodelock.py build_wheel); the same files
    as `python -m build`'s, which builds from the sdist."""
    whl = build_wheel(tmp_path, ROOT)
    assert sorted(zipfile.ZipFile(whl).namelist()) == sorted(zipfile.ZipFile(dist.wheel).namelist())


def test_a_stale_build_folder_never_reaches_the_nodes_wheel(tmp_path: Path) -> None:
    """pip builds a local folder in place and setuptools packs the folder's build/lib as it finds it:
    a module deleted since an earlier build rode along to the nodes (gpuforge/pulumi_conformance.py
    was in the wheel after the split that removed it)."""
    src = tmp_path / "checkout"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("cli", "common", "core", "components", "bootstrap", "validate", "policy"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    stale = src / "build" / "lib" / "gpuforge" / "deleted_long_ago.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("RAN = True\n")
    names = zipfile.ZipFile(build_wheel(tmp_path / "out", src)).namelist()
    assert "gpuforge/cli.py" in names
    assert "gpuforge/deleted_long_ago.py" not in names


def test_the_base_venv_holds_only_the_base_distributions(base_venv: Path) -> None:
    p = subprocess.run([str(base_venv / "bin" / "python"), "-m", "pip", "--isolated", "list", "--format", "json"],
                       capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    names = {d["name"].lower().replace("_", "-") for d in json.loads(p.stdout)}
    lock = {e.name for e in parse_lock(TARGETS["py311"].lock_file.read_text())}
    assert names - {"pip", "setuptools"} == lock | {"gpuforge"}


@pytest.mark.parametrize("args", [["--help"], ["validate", "--help"], ["health-check", "--help"]])
def test_base_install_runs_the_node_commands_without_the_extras(base_venv: Path, args: list[str]) -> None:
    r = run(base_venv / "bin" / "python", *args)
    assert r.code == 0, r.err
    assert "Usage: gpuforge" in r.out
    assert r.heavy == []


def test_base_install_reports_the_operators_version(base_venv: Path) -> None:
    p = subprocess.run([str(base_venv / "bin" / "gpuforge"), "--version"], check=False, capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert p.returncode == 0 and p.stdout.strip() == f"gpuforge, version {__version__}"


@pytest.mark.parametrize("args", [["--help"], ["validate", "--help"], ["health-check", "--help"]])
def test_the_full_install_imports_no_extra_for_the_node_commands(args: list[str]) -> None:
    """The same commands in the dev venv, where pulumi, boto3, jinja2 and kubernetes are installed:
    still none of them is imported (the guard is the lazy imports, not their absence)."""
    r = run(sys.executable, *args)
    assert r.code == 0 and r.heavy == [], r.err


def test_base_install_validates_this_machine_over_the_local_transport(base_venv: Path, tmp_path: Path) -> None:
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps({"nodes": [{"name": "here", "host": "localhost"}]}))
    r = run(base_venv / "bin" / "python", "validate", "--inventory", str(inv), "--transport", "local",
            "--format", "json", "--out", str(tmp_path / "ev"))  # fmt: skip
    assert "Traceback" not in r.err and r.heavy == []
    doc = json.loads(r.out)
    assert doc["context"]["transport"] == "local"
    # exit 1 here: this machine has no GPU, so the GPU checks fail; they ran, and said so
    assert r.code in (0, 1), r.err
    ran = {x["check"] for x in doc["results"]}
    assert {"node.reachable", "system.identity"} <= ran and any(c.startswith("gpu.") for c in ran)


def test_base_install_prints_the_validate_report_as_a_plain_table(base_venv: Path, tmp_path: Path) -> None:
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps({"nodes": [{"name": "here", "host": "localhost"}]}))
    r = run(base_venv / "bin" / "python", "validate", "--inventory", str(inv), "--transport", "local",
            "--format", "table", "--out", str(tmp_path / "ev"))  # fmt: skip
    assert r.code in (0, 1) and "Traceback" not in r.err and r.heavy == [], r.err
    assert "system.identity" in r.out and not set("┏┃━│┡") & set(r.out), r.out
    assert "validate " in r.err  # the plain progress lines on stderr


def test_every_check_the_registry_names_loads_in_the_base_install(base_venv: Path) -> None:
    code = ("import json; from gpuforge.validate.registry import node_checks; "
            "from gpuforge.validate.thresholds import thresholds_data; thresholds_data(); "
            "print(json.dumps([c.name for c in node_checks()]))")  # fmt: skip
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    there = subprocess.run([str(base_venv / "bin" / "python"), "-c", code], check=False, capture_output=True, text=True,
                           timeout=60, cwd="/")  # fmt: skip
    assert there.returncode == 0, there.stderr
    assert json.loads(there.stdout) == json.loads(here.stdout) and len(json.loads(here.stdout)) >= 9


def test_the_base_install_has_no_rich(base_venv: Path) -> None:
    """rich and what it brings (pygments, markdown-it-py, mdurl: 12 MB) are the `rich` extra's."""
    lock = {e.name for e in parse_lock(TARGETS["py311"].lock_file.read_text())}
    assert not lock & {"rich", "pygments", "markdown-it-py", "mdurl"}
    p = subprocess.run([str(base_venv / "bin" / "python"), "-c", "import rich"], check=False, capture_output=True,
                       text=True, timeout=60, cwd="/")  # fmt: skip
    assert p.returncode == 1 and "ModuleNotFoundError" in p.stderr


@pytest.mark.parametrize("args", [
    ["cost", "--stack", "cv-training", "--format", "table"],
    ["catalog", "list", "--format", "table"],
    ["health-check", "--help"],
], ids=lambda a: " ".join(a[:2]))  # fmt: skip
def test_the_base_install_prints_plain_tables(base_venv: Path, args: list[str]) -> None:
    r = run(base_venv / "bin" / "python", "--project-dir", str(ROOT), *args)
    assert r.code == 0 and "Traceback" not in r.err and r.heavy == [], r.err
    assert not set("┏┃━│┡") & set(r.out), "drawn by rich, which the base does not install"


@pytest.mark.parametrize("args", DEPLOY_COMMANDS, ids=lambda a: a[0])
def test_a_deploy_command_in_the_base_install_names_the_extra(base_venv: Path, args: list[str]) -> None:
    r = run(base_venv / "bin" / "python", "--project-dir", str(ROOT), *args)
    assert r.code == 2, r.err
    assert "Traceback" not in r.err
    errors = [line for line in r.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "pip install 'gpuforge[deploy]'" in errors[0], r.err
    assert f"gpuforge {args[0]}" in errors[0]
