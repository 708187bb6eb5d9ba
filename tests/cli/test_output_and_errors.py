"""Issue 13 items 4, 7 and 8: pipes and narrow terminals, one error style, words for users.

Every test runs the installed console script the way a user types it, pipes included.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import GPUFORGE, REPO, Gf, base_env

REPORT_COMMANDS = [
    ["preview"], ["preflight"], ["validate"], ["cost"],
    ["catalog", "list"], ["catalog", "show"], ["catalog", "suggest"], ["catalog", "refresh"],
]


def test_catalog_list_piped_to_grep_counts_every_type() -> None:
    """`gpuforge catalog list | grep -c p4de.24xlarge`: 0 before (rich cut the name in two)."""
    for columns in ("80", "40"):
        r = subprocess.run(f"{GPUFORGE} catalog list | grep -c p4de.24xlarge", shell=True, text=True,
                           capture_output=True, env=base_env(COLUMNS=columns), cwd=REPO, timeout=60, check=False)
        assert r.stdout.strip() == "1", (columns, r.stdout, r.stderr)


def test_piped_output_is_one_record_per_line(gf: Gf) -> None:
    r = gf("catalog", "list", "--region", "us-east-1")
    lines = r.stdout.splitlines()
    assert lines[0].startswith("# type\t")
    fields = len(lines[0].split("\t"))
    assert all(len(line.split("\t")) == fields for line in lines[1:]), lines
    names = [line.split("\t")[0] for line in lines[1:]]
    assert "p4de.24xlarge" in names and len(names) == len(set(names))
    assert "┃" not in r.stdout and "\x1b[" not in r.stdout  # no table art, no colour codes in a pipe


@pytest.mark.parametrize("columns", [40, 60, 80, 100, 140, 220])
def test_tables_never_break_a_token(gf: Gf, columns: int) -> None:
    names = [row["instance_type"] for row in
             json.loads(gf("catalog", "list", "--region", "us-east-1", "--format", "json").stdout)["instance_types"]]
    assert len(names) > 10
    r = gf("catalog", "list", "--region", "us-east-1", "--format", "table", env=base_env(COLUMNS=str(columns)))
    assert r.returncode == 0, r.stderr
    text = r.stdout
    for name in names:
        assert name in text, (columns, name)
    assert "…" not in text  # nothing is cut with an ellipsis either
    for line in text.splitlines():  # longer only where one unbreakable word is longer than the line
        assert len(line) <= columns or len(line.split()) <= 2, (columns, line)


def test_cost_headers_are_whole(gf: Gf) -> None:
    r = gf("cost", "--stack", "cv-training", "--format", "table", env=base_env(COLUMNS="80"))  # cut before at 80
    for head in ("compute/node-h", "storage/node-h", "total/30 d"):
        assert head in r.stdout, r.stdout
    assert "…" not in r.stdout


def test_format_takes_the_same_choices_everywhere(gf: Gf) -> None:
    """table, plain and json, in that order, everywhere; `cost` adds csv for its per-job rows (--jobs)."""
    for cmd in REPORT_COMMANDS:
        r = gf(*cmd, "--help", env=base_env(COLUMNS="200"))
        extra = r"(\|csv)?" if cmd[0] == "cost" else ""
        assert re.search(r"--format \[table\|plain\|json" + extra + r"\]", r.stdout), (cmd, r.stdout)


def test_click_usage_errors_read_like_every_other_error(gf: Gf) -> None:
    for args, needle in ((["preview"], "error: Missing option '--stack'"),
                         (["preview", "--stak", "x"], "error: No such option '--stak'. Did you mean '--stack'?"),
                         (["catalog", "list", "--format", "tabel"], "(did you mean 'table'?)"),
                         (["nosuch"], "error: No such command 'nosuch'")):
        r = gf(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith(needle) or needle in r.stderr.splitlines()[0], (args, r.stderr)
        assert "Usage:" not in r.stderr and "Try '" not in r.stderr, r.stderr
        assert "\n  fix: " in r.stderr


def test_os_errors_are_sentences(gf: Gf, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = gf("bootstrap", "render", "--stack", "cv-training", "--out", str(blocker / "sub"))
    assert r.returncode == 2
    assert "[Errno" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"error: {blocker}") and "\n  fix: " in r.stderr, r.stderr


def test_debug_keeps_the_exit_code(gf: Gf) -> None:
    r = gf("--debug", "preview", "--stack", "no-such-stack")
    assert r.returncode == 2, r.stderr
    assert "Traceback" in r.stderr and "error: " in r.stderr


def test_ssh_key_errors_name_the_option(gf: Gf, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 127.0.0.1}\nssh: {user: ubuntu}\n")
    r = gf("validate", "--inventory", str(inv), "--ssh-key", str(tmp_path / "missing-key"), "--out", str(tmp_path / "e"))
    assert r.returncode == 2, r.stderr
    assert "--ssh-key" in r.stderr and "ssh.key_file" not in r.stderr, r.stderr


def test_words_for_users(gf: Gf, tmp_path: Path, project: Path) -> None:
    cost = gf("cost", "-s", "cv-training", "-s", "nlp-inference", "--format", "table", env=base_env(COLUMNS="200"))
    assert "seed" not in cost.stdout.lower(), cost.stdout
    new = gf("stack", "new", "--team", "platform", "--profile", "cv-training", cwd=project)
    assert new.returncode == 0, new.stderr
    text = (project / "stacks" / "Pulumi.platform-cv-training.yaml").read_text().lower()
    assert "seed" not in text and "tests/" not in text and "test_" not in text, text


def test_cost_marks_the_option_the_stack_buys(gf: Gf) -> None:
    r = gf("cost", "-s", "cv-training", "-s", "vision-cv-training")
    rows = [line.split("\t") for line in r.stdout.splitlines() if not line.startswith("#")]
    used = {(row[0], row[1]) for row in rows if row[-1] == "yes"}
    assert used == {("cv-training", "on-demand"), ("vision-cv-training", "spot")}, r.stdout
    doc = json.loads(gf("cost", "-s", "vision-cv-training", "--format", "json").stdout)
    assert doc["stacks"][0]["purchase_option"] == "spot"


def test_preview_reports_its_policies_and_hints_discover(gf: Gf) -> None:
    r = gf("preview", "--stack", "nlp-inference", "--format", "table", env=base_env(COLUMNS="200"))
    assert r.returncode == 0, r.stderr
    assert "Policies:" in r.stdout and "no-public-ssh" in r.stdout
    assert "gpuforge validate --discover nlp-inference" in r.stdout


@pytest.mark.parametrize("columns", [60, 100])
def test_preview_tables_keep_tokens_whole(gf: Gf, columns: int) -> None:
    r = gf("preview", "--stack", "risk-sim", "--format", "table", env=base_env(COLUMNS=str(columns)))
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    for token in ("p3dn.24xlarge", "risk-sim-node01", "risk-sim-node02", "on-demand"):
        assert token in r.stdout, (columns, token)


def test_preflight_table_has_no_cut_json(gf: Gf, project: Path, closed_port: int) -> None:
    """Observed/expected were JSON cut at 60 characters with `…`, at any terminal width."""
    env = base_env(COLUMNS="220", AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_REGION="us-east-1",
                   AWS_ENDPOINT_URL=f"http://127.0.0.1:{closed_port}", AWS_CONFIG_FILE="/dev/null",
                   AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_EC2_METADATA_DISABLED="true")
    r = gf("preflight", "--stack", "cv-training", "--format", "table", cwd=project, env=env)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "…" not in r.stdout and '{"' not in r.stdout, r.stdout
    assert "gpu_count=8" in r.stdout  # the instance-type facts as words, whole
