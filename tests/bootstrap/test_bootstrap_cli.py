"""`gpuforge bootstrap render`: inspectable output for every stack, clear errors for bad input."""

from __future__ import annotations

import base64
import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuforge.cli import cli, main
from tests.bootstrap.conftest import PROJECT, STACKS


@pytest.mark.parametrize("stack", STACKS)
def test_render_writes_user_data_and_scripts(stack: str, tmp_path: Path) -> None:
    out = tmp_path / stack
    res = CliRunner().invoke(
        cli, ["bootstrap", "render", "--stack", stack, "--out", str(out), "--project-dir", str(PROJECT)]
    )
    assert res.exit_code == 0, res.output
    assert "(launch template)" in res.output and "phases: base ->" in res.output
    text = (out / "user-data.yaml").read_text()
    raw = base64.b64decode((out / "user-data.b64").read_text())
    assert (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode() == text
    assert (out / "opt/gpuforge/bin/gpuforge-bootstrap").is_file()
    assert (out / "opt/gpuforge/phases/self-check.sh").is_file()


def test_unknown_stack_exits_2_with_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bootstrap", "render", "--stack", "cv-trainin", "--out", str(tmp_path), "--project-dir", str(PROJECT)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "cv-training" in err and "Traceback" not in err


def test_bad_node_name_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bootstrap", "render", "-s", "risk-sim", "--node", "Risk_1", "--out", str(tmp_path / "o"),
              "--project-dir", str(PROJECT)])  # fmt: skip
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: --node: risk-sim has no node 'Risk_1'" in err and "risk-sim-node[01-02]" in err
    assert not (tmp_path / "o").exists(), "nothing is written when rendering fails"
