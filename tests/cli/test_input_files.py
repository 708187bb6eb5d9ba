"""Every file the CLI reads, fed the same bad files (issue 22): one `error:` line naming the file,
exit 2, no traceback.

The table has one row per reader (how the CLI takes that file) and one column per bad file:
binary, not UTF-8, empty, huge, a list instead of a mapping, a directory, a dangling symlink, a
file this user may not read (the tests run as root, so that case runs the command in a
subprocess as `nobody`), and a typo'd key. The catalog is read through `load_catalog(dir)`,
which is what `--project-dir` makes every command do with the project's own catalog.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuforge.common import inputfile
from gpuforge.common.errors import GpuforgeError
from tests.cli.conftest import Gf

REPO = Path(__file__).resolve().parents[2]
GOOD_INVENTORY = {"profile": "cv-training", "nodes": [{"name": "a", "host": "127.0.0.1"}]}


@dataclass(frozen=True)
class Reader:
    name: str
    kind: inputfile.FileKind
    place: Callable[[Path], Path]  # project dir -> where the file under test goes
    argv: Callable[[Path, Path], list[str]] | None  # (project dir, file) -> gpuforge args
    api: str | None  # python statement using `path` (for readers that are not a flag of their own)
    typo: str  # the file's text with one key misspelt
    typo_key: str  # what the message must name


def _project(tmp: Path) -> Path:
    root = tmp / "project"
    (root / "stacks" / "teams").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copy(REPO / "stacks" / "Pulumi.cv-training.yaml", root / "stacks")
    shutil.copytree(REPO / "core" / "catalog", root / "catalog", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (root / "inv.json").write_text(json.dumps(GOOD_INVENTORY))
    return root


PLATFORM = (REPO / "stacks" / "teams" / "platform.yaml").read_text()

READERS = [
    Reader("stack file", inputfile.STACK, lambda p: p / "stacks" / "Pulumi.bad.yaml",
           lambda p, f: ["cost", "--stack", f.name.removeprefix("Pulumi.").removesuffix(".yaml"), "--project-dir", str(p)], None,
           "confg:\n  gpuforge:profile: cv-training\n", "confg: unknown key"),
    Reader("project file", inputfile.PROJECT, lambda p: p / "Pulumi.yaml",
           lambda p, f: ["cost", "--stack", "cv-training", "--project-dir", str(p)], None,
           "name: gpuforge\nruntime: python\nstackConfigDir: stacks\nconfgi: {}\n", "confgi: unknown key"),
    Reader("team file", inputfile.TEAM, lambda p: p / "stacks" / "teams" / "bad.yaml",
           lambda p, f: ["stack", "new", "--team", "bad", "--profile", "cv-training", "--project-dir", str(p)], None,
           PLATFORM.replace("name: platform", "name: bad").replace("gpu_quota:", "gpu_qouta:"), "gpu_qouta: unknown key"),
    Reader("inventory", inputfile.INVENTORY, lambda p: p / "bad-inventory.yaml",
           lambda p, f: ["validate", "--inventory", str(f), "--checks", "system", "--out", str(p / "evidence")], None,
           "nodes:\n  - {name: a, hots: 10.0.0.1}\n", "nodes[a].hots"),
    Reader("baseline", inputfile.BASELINE, lambda p: p / "baseline.json",
           lambda p, f: ["validate", "--inventory", str(p / "inv.json"), "--baseline", str(f), "--checks", "system",
                         "--out", str(p / "evidence")], None,
           json.dumps({"schema": 1, "figures": {"nccl_busbw_gpbs": 200}}), "figures.nccl_busbw_gpbs"),
    Reader("expected state", inputfile.EXPECTED, lambda p: p / "expected.json",
           lambda p, f: ["health-check", "--expected", str(f), "--log", str(p / "hc.log"), "--dry-run"], None,
           json.dumps({"profile": "cv-training", "expcet": {}}), "expcet: unknown key"),
    Reader("pricing file", inputfile.PRICING, lambda p: p / "slurm-pricing.json",
           lambda p, f: ["cost", "--jobs", "--since", "2026-12-01", "--pricing", str(f)], None,
           json.dumps({"stack": "s", "instance_type": "p4de.24xlarge", "region": "us-east-1", "purchase_option": "spot",
                       "usd_per_node_hour": 1.0, "cpus": 96, "memory_mb": 1, "gpus": 8, "gpu_type": "a100",
                       "sourec": "x"}), "sourec: unknown key"),
    Reader("catalog file", inputfile.CATALOG, lambda p: p / "catalog" / "gpus.yaml", None,
           "from gpuforge.core.catalog import load_catalog; load_catalog(path.parent)",
           "source: x\ngpus: {}\ngpsu: {}\n", "gpsu: unknown key"),
]

BIG = 1 << 20  # written sparse: a file over every bound without filling the disk


def _bad(case: str, target: Path, reader: Reader) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() or target.is_symlink():
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
    if case == "binary":
        target.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    elif case == "latin-1":
        target.write_bytes("name: caf\xe9\n".encode("latin-1"))
    elif case == "empty":
        target.write_text("")
    elif case == "huge":
        with target.open("wb") as fh:
            fh.truncate(reader.kind.max_bytes + BIG)
    elif case == "list":
        target.write_text("[1, 2, 3]\n" if reader.kind.syntax == "json" else "- a\n- b\n")
    elif case == "directory":
        target.mkdir()
    elif case == "dangling":
        target.symlink_to(target.parent / "gone.yaml")
    elif case == "unreadable":
        target.write_text(reader.typo)
        target.chmod(0o000)
    elif case == "typo":
        target.write_text(reader.typo)


# what each case's message must say (the file's name is checked besides)
EXPECT = {
    "binary": r"(not UTF-8|binary data)",
    "latin-1": "not UTF-8",
    "empty": "empty",
    "huge": "more than the",
    "list": "must be a mapping.*, not a list",
    "directory": "is a directory",
    "dangling": "broken symlink to",
    "unreadable": "permission denied",
}


def _run_in_process(reader: Reader, project: Path, path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    if reader.argv is None:
        assert reader.api is not None
        try:
            exec(reader.api, {"path": path})
        except GpuforgeError as exc:
            return exc.exit_code, exc.render()
        return 0, ""
    from gpuforge.cli import main

    with pytest.raises(SystemExit) as ex:
        main(reader.argv(project, path))
    return int(ex.value.code or 0), capsys.readouterr().err


def _run_unprivileged(reader: Reader, project: Path, path: Path) -> tuple[int, str]:
    """The command in a subprocess with root's file privileges dropped: `setpriv` takes
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH out of the bounding set, so a mode-000 file is
    unreadable to it as to any user (the interpreter under /root stays readable, as it is root's)."""
    if reader.argv is not None:
        argv = [str(Path(sys.executable).with_name("gpuforge")), *reader.argv(project, path)]
    else:
        code = ("import sys\nfrom pathlib import Path\nfrom gpuforge.common.errors import GpuforgeError\n"
                "path = Path(sys.argv[1])\n"
                f"try:\n    {reader.api}\nexcept GpuforgeError as exc:\n    print(exc.render(), file=sys.stderr); sys.exit(2)\n")
        argv = [sys.executable, "-c", code, str(path)]
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    res = subprocess.run([*drop, *argv], cwd=project, env=dict(os.environ),
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    return res.returncode, res.stderr


CASES = [*EXPECT, "typo"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("reader", READERS, ids=[r.name for r in READERS])
def test_every_reader_refuses_every_bad_file(reader: Reader, case: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path)
    path = reader.place(project)
    _bad(case, path, reader)
    if case == "unreadable":
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            pytest.skip("as another user the unreadable case is any file of root's; this run is not root")
        code, err = _run_unprivileged(reader, project, path)
    else:
        code, err = _run_in_process(reader, project, path, capsys)
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert path.name in lines[0], err
    import re

    assert re.search(EXPECT.get(case, re.escape(reader.typo_key)), lines[0]), err
    if case == "huge":  # the bound is stated
        assert inputfile._size(reader.kind.max_bytes) in lines[0], err
    if case in ("binary", "latin-1"):
        assert "UTF-8" in err, err
    if case == "typo":
        assert "did you mean" in lines[0], err


def test_the_table_covers_every_reader_of_the_one_module() -> None:
    """A new FileKind in common/inputfile.py needs its row here."""
    kinds = {v for v in vars(inputfile).values() if isinstance(v, inputfile.FileKind)}
    untested = {k.what for k in kinds} - {r.kind.what for r in READERS}
    # profiles, kubeconfigs, catalog tables and POC results (a folder of them, `catalog suggest
    # --results`) share the others' functions; each is listed so that a new kind is a decision
    assert untested <= {"profile", "kubeconfig", "catalog table", "POC result"}, untested


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A few hundred bytes whose aliases stand for 10^9 values pass every size bound; a stack's
    lists are JSON-encoded for the program, which would expand them all."""
    project = _project(tmp_path)
    levels = ["  a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (project / "stacks" / "Pulumi.bomb.yaml").write_text("config:\n" + "\n".join(levels) + "\n  gpuforge:sshCidrs: *a8\n")
    code, err = _run_in_process(READERS[0], project, project / "stacks" / "Pulumi.bomb.yaml", capsys)
    assert code == 2 and "aliases expand to more than 1,000,000 values" in err, err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1


def test_one_non_utf8_team_file_does_not_stop_other_teams_previews(project: Path, gf: Gf) -> None:
    """One Latin-1 file in stacks/teams/ ended every preview of the project in a traceback
    (issue 22): now the other teams' stacks preview, with a warning naming that file."""
    (project / "stacks" / "teams" / "zeta.yaml").write_bytes("name: zeta\nowner: Zoë\n".encode("latin-1"))
    r = gf("preview", "--stack", "cv-training", "--format", "json", cwd=project)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    warning = next(line for line in r.stderr.splitlines() if "zeta.yaml" in line)
    assert "not UTF-8" in warning and "GPU quota is not checked" in warning, warning
