"""The local transport (no root needed) and the CLI's --transport local path."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpuforge.validate.inventory import Node
from gpuforge.validate.transport import LocalTransport, Outcome, Timeouts, wrap

NODE = Node(name="here", host="localhost")


def test_local_runs_and_reports_exit_codes() -> None:
    t = LocalTransport()
    ok = t.run(NODE, "echo hi; echo err >&2", 5)
    assert ok.ok and ok.stdout == "hi\n" and ok.stderr == "err\n"
    bad = t.run(NODE, "exit 3", 5)
    assert bad.outcome is Outcome.OK and bad.exit_code == 3 and not bad.ok


def test_local_hung_command_is_a_timeout_within_the_bound() -> None:
    start = time.monotonic()
    res = LocalTransport().run(NODE, "sleep 30", 1)
    assert res.outcome is Outcome.TIMEOUT and res.stage == "command"
    assert time.monotonic() - start < 5


def test_node_commands_run_in_the_c_locale(monkeypatch: pytest.MonkeyPatch) -> None:
    # a controller (or node) in another locale must not change the tools' output language
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    res = LocalTransport().run(NODE, 'echo "$LC_ALL"', 5)
    assert res.ok and res.stdout == "C\n"


def test_wrap_quotes_and_bounds() -> None:
    assert wrap("echo 'a b'", 7) == "env LC_ALL=C timeout -k 2 7 sh -c 'echo '\"'\"'a b'\"'\"''"
    assert Timeouts(2, 3, 4, 5).connect_bound() == 2 * 2 + 3 + 4


def test_cli_local_transport(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuforge.cli import main

    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"nodes": [{"name": "here", "host": "localhost"}]}))
    out = tmp_path / "ev"
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--inventory", str(inv), "--transport", "local", "--checks", "system,network.mtu",
              "--format", "json", "--out", str(out)])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert ex.value.code == 0, doc
    assert {r["check"] for r in doc["results"]} == {"node.reachable", "system.identity", "network.mtu"}
    assert doc["context"]["transport"] == "local" and (out / "report.json").is_file()
    assert list((out / "evidence" / "here").glob("*system.identity.txt"))
    two = tmp_path / "two.json"
    two.write_text(json.dumps({"nodes": [{"name": "a", "host": "x"}, {"name": "b", "host": "y"}]}))
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--inventory", str(two), "--transport", "local"])
    assert ex.value.code == 2 and "--transport local" in capsys.readouterr().err


def test_cli_slurm_transport_without_srun_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuforge.cli import main

    monkeypatch.setenv("PATH", str(tmp_path))  # no srun anywhere
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"nodes": [{"name": "a", "host": "x"}, {"name": "b", "host": "y"}]}))
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--inventory", str(inv), "--transport", "slurm", "--out", str(tmp_path / "ev")])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and "error: --transport slurm: srun is not on PATH" in err, err
    assert "Traceback" not in err and not (tmp_path / "ev").exists()


def test_cli_unwritable_html_is_bad_input_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuforge.cli import main

    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"nodes": [{"name": "here", "host": "localhost"}]}))
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the page's directory should be
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--inventory", str(inv), "--transport", "local", "--out", str(tmp_path / "ev"),
              "--html", str(blocker / "report.html")])  # fmt: skip
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.startswith(f"error: --html {blocker / 'report.html'}: cannot create"), err
    assert not (tmp_path / "ev").exists()


def test_cli_save_baseline_only_from_a_clean_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("gpuforge.validate.thresholds")
    from gpuforge.cli import main

    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"nodes": [{"name": "here", "host": "localhost"}]}))
    base = tmp_path / "baseline.json"
    common = ["validate", "--inventory", str(inv), "--transport", "local", "--out", str(tmp_path / "ev")]
    with pytest.raises(SystemExit) as ex:
        main([*common, "--checks", "system", "--save-baseline", str(base)])
    assert ex.value.code == 0 and json.loads(base.read_text())["schema"] == 1
    capsys.readouterr()
    broken = tmp_path / "broken.json"
    # 99 GPUs: gpu.inventory fails (or is unknown without nvidia-smi) on any machine; nothing is saved
    inv.write_text(json.dumps({"expect": {"gpus_per_node": 99}, "nodes": [{"name": "here", "host": "localhost"}]}))
    with pytest.raises(SystemExit) as ex:
        main([*common, "--checks", "gpu.inventory", "--save-baseline", str(broken)])
    assert ex.value.code == 2 and not broken.exists() and "not saved" in capsys.readouterr().err
