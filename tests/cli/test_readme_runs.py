"""The README runs as written on a fresh checkout (issue 22): every command block marked
`<!-- readme-test: offline -->` (the ones that need no cloud account, Pulumi CLI or cluster) is
executed, line by line, in a copy of the repository's tracked files, as a newcomer would type it.

Before issue 22 the first team-stack command failed there (`stacks/Pulumi.vision-cv-training.yaml
exists`, because that stack ships) and the completion lines needed `gpuforge` on PATH.

Substitution (tests/SUBSTITUTIONS.md): the copy's `.venv` is a link to this checkout's, made by
scripts/setup.sh, rather than a fresh setup in the copy (a minute of installs per run).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import REPO

MARK = "<!-- readme-test: offline -->"


def offline_blocks(readme: str) -> list[list[str]]:
    """The marked ```sh blocks, each as its command lines (comments after `#` kept: bash ignores them)."""
    blocks = re.findall(re.escape(MARK) + r"\s*```sh\n(.*?)```", readme, flags=re.S)
    return [[line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")] for block in blocks]


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    """The tracked files of this checkout (what `git clone` gives), with the venv linked in."""
    root = tmp_path / "gpuforge"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        src = REPO / name.decode()
        if src.is_file():
            dst = root / name.decode()
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (root / ".venv").symlink_to(REPO / ".venv")
    return root


def _env(home: Path) -> dict[str, str]:
    # no gpuforge on PATH: a newcomer has only the checkout
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb"}


def test_the_readme_marks_its_offline_blocks() -> None:
    blocks = offline_blocks((REPO / "README.md").read_text())
    joined = "\n".join(line for block in blocks for line in block)
    assert "stack new" in joined and "_GPUFORGE_COMPLETE" in joined, blocks


def test_offline_blocks_run_as_written_on_a_fresh_checkout(fresh: Path, tmp_path: Path) -> None:
    env = _env(tmp_path)
    for block in offline_blocks((fresh / "README.md").read_text()):
        for line in block:
            if "_GPUFORGE_COMPLETE" in line and "bash_source" not in line:
                # zsh and fish lines: this host has neither shell; their script must still come out
                cmd = line.split('"$(', 1)[-1].split(")")[0] if "$(" in line else line.split("|")[0]
                res = subprocess.run(["bash", "-c", cmd], cwd=fresh, env=env, capture_output=True, text=True,
                                     timeout=120, check=False)  # fmt: skip
                assert res.returncode == 0 and "gpuforge" in res.stdout, (line, res.stderr)
                continue
            res = subprocess.run(["bash", "-ec", line], cwd=fresh, env=env, capture_output=True, text=True,
                                 timeout=600, check=False)  # fmt: skip
            assert res.returncode == 0, (line, res.stdout[-1500:], res.stderr[-1500:])
            assert "Traceback" not in res.stderr, res.stderr


def test_bash_completion_line_completes_without_gpuforge_on_path(fresh: Path, tmp_path: Path) -> None:
    line = next(line for block in offline_blocks((fresh / "README.md").read_text()) for line in block
                if "bash_source" in line)  # fmt: skip
    probe = (f"{line.split('#')[0]}\n"
             "COMP_WORDS=(.venv/bin/gpuforge preview --stack cv-t); COMP_CWORD=3\n"
             "_gpuforge_completion .venv/bin/gpuforge cv-t --stack\n"
             "printf '%s\\n' \"${COMPREPLY[@]}\"; complete -p gpuforge")  # fmt: skip
    res = subprocess.run(["bash", "-c", probe], cwd=fresh, env=_env(tmp_path), capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "cv-training" in res.stdout.splitlines(), res.stdout
