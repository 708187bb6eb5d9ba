"""What `gpuforge preview` and `gpuforge cost` say about the Slurm head for each place of the
accounting database: the embedded MariaDB (the larger head and the database's own retained volume,
each a cost line, and why) against an existing database (the profile's head, no volume, billed
elsewhere). Run through the CLI on a stack file, as an operator runs them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from gpuforge.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXT = {"gpuforge:accountingDbEndpoint": "acct.cluster-x.us-east-1.rds.amazonaws.com:3306",
       "gpuforge:accountingDbPasswordParameter": "/site/slurm/db-password"}  # fmt: skip


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    proj = tmp_path_factory.mktemp("headcost")
    for f in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / f, proj / f)
    shutil.copytree(ROOT / "stacks" / "teams", proj / "stacks" / "teams")
    base = yaml.safe_load((ROOT / "stacks" / "Pulumi.cv-training.yaml").read_text())["config"]
    for name, extra in (("slurm-embedded", {}), ("slurm-external", EXT)):
        config = {**base, "gpuforge:scheduler": "slurm", "gpuforge:os": "ubuntu-24.04", **extra}
        (proj / "stacks" / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}))
    return proj


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as ex:
        main(list(args))
    out = capsys.readouterr()
    assert ex.value.code in (0, None), out.err
    return out.out


def test_preview_states_the_embedded_databases_head_and_volume(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "preview", "--stack", "slurm-embedded", "--project-dir", str(project), "--format", "plain")
    lines = out.splitlines()
    assert "# options slurm-embedded-head-accounting-db: retainOnDelete" in lines
    assert "# options slurm-embedded-head: deleteBeforeReplace" in lines
    cost = {ln.split("\t")[0]: ln.split("\t")[1:] for ln in lines if "\t" in ln}
    assert cost["Slurm head m6i.xlarge (slurmctld, slurmdbd, MariaDB)"][0] == "1 nodes"
    assert cost["storage Slurm head root gp3"][0] == "50 GiB"
    assert cost["storage Slurm accounting database gp3 (kept on delete)"][0] == "50 GiB"
    [note] = [ln for ln in lines if ln.startswith("# - Slurm head:")]
    assert "accounting runs MariaDB on the head, hence m6i.xlarge and not m6i.large" in note
    assert "50 GiB gp3 volume of its own, kept when the head or the stack is deleted" in note
    assert not [ln for ln in lines if ln.startswith(("# - EKS control plane", "# - system nodes"))]  # not an EKS stack


def test_preview_states_the_existing_databases_smaller_head(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "preview", "--stack", "slurm-external", "--project-dir", str(project), "--format", "plain")
    lines = out.splitlines()
    items = {ln.split("\t")[0] for ln in lines if "\t" in ln}
    head = "Slurm head m6i.large (slurmctld, slurmdbd; database at acct.cluster-x.us-east-1.rds.amazonaws.com, billed there)"
    assert head in items and "storage Slurm head root gp3" in items
    assert not [i for i in items if "accounting database" in i or "accounting-db" in i]
    assert not [ln for ln in lines if ln.startswith("# options")]
    [note] = [ln for ln in lines if ln.startswith("# - Slurm head:")]
    assert "stores into the database at acct.cluster-x.us-east-1.rds.amazonaws.com:3306, billed where it runs" in note


def test_cost_shows_the_same_head_and_volume(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emb = _run(capsys, "cost", "--stack", "slurm-embedded", "--project-dir", str(project), "--format", "plain")
    head = "Slurm head m6i.xlarge (slurmctld, slurmdbd, MariaDB) (1 nodes) 0.1920 $/h"
    assert f"# slurm-embedded fixed, every option: {head}" in emb
    # 50 GiB x 0.08 $/GB-month / 730 h (core/catalog/storage_prices.yaml)
    assert "storage Slurm accounting database gp3 (kept on delete) (50 GiB) 0.0055 $/h" in emb
    ext = _run(capsys, "cost", "--stack", "slurm-external", "--project-dir", str(project), "--format", "plain")
    assert "Slurm head m6i.large (slurmctld, slurmdbd; database at acct.cluster-x.us-east-1.rds.amazonaws.com, " \
           "billed there) (1 nodes) 0.0960 $/h" in ext  # fmt: skip
    assert "accounting database" not in ext
