"""Output in pipes and files (issue 22), with real pipes and the installed console script.

- What the terminal shows reaches a file too, in plain form: `make preview > log` kept the
  resources and the cost but dropped the exports, the inventory and the notes.
- A reader that goes away early (`| head -1`) ends the command quietly with 141 (128 + SIGPIPE,
  as `cat` and `grep` report under `set -o pipefail`), never 1 ("checks failed") and never a
  traceback, whichever layer was writing: click.echo (plain and JSON), rich (tables), or the
  interpreter's flush at exit.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import GPUFORGE, REPO, Gf, base_env

F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux), named in the module only from Python 3.10 on some builds


def _small_pipe() -> tuple[int, int]:
    """A pipe of one page (4 KiB), so that a few KiB of output already outrun `head -1`."""
    r, w = os.pipe()
    fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", F_SETPIPE_SZ), 4096)
    return r, w


def _into_head(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """`gpuforge ARGS | head -1` with real processes; returns gpuforge's exit code and stderr, head's stdout."""
    r, w = _small_pipe()
    gf = subprocess.Popen([GPUFORGE, *args], cwd=REPO, env=env, stdout=w, stderr=subprocess.PIPE, text=True)
    head = subprocess.Popen(["head", "-1"], stdin=r, stdout=subprocess.PIPE, text=True)
    os.close(r)
    os.close(w)
    first, _ = head.communicate(timeout=180)
    _, err = gf.communicate(timeout=180)
    return gf.returncode, err, first


# The JSON document leaves in one write(2): when the reader goes away during it, the kernel
# reports the bytes it took and CPython's buffered writer counts the write as done (strace:
# `write(1, ..., 50002) = 4096`, SIGPIPE, no second write), so the command sees no error and
# exits 0. Every output written in more than one piece sees EPIPE on the next one: 141.
LONG_OUTPUTS = [
    pytest.param(["preview", "--stack", "cv-training", "--format", "json", "--no-policies"], (0, 141), id="click-json"),
    pytest.param(["preview", "--stack", "cv-training", "--format", "plain", "--no-policies"], (141,), id="click-plain"),
    pytest.param(["preview", "--stack", "cv-training", "--format", "table", "--no-policies"], (141,), id="rich-table"),
]


@pytest.mark.parametrize(("args", "codes"), LONG_OUTPUTS)
def test_head_ends_the_command_quietly_with_141(args: list[str], codes: tuple[int, ...]) -> None:
    code, err, first = _into_head(args, base_env(COLUMNS="200"))
    assert first.strip(), "head got no line"
    assert code in codes, (code, err)
    assert "Traceback" not in err and "Exception ignored" not in err and "error:" not in err, err


def test_a_pipe_closed_before_the_first_write(tmp_path: Path) -> None:
    """The reader is gone before anything is written: the first write already fails (EPIPE)."""
    for args in (["catalog", "list", "--format", "plain"], ["stack", "list", "--format", "json"]):
        r, w = os.pipe()
        os.close(r)
        proc = subprocess.run([GPUFORGE, *args], cwd=REPO, env=base_env(), stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=180, check=False)  # fmt: skip
        os.close(w)
        assert proc.returncode == 141, (args, proc.returncode, proc.stderr)
        assert proc.stderr == "", proc.stderr


def test_under_pipefail_a_script_sees_141_not_1() -> None:
    script = f"set -o pipefail; {GPUFORGE} preview --stack cv-training --format json --no-policies | head -c 10 >/dev/null"
    # head -c 10 leaves after 10 bytes; 50 KB of JSON cannot all fit in the 64 KiB pipe once the reader is gone
    res = subprocess.run(["bash", "-c", script], cwd=REPO, env=base_env(), capture_output=True, text=True,
                         timeout=180, check=False)  # fmt: skip
    assert res.returncode in (0, 141), res  # 0 only if every byte fit in the pipe before head left
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr, res.stderr


def test_preview_to_a_file_carries_what_the_terminal_shows(gf: Gf, tmp_path: Path) -> None:
    """`make preview > log`: the exports, the inventory, the notes and the disclaimer, in plain form."""
    log = tmp_path / "preview.log"
    with log.open("w") as fh:
        res = subprocess.run([GPUFORGE, "preview", "--stack", "cv-training"], cwd=REPO, env=base_env(), stdout=fh,
                             stderr=subprocess.PIPE, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    text = log.read_text()
    doc = json.loads(gf("preview", "--stack", "cv-training", "--format", "json").stdout)
    outputs = doc["outputs"]
    for key in outputs:
        if key != "inventory":
            assert f"\n{key}\t" in text, f"output {key} missing from the plain preview"
    for node in outputs["inventory"]["nodes"]:
        assert f"\n{node['name']}\t{node['instance_type']}\t" in text, node
    assert "# output\tvalue" in text and "# name\tinstance_type\taz_id\tprivate_ip\tpublic_ip" in text
    for note in doc["cost"]["notes"]:
        assert note in text, note
    assert "offline" in text.splitlines()[1]  # the disclaimer: this is not a provider-backed diff
    assert "\x1b[" not in text  # plain: no colour codes in a file
    from gpuforge.core.profiles import load_profile

    for note in load_profile("cv-training").shape.notes:
        assert " ".join(note.split()) in " ".join(text.split()), note
