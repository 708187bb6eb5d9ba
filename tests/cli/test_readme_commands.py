"""The README's command table is generated from the CLI (scripts/readme_commands.py) and must
match it; and every option it lists is one the real `--help` prints, through the console script."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.cli.conftest import REPO, Gf, base_env


def _block() -> str:
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "readme_commands.py")], capture_output=True, text=True,
                       timeout=60, check=True, cwd=REPO)
    return r.stdout.strip()


def test_readme_command_table_is_the_generated_one() -> None:
    assert _block() in (REPO / "README.md").read_text(), "run: .venv/bin/python scripts/readme_commands.py --write"


def test_every_listed_option_is_in_the_real_help(gf: Gf) -> None:
    body = _block().split("```")[1]
    entries = re.split(r"\n(?=gpuforge )", body.strip())
    assert len(entries) >= 10
    for raw in entries:
        entry = re.sub(r"^# .*$", "", raw, flags=re.M)
        words = entry.split()
        path = [w for w in words[1:3] if re.fullmatch(r"[a-z][a-z-]*", w)]
        helptext = gf(*path, "--help", env=base_env(COLUMNS="300")).stdout
        for opt in re.findall(r"--[a-z][a-z-]*", entry):
            assert opt in helptext, (path, opt)
