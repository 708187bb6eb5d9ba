"""health-check's own bad input, refused before any check runs or node state changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_unwritable_log_is_bad_input_before_slurm_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuforge.cli import main
    from gpuforge.validate import slurm

    def no_slurm(*_a: object, **_k: object) -> None:
        raise AssertionError("Slurm was asked although the log cannot be written")

    monkeypatch.setattr(slurm.SlurmControl, "nodes", no_slurm)
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps({"profile": "cv-training"}))
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the log's directory should be
    with pytest.raises(SystemExit) as ex:
        main(["health-check", "--expected", str(expected), "--node", "n1", "--log", str(blocker / "health.log")])
    err = capsys.readouterr().err
    assert ex.value.code == 2, err
    assert err.startswith(f"error: --log {blocker / 'health.log'}: cannot write it") and "Traceback" not in err
