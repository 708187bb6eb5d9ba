"""Issue 13 item 5: one project directory. The catalog, profiles and components come from the
project (as `pulumi up` imports them from the project directory), wherever --project-dir sits."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import REPO, Gf

EDITED = 99.0


def _edit_price(project: Path) -> None:
    path = project / "components" / "catalog" / "offerings.csv"
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    for row in rows:
        if (row["instance_type"], row["region"]) == ("p4de.24xlarge", "us-east-1"):
            row["on_demand_usd_per_hour"] = str(EDITED)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue())


def _od(doc: dict[str, Any]) -> float:
    return float(doc["stacks"][0]["options"]["on_demand"]["compute_usd_per_node_hour"])


@pytest.mark.parametrize("where", ["before", "after", "cwd"])
def test_an_edited_price_in_the_project_changes_cost(gf: Gf, project: Path, tmp_path: Path, where: str) -> None:
    _edit_price(project)
    args = ["cost", "--stack", "cv-training", "--format", "json"]
    if where == "before":
        r = gf("--project-dir", str(project), *args, cwd=tmp_path)
    elif where == "after":
        r = gf(*args, "--project-dir", str(project), cwd=tmp_path)
    else:
        r = gf(*args, cwd=project / "stacks")  # found by walking up to Pulumi.yaml, as git finds a repo
    assert r.returncode == 0, r.stderr
    assert _od(json.loads(r.stdout)) == EDITED


def test_an_edited_price_in_the_project_changes_preview_and_catalog(gf: Gf, project: Path, tmp_path: Path) -> None:
    _edit_price(project)
    r = gf("preview", "--stack", "cv-training", "--format", "json", "--project-dir", str(project), "--no-policies",
           cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = json.loads(r.stdout)["cost"]["lines"]
    assert any(line["on_demand_usd_per_hour"] == EDITED for line in lines), lines
    r = gf("catalog", "list", "--region", "us-east-1", "--project-dir", str(project), cwd=tmp_path)
    row = next(line.split("\t") for line in r.stdout.splitlines() if line.startswith("p4de.24xlarge\t"))
    assert f"{EDITED:g}" in row, row
    # The checkout the CLI is installed from still has its own price.
    shipped = gf("cost", "--stack", "cv-training", "--format", "json", cwd=REPO)
    assert _od(json.loads(shipped.stdout)) != EDITED


def test_refresh_never_overwrites_the_catalog_silently(gf: Gf, project: Path) -> None:
    catalog = project / "components" / "catalog"
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
           for row in csv.DictReader(io.StringIO((project / "components" / "catalog" / "offerings.csv").read_text()))}
    new = {(row["instance_type"], row["region"]): row for row in csv.DictReader(io.StringIO((out / "offerings.csv").read_text()))}
    for item in items:
        name, region = item["scope"].split()
        assert new[(name, region)][item["field"]] == old[(name, region)][item["field"]], item
    for (name, region), row in new.items():
        if row["spot_usd_per_hour"]:
            assert float(row["spot_usd_per_hour"]) >= 0.01, (name, region, row)
