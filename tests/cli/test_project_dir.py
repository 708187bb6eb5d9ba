"""One project directory: its stacks come from the project, the code and its data (catalog,
profiles) from the installed gpuforge, exactly as `pulumi up` run there imports them through the
virtualenv its Pulumi.yaml names. (Issue 13 item 5 made the CLI follow the project's code; since the
package move there is one copy of that code, the installed one, so both read the same catalog.)"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import REPO, Gf

CATALOG = REPO / "core" / "catalog"


def _od(doc: dict[str, Any]) -> float:
    return float(doc["stacks"][0]["options"]["on_demand"]["compute_usd_per_node_hour"])


def _node_count(project: Path, n: int) -> None:
    path = project / "stacks" / "Pulumi.cv-training.yaml"
    text = path.read_text()
    assert "gpuforge:nodeCount" not in text
    path.write_text(text.replace("  gpuforge:profile:", f"  gpuforge:nodeCount: {n}\n  gpuforge:profile:", 1))


@pytest.mark.parametrize("where", ["before", "after", "cwd"])
def test_the_project_directory_supplies_the_stacks(gf: Gf, project: Path, tmp_path: Path, where: str) -> None:
    """A project directory holds no code: an edited stack there changes the cost, wherever
    --project-dir sits, and the prices are the installed catalog's."""
    _node_count(project, 3)
    args = ["cost", "--stack", "cv-training", "--format", "json"]
    if where == "before":
        r = gf("--project-dir", str(project), *args, cwd=tmp_path)
    elif where == "after":
        r = gf(*args, "--project-dir", str(project), cwd=tmp_path)
    else:
        r = gf(*args, cwd=project / "stacks")  # found by walking up to Pulumi.yaml, as git finds a repo
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    shipped = json.loads(gf("cost", "--stack", "cv-training", "--format", "json", cwd=REPO).stdout)
    assert doc["stacks"][0]["nodes"] == 3 != shipped["stacks"][0]["nodes"], (doc["stacks"][0], shipped["stacks"][0])
    assert _od(doc) == _od(shipped)


def test_refresh_never_overwrites_the_catalog_silently(gf: Gf, project: Path) -> None:
    catalog = CATALOG
    before = {p.name: p.read_bytes() for p in catalog.iterdir() if p.is_file()}
    r = gf("catalog", "refresh", "--regions", "us-east-1", cwd=project)
    assert r.returncode == 2
    assert "--out DIR" in r.stderr and "--in-place" in r.stderr, r.stderr
    assert {p.name: p.read_bytes() for p in catalog.iterdir() if p.is_file()} == before


def test_refresh_refuses_implausible_prices(gf: Gf, project: Path, tmp_path: Path, aws_env: str) -> None:
    """moto answers spot prices that no real p4de has; the previous snapshot's value is kept."""
    out = tmp_path / "catalog"
    r = gf("catalog", "refresh", "--regions", "us-east-1", "--out", str(out), "--format", "json", cwd=project)
    assert r.returncode == 0, r.stderr
    items = [i for i in json.loads(r.stdout)["items"] if i["status"] == "implausible"]
    assert items, "moto's spot prices should have been refused"
    assert "warning: spot_usd_per_hour" in r.stderr
    old = {(row["instance_type"], row["region"]): row
           for row in csv.DictReader(io.StringIO((CATALOG / "offerings.csv").read_text()))}
    new = {(row["instance_type"], row["region"]): row for row in csv.DictReader(io.StringIO((out / "offerings.csv").read_text()))}
    for item in items:
        name, region = item["scope"].split()
        assert new[(name, region)][item["field"]] == old[(name, region)][item["field"]], item
    for (name, region), row in new.items():
        if row["spot_usd_per_hour"]:
            assert float(row["spot_usd_per_hour"]) >= 0.01, (name, region, row)
