"""`catalog refresh` against a real moto server (tests/support/moto_server.py), all-or-none writes.

moto serves describe_instance_types (real data for p4d/p4de/p5/p3dn/g4dn/g5...), offerings by AZ
ID and a placeholder spot history (every price 0.00001); it has no Pricing backend and no p3.*
types (research/moto-coverage.md). The expectations below are those moto facts.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.cli import main
from gpuforge.core.catalog import CATALOG_DIR, load_catalog
from gpuforge.core.catalog.refresh import RefreshError, refresh_catalog
from gpuforge.core.catalog.writer import write_all_or_none

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
CATALOG_FILES = {"instance_types.csv", "offerings.csv", "gpus.yaml", "regions.yaml", "storage_prices.yaml", "meta.yaml"}


def _rows(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with path.open(newline="") as fh:
        return {(r["instance_type"], r["region"]): r for r in csv.DictReader(fh)}


def _items(report: Any, status: str | None = None) -> list[tuple[str, str, str, str]]:
    return [(i.field, i.scope, i.status, i.detail) for i in report.items if status in (None, i.status)]


def test_refresh_from_moto_writes_a_loadable_catalog(aws_env: str, tmp_path: Path) -> None:
    shipped_before = {p.name: p.read_bytes() for p in CATALOG_DIR.iterdir() if p.is_file()}
    report = refresh_catalog(["us-east-1", "us-west-2"], tmp_path, now=NOW)

    assert set(report.written) == CATALOG_FILES
    assert {p.name for p in tmp_path.iterdir()} == CATALOG_FILES  # no temp or backup files left behind
    cat = load_catalog(tmp_path)
    p4d = cat.instance("p4d.24xlarge")
    # From describe_instance_types (moto's real data) ...
    assert (p4d.gpu_count, p4d.gpu_memory_gib, p4d.vcpus, p4d.memory_gib) == (8, 40.0, 96, 1152.0)
    assert (p4d.network_gbps, p4d.network_cards, p4d.efa_interfaces, p4d.nvme_count, p4d.nvme_gb_each) == (400, 4, 4, 8, 1000)
    assert cat.instance("g4dn.xlarge").network_gbps == 5  # "Up to 25 Gigabit": the card baseline
    assert (p4d.cores, p4d.threads_per_core) == (48, 2)  # VCpuInfo: Slurm's CoresPerSocket/ThreadsPerCore
    # ... and what no API gives, carried over.
    assert (p4d.interconnect, p4d.gpudirect_rdma, p4d.gpu_model) == ("nvswitch", True, "A100")
    assert cat.instance("p4de.24xlarge").gpu_model == "A100-80GB"

    # Offerings by AZ ID, as moto lists them.
    assert p4d.offering("us-east-1").az_ids == ("use1-az1", "use1-az2", "use1-az4", "use1-az6")  # type: ignore[union-attr]
    assert cat.instance("p4de.24xlarge").offering("us-east-1").az_ids == ("use1-az4", "use1-az6")  # type: ignore[union-attr]
    # Spot: moto's placeholder price (0.00001) is implausible against the previous snapshot, so the
    # previous price stays and the report says why (issue 13 item 5).
    shipped = load_catalog(CATALOG_DIR).instance("g4dn.8xlarge").offering("us-east-1")
    assert cat.instance("g4dn.8xlarge").offering("us-east-1").spot_usd_per_hour == shipped.spot_usd_per_hour  # type: ignore[union-attr]
    assert any(f == "spot_usd_per_hour" and s == "g4dn.8xlarge us-east-1" and st == "implausible" and "1e-05" in d
               for f, s, st, d in _items(report)), _items(report)
    # No pricing backend in moto: the old on-demand prices stay, and the report says why.
    assert p4d.offering("us-east-1").on_demand_usd_per_hour == 21.957642  # type: ignore[union-attr]
    kept = _items(report, "kept")
    assert any(f == "on_demand_usd_per_hour" and "not served by this endpoint" in d for f, _, _, d in kept), kept
    # moto has no p3.* types: their facts are kept, reported per type.
    assert ("instance facts", "p3.16xlarge", "kept", "describe_instance_types did not return this type") in kept
    assert cat.instance("p3.16xlarge").gpu_count == 8

    # Regions not asked for are untouched.
    old_rows, new_rows = _rows(CATALOG_DIR / "offerings.csv"), _rows(tmp_path / "offerings.csv")
    assert {k: v for k, v in old_rows.items() if k[1] == "eu-west-1"} == {
        k: v for k, v in new_rows.items() if k[1] == "eu-west-1"
    }

    meta = yaml.safe_load((tmp_path / "meta.yaml").read_text())
    assert meta["refreshed"]["at"] == "2026-12-01T12:00:00+00:00"
    assert meta["refreshed"]["endpoint"] == aws_env
    assert meta["refreshed"]["regions"] == ["us-east-1", "us-west-2"]
    assert meta["sources"] == yaml.safe_load((CATALOG_DIR / "meta.yaml").read_text())["sources"]
    assert (tmp_path / "meta.yaml").read_text().startswith("# Where the catalog's facts come from")
    # --out was elsewhere: the shipped catalog did not change.
    assert {p.name: p.read_bytes() for p in CATALOG_DIR.iterdir() if p.is_file()} == shipped_before


def test_forbidden_api_keeps_old_values_and_says_so(aws_env: str, tmp_path: Path) -> None:
    import boto3
    from botocore.exceptions import ClientError

    def clients(service: str, region: str) -> Any:
        client = boto3.client(service, region_name=region)  # type: ignore[call-overload]
        if service == "ec2":

            def denied(**_: Any) -> Any:
                raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "no"}}, "DescribeSpotPriceHistory")

            client.describe_spot_price_history = denied
        return client

    report = refresh_catalog(["us-east-1"], tmp_path, clients=clients, now=NOW)
    assert (
        "spot_usd_per_hour",
        "us-east-1",
        "kept",
        "describe_spot_price_history: UnauthorizedOperation: not allowed for these credentials",
    ) in _items(report)
    old, new = _rows(CATALOG_DIR / "offerings.csv"), _rows(tmp_path / "offerings.csv")
    assert new[("g4dn.8xlarge", "us-east-1")]["spot_usd_per_hour"] == old[("g4dn.8xlarge", "us-east-1")]["spot_usd_per_hour"]
    kept = yaml.safe_load((tmp_path / "meta.yaml").read_text())["refreshed"]["kept"]
    assert {
        "field": "spot_usd_per_hour",
        "scope": "us-east-1",
        "status": "kept",
        "detail": "describe_spot_price_history: UnauthorizedOperation: not allowed for these credentials",
    } in kept


def test_nothing_answers_writes_nothing(aws_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A port nobody listens on: every call fails to connect (bounded by the client config).
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(RefreshError, match="nothing was written"):
        refresh_catalog(["us-east-1"], tmp_path, now=NOW)
    assert list(tmp_path.iterdir()) == []


def test_cli_refresh_json(aws_env: str, tmp_path: Path) -> None:
    # A subprocess, as a user runs it: the in-process moto server prints to this process's stdout.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuforge.cli",
            "catalog",
            "refresh",
            "--regions",
            "us-west-2",
            "--out",
            str(tmp_path),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["regions"] == ["us-west-2"] and set(doc["written"]) == CATALOG_FILES
    assert any(i["field"] == "az_ids" and i["status"] == "refreshed" for i in doc["items"])


def test_no_credentials_is_bad_input(
    aws_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    with pytest.raises(SystemExit) as exc:
        main(["catalog", "refresh", "--regions", "us-east-1", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "error: catalog refresh needs AWS credentials" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_write_all_or_none_rolls_back_a_failed_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    a.write_text("old a")
    b.write_text("old b")
    real_replace = os.replace
    calls = {"n": 0}

    def flaky(src: Any, dst: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # the second swap fails, after the first has happened
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(OSError, match="disk full"):
        write_all_or_none({a: "new a", b: "new b", c: "new c"})
    assert (a.read_text(), b.read_text(), c.exists()) == ("old a", "old b", False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.csv"]  # no staged or backup files left


def test_pricing_reply_parser() -> None:
    # moto has no Pricing backend, so the parser is tested on a PriceList item in the documented
    # get_products shape (a JSON string per product; hand-written here, not captured from AWS).
    from gpuforge.core.catalog.aws_reads import usd_per_hour

    item = json.dumps(
        {
            "product": {"attributes": {"instanceType": "p4d.24xlarge", "regionCode": "us-east-1"}},
            "terms": {
                "OnDemand": {
                    "X.JRTCKXETXF": {
                        "priceDimensions": {"X.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": "21.9576000000"}}}
                    }
                }
            },
        }
    )
    assert usd_per_hour([item]) == 21.9576
    assert usd_per_hour([json.dumps({"terms": {"OnDemand": {}}})]) is None
    assert usd_per_hour([]) is None


def test_refresh_brings_network_cards_and_ena_express_from_the_api(aws_env: str, tmp_path: Path) -> None:
    """The TCP model's card figures (issue 15) come from describe_instance_types NetworkCards and
    EnaSrdSupported: start from a catalog where they are wrong and let the refresh put them right."""
    src = tmp_path / "src"
    src.mkdir()
    for p in CATALOG_DIR.iterdir():
        if p.is_file() and p.suffix in (".csv", ".yaml"):
            (src / p.name).write_bytes(p.read_bytes())
    header, rows = _read(src / "instance_types.csv")
    for r in rows:
        r["card_baseline_gbps"], r["card_peak_gbps"], r["ena_express"] = "1", "1", "false"
    with (src / "instance_types.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "out"
    report = refresh_catalog(["us-east-1"], out, source_dir=src, now=NOW)
    cat = load_catalog(out)
    cards = {n: (cat.instance(n).card_baseline_gbps, cat.instance(n).card_peak_gbps, cat.instance(n).ena_express)
             for n in ("p4de.24xlarge", "p5en.48xlarge", "g4dn.xlarge", "g6e.48xlarge")}  # fmt: skip
    assert cards == {
        "p4de.24xlarge": (100, 100, False),  # one of 4 cards: TCP uses card 0
        "p5en.48xlarge": (200, 200, True),
        "g4dn.xlarge": (5, 25, False),  # "Up to 25 Gigabit": baseline 5, burst to 25
        "g6e.48xlarge": (400, 400, True),
    }
    # p3.* are not in moto: theirs are kept (wrong here on purpose, so visibly untouched) and reported
    assert cat.instance("p3.16xlarge").card_baseline_gbps == 1
    assert ("instance facts", "p3.16xlarge", "kept", "describe_instance_types did not return this type") in _items(report)
    # the shipped catalog already agrees with the API for every type moto knows
    shipped = load_catalog()
    for name, it in cat.instance_types.items():
        if not name.startswith("p3."):
            mine = shipped.instance(name)
            assert (it.card_baseline_gbps, it.card_peak_gbps, it.ena_express) == (
                mine.card_baseline_gbps, mine.card_peak_gbps, mine.ena_express), name  # fmt: skip


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def test_refresh_keeps_meta_yaml_style(aws_env: str, tmp_path: Path) -> None:
    """Only the `refreshed:` block changes: the hand-written rest of meta.yaml (comments, `>-`
    folded sources, order) stays byte for byte, as `--in-place` must keep it (issue 22)."""
    original = (CATALOG_DIR / "meta.yaml").read_text()
    refresh_catalog(["us-east-1"], tmp_path, now=NOW)
    written = (tmp_path / "meta.yaml").read_text()
    before = original[: original.index("\nrefreshed:")]
    assert written.startswith(before + "\nrefreshed:\n"), written[: len(before) + 200]
    assert yaml.safe_load(written)["refreshed"]["regions"] == ["us-east-1"]
    again = tmp_path / "again"
    again.mkdir()
    for name in CATALOG_FILES:
        (again / name).write_text((tmp_path / name).read_text())
    refresh_catalog(["us-east-1"], again, source_dir=tmp_path, now=NOW)  # replaces the block, never appends one
    assert (again / "meta.yaml").read_text().count("\nrefreshed:") == 1
