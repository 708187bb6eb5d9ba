"""`gpuforge catalog list|show|suggest` through the real CLI entry point (exit codes, errors, JSON)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gpuforge.cli import cli, main


def _run(*args: str) -> tuple[int, str, str]:
    # In a subprocess: main() owns the `error:` rendering and the exit code, as a user sees them.
    proc = subprocess.run([sys.executable, "-m", "gpuforge.cli", *args], capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_suggest_json_risk_sim() -> None:
    res = CliRunner().invoke(cli, ["catalog", "suggest", "--profile", "risk-sim", "--format", "json", "--top", "3"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["region"] == "us-east-1" and len(doc["candidates"]) == 3
    first, second = doc["candidates"][:2]
    assert (first["instance_type"], first["node_count"], first["fit"]) == ("p3dn.24xlarge", 2, "exact")
    assert second["instance_type"] == "p4d.24xlarge" and second["faster_per_dollar"] is True
    assert doc["total_candidates"] > 3


def test_suggest_table_mentions_the_gap() -> None:
    res = CliRunner().invoke(cli, ["catalog", "suggest", "--profile", "cv-training", "--top", "2"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "p4de.24xlarge" in res.output and "exact" in res.output
    assert "A100 40 GiB < 80 GiB per GPU" in res.output


def test_list_filters_and_json() -> None:
    res = CliRunner().invoke(cli, ["catalog", "list", "--family", "p4de", "--region", "us-east-1", "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["instance_types"]
    assert [r["instance_type"] for r in rows] == ["p4de.24xlarge"]
    assert rows[0]["az_ids"] == ["use1-az4", "use1-az6"] and rows[0]["on_demand_usd_per_hour"] == 27.44705
    eu = json.loads(CliRunner().invoke(cli, ["catalog", "list", "--region", "eu-west-1", "--format", "json"]).output)
    assert "p4de.24xlarge" not in {r["instance_type"] for r in eu["instance_types"]}


def test_show_json() -> None:
    res = CliRunner().invoke(cli, ["catalog", "show", "p4d.24xlarge", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["efa_interfaces"] == 4 and doc["gpu"]["fp64_tflops"] == 9.7
    assert doc["offerings"]["us-east-1"]["az_ids"] == ["use1-az1", "use1-az2", "use1-az4", "use1-az6"]


def test_table_output() -> None:
    # CliRunner's stdout is not a terminal, so the table is asked for (the default there is plain).
    res = CliRunner().invoke(cli, ["catalog", "list", "--family", "p5", "--format", "table"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "p5.48xlarge" in res.output and "┃" in res.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["catalog", "suggest", "--profile", "risk-sm"],
            "error: --profile: unknown profile 'risk-sm' (did you mean 'risk-sim'?)",
        ),
        (["catalog", "suggest", "--profile", "risk-sim", "--region", "us-east1"], "did you mean 'us-east-1'?"),
        (["catalog", "list", "--family", "p4"], "error: --family: 'p4' is not a catalog family (did you mean 'p4d'?)"),
        (["catalog", "list", "--format", "jsn"],
             "error: Invalid value for '--format': 'jsn' is not one of 'table', 'plain', 'json' (did you mean 'json'?)"),
        (["catalog", "show", "p4d.24xlarg"], "did you mean 'p4d.24xlarge'?"),
        (["catalog", "refresh", "--regions", "us-east-1,eu-west-9"], "error: --regions: 'eu-west-9'"),
    ],
)
def test_bad_input_exits_2_with_one_clear_error(args: list[str], needle: str) -> None:
    rc, _out, err = _run(*args)
    assert rc == 2
    assert needle in err
    assert "Traceback" not in err and "fix:" in err


def test_main_is_the_console_entry_point() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["catalog", "show", "nope.large"])
    assert exc.value.code == 2
