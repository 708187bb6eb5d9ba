"""Every purchase option a stack may name has one price rule, shared by `cost`, `stack list`,
`cost --jobs` and `poc` (core/costplan.py price_option): a capacity reservation is billed at the
on-demand rate (EC2 User Guide, "Capacity Reservation pricing and billing": "you are charged the
equivalent On-Demand rate whether you run instances in the reserved capacity or not"), and a
capacity block's price is set when it is bought, so the catalog has none. `stack list` and `cost`
crashed with a KeyError on both (they looked up 'capacity_reservation' among the catalog's options)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuforge.core.costplan import OPTIONS, price_option
from tests.cli.conftest import Gf


def test_every_purchase_option_has_a_price_rule() -> None:
    from typing import get_args

    from gpuforge.core.fleet import PurchaseOption

    assert {o: price_option(o) for o in get_args(PurchaseOption)} == {
        "on-demand": "on_demand", "spot": "spot", "capacity-reservation": "on_demand", "capacity-block": None,
    }
    assert all(price_option(o) in (*OPTIONS, None) for o in get_args(PurchaseOption))


def _reserved(project: Path, option: str) -> None:
    path = project / "stacks" / "Pulumi.cv-training.yaml"
    text = path.read_text()
    # p4d.24xlarge: sold as Capacity Blocks (core/guardrails.yaml capacity_blocks), offered in use1-az4
    path.write_text(text + f"  gpuforge:purchaseOption: {option}\n  gpuforge:capacityReservationId: cr-0123456789abcdef0\n"
                    "  gpuforge:instanceType: p4d.24xlarge\n")


@pytest.mark.parametrize(("option", "priced"), [("capacity-reservation", True), ("capacity-block", False)])
def test_stack_list_and_cost_price_a_reserved_stack(gf: Gf, project: Path, option: str, priced: bool) -> None:
    _reserved(project, option)
    r = gf("stack", "list", "--format", "json", "--project-dir", str(project))
    assert r.returncode == 0, r.stderr
    row = next(x for x in json.loads(r.stdout) if x["stack"] == "cv-training")
    assert row["purchase_option"] == option and row["problem"] is None, row
    r = gf("cost", "--stack", "cv-training", "--format", "json", "--project-dir", str(project))
    assert r.returncode == 0, r.stderr
    stack = json.loads(r.stdout)["stacks"][0]
    if priced:  # billed at the on-demand rate, and `cost` marks that row as the one the stack uses
        assert row["usd_per_hour"] == round(stack["options"]["on_demand"]["usd_per_hour"], 2)
        assert stack["purchase_option"] == "on_demand"
    else:  # no catalog price: said as unknown, never a guess
        assert row["usd_per_hour"] is None
        assert stack["purchase_option"] == "capacity-block"
