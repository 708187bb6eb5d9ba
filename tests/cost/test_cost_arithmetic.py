"""`gpuforge cost` against figures worked out by hand from the catalog.

Catalog inputs used below (core/catalog/offerings.csv, storage_prices.yaml, commitments.yaml):
  p4de.24xlarge us-east-1  on-demand 27.44705  spot 14.2574   (8 GPUs)
  g4dn.8xlarge  us-east-1  on-demand  2.176    spot  0.5935   (1 GPU)
  p3dn.24xlarge us-east-1  on-demand 31.212    spot  4.5474   (8 GPUs)
  gp3 0.08 $/GB-month, st1 0.045 $/GB-month, 730 h per storage month; 30 days = 720 h
  commitments: 1y 40% off, 3y 60% off (seed 000 line 28)
Every profile has a 200 GiB gp3 root: 200 * 0.08 / 730 = 0.021917808 $/node-h.
risk-sim adds 4096 GiB st1: (16 + 4096 * 0.045) / 730 = 200.32 / 730 = 0.274410959 $/node-h.
nlp-inference runs on EKS (core/catalog/platform_prices.yaml, kubernetes/defaults.yaml):
  control plane 0.10 $/h; system nodes 2 x m6i.large at 0.096 = 0.192 $/h; their roots
  2 x 30 GiB gp3 = 60 * 0.08 / 730 = 0.006575342 $/h; its nodes are private and leave through a
  NAT gateway at 0.045 $/h (platform_prices.yaml nat_gateway). Fixed: 0.343575342 $/h under every option.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuforge.cli import cli
from gpuforge.common.errors import InputError
from gpuforge.core.config import parse_stack_config
from gpuforge.core.costplan import hybrid, load_purchase_data, stack_cost
from gpuforge.stackfile import load_stack_config

ROOT = Path(__file__).resolve().parents[2]
ROOT_GP3 = 200 * 0.08 / 730


def _cost_json(*stacks: str) -> dict:
    args = ["cost", "--project-dir", str(ROOT), "--format", "json"]
    for s in stacks:
        args += ["--stack", s]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_cv_training_every_option_by_hand() -> None:
    doc = _cost_json("cv-training")
    opts = doc["stacks"][0]["options"]
    assert doc["stacks"][0]["gpus"] == 8
    # on-demand: 27.44705 + 0.021918 = 27.468968 per node-h; one node; x720 = 19777.66
    assert opts["on_demand"]["usd_per_hour"] == pytest.approx(27.4690, abs=1e-4)
    assert opts["on_demand"]["usd_per_30_days"] == pytest.approx(19777.66, abs=0.01)
    # spot: 14.2574 + 0.021918 = 14.279318; x720 = 10281.11
    assert opts["spot"]["usd_per_hour"] == pytest.approx(14.2793, abs=1e-4)
    assert opts["spot"]["usd_per_30_days"] == pytest.approx(10281.11, abs=0.01)
    # 1y: 27.44705 * 0.6 = 16.46823 (+ storage 16.490148); 3y: 27.44705 * 0.4 = 10.97882 (+ 11.000738)
    assert opts["1y"]["compute_usd_per_node_hour"] == pytest.approx(16.4682, abs=1e-4)
    assert opts["1y"]["usd_per_30_days"] == pytest.approx(11872.91, abs=0.01)
    assert opts["3y"]["compute_usd_per_node_hour"] == pytest.approx(10.9788, abs=1e-4)
    assert opts["3y"]["usd_per_30_days"] == pytest.approx(7920.53, abs=0.01)
    # per GPU-hour on-demand: 27.468968 / 8 = 3.433621
    assert opts["on_demand"]["usd_per_gpu_hour"] == pytest.approx(3.4336, abs=1e-4)


def test_risk_sim_per_node_and_total_with_st1() -> None:
    opts = _cost_json("risk-sim")["stacks"][0]["options"]
    assert _cost_json("risk-sim")["stacks"][0]["storage_usd_per_node_hour"] == pytest.approx(0.2744, abs=1e-4)
    # per node 31.212 + 0.274411 = 31.486411; two nodes 62.972822; x720 = 45340.43
    assert opts["on_demand"]["usd_per_node_hour"] == pytest.approx(31.4864, abs=1e-4)
    assert opts["on_demand"]["usd_per_hour"] == pytest.approx(62.9728, abs=1e-4)
    assert opts["on_demand"]["usd_per_30_days"] == pytest.approx(45340.43, abs=0.01)
    # spot per GPU-hour: (4.5474 + 0.274411) / 8 = 0.602726
    assert opts["spot"]["usd_per_gpu_hour"] == pytest.approx(0.6027, abs=1e-4)


def test_hybrid_of_the_three_reference_stacks() -> None:
    doc = _cost_json("cv-training", "nlp-inference", "risk-sim")
    hy = doc["hybrid"]
    assert hy["choices"] == {"cv-training": "spot", "nlp-inference": "1y", "risk-sim": "spot"}
    # on-demand: 27.468968 + 2*(2.176+0.021918) + 0.343575 (EKS and NAT fixed) + 62.972822 = 95.181200
    assert hy["on_demand_usd_per_hour"] == pytest.approx(95.1812, abs=1e-4)
    # hybrid: 14.279318 + 2*(1.3056+0.021918) + 0.343575 + 2*(4.5474+0.274411) = 26.921550
    assert hy["hybrid_usd_per_hour"] == pytest.approx(26.9216, abs=1e-4)
    # saving 1 - 26.921550 / 95.181200 = 0.717155: above the seed's "more than 55%"
    assert hy["saving"] == pytest.approx(0.7172, abs=1e-4)
    assert hy["meets_seed_claim"] is True
    # the total row is the sum of the stacks
    assert doc["total"]["on_demand"]["usd_per_hour"] == pytest.approx(95.1812, abs=1e-4)


def test_inference_alone_is_a_40_percent_commitment_not_55() -> None:
    # One inference stack on a 1-year commitment saves 2 * 2.176 * 0.4 = 1.7408 $/h of
    # 2 * 2.197918 + 0.343575 = 4.739411 $/h (the fixed items are not discounted): 36.7%. The
    # seed's 55% only comes from mixing in spot training, and the report says so instead of claiming it.
    hy = _cost_json("nlp-inference")["hybrid"]
    assert hy["saving"] == pytest.approx(1.7408 / 4.739411, abs=1e-4)
    assert hy["meets_seed_claim"] is False


def test_eks_stack_adds_control_plane_and_system_nodes_by_hand() -> None:
    (st,) = _cost_json("nlp-inference")["stacks"]
    assert [(f["item"], f["quantity"], f["unit"], f["usd_per_hour"]) for f in st["fixed"]] == [
        ("NAT gateway", 1, "gateway", 0.045),  # EKS nodes are private; per-GB processing not included
        ("EKS control plane", 1, "cluster", 0.1),
        ("system nodes m6i.large", 2, "nodes", 0.192),
        ("storage system root gp3", 60, "GiB", 0.0066),  # 0.006575, rounded to 4 places
    ]
    assert st["fixed_usd_per_hour"] == pytest.approx(0.3436, abs=1e-4)
    opts = st["options"]
    # on-demand: 2 * (2.176 + 0.021918) + 0.343575 = 4.739411; x720 = 3412.38
    assert opts["on_demand"]["usd_per_hour"] == pytest.approx(4.7394, abs=1e-4)
    assert opts["on_demand"]["usd_per_30_days"] == pytest.approx(3412.38, abs=0.01)
    # spot: the fixed items cost the same: 2 * (0.5935 + 0.021918) + 0.343575 = 1.574411; x720 = 1133.58
    assert opts["spot"]["usd_per_hour"] == pytest.approx(1.5744, abs=1e-4)
    assert opts["spot"]["usd_per_30_days"] == pytest.approx(1133.58, abs=0.01)
    # 1y: 2 * (1.3056 + 0.021918) + 0.343575 = 2.998611
    assert opts["1y"]["usd_per_hour"] == pytest.approx(2.9986, abs=1e-4)
    # per node and per GPU-hour stay the node's own figures (fixed items are not spread over GPUs)
    assert opts["on_demand"]["usd_per_node_hour"] == pytest.approx(2.1979, abs=1e-4)
    assert opts["on_demand"]["usd_per_gpu_hour"] == pytest.approx(2.1979, abs=1e-4)
    # a stack off EKS has no fixed items
    assert _cost_json("cv-training")["stacks"][0]["fixed"] == []


def test_preview_shows_the_eks_items_as_lines() -> None:
    raw, _ = load_stack_config(ROOT, "nlp-inference")
    from gpuforge.core.cost import estimate

    est = estimate(parse_stack_config(raw, "nlp-inference")).to_dict()
    lines = {line["item"]: line for line in est["lines"]}
    assert lines["EKS control plane"]["on_demand_usd_per_hour"] == pytest.approx(0.10)
    assert lines["system nodes m6i.large"]["on_demand_usd_per_hour"] == pytest.approx(0.192)
    assert all(lines[k]["spot_usd_per_hour"] is None for k in ("EKS control plane", "system nodes m6i.large"))
    assert est["hourly"]["on_demand"] == pytest.approx(4.7394, abs=1e-4)
    assert est["hourly"]["spot"] == pytest.approx(1.5744, abs=1e-4)
    assert any("extended support" in n for n in est["notes"])


def test_commitment_discounts_come_from_the_data_file(tmp_path: Path) -> None:
    text = (ROOT / "core/catalog/commitments.yaml").read_text().replace("discount: 0.40", "discount: 0.10")
    path = tmp_path / "commitments.yaml"
    path.write_text(text)
    raw, _ = load_stack_config(ROOT, "nlp-inference")
    cfg = parse_stack_config(raw, "nlp-inference")
    cost = stack_cost(cfg, data=load_purchase_data(path))
    assert cost.compute_per_node["1y"] == pytest.approx(2.176 * 0.9)
    assert "seed 000 line 28" in load_purchase_data().commitments["1y"].source


def test_unknown_price_stays_unknown() -> None:
    raw, _ = load_stack_config(ROOT, "cv-training")
    cost = stack_cost(parse_stack_config(raw, "cv-training"))
    unpriced = type(cost)(**{**cost.__dict__, "compute_per_node": {**cost.compute_per_node, "spot": None}})
    assert unpriced.hourly("spot") is None and unpriced.per_gpu_hour("spot") is None
    assert hybrid([unpriced]).hybrid_hourly is None and hybrid([unpriced]).saving is None


def test_unknown_stack_is_bad_input() -> None:
    result = CliRunner().invoke(cli, ["cost", "--project-dir", str(ROOT), "--stack", "cv-trainin"])
    # cli() raises; gpuforge.cli.main renders it as `error: ...` and exits 2
    assert isinstance(result.exception, InputError)
    assert result.exception.exit_code == 2
    assert "did you mean 'cv-training'" in result.exception.render()


def test_table_output_shows_every_option() -> None:
    result = CliRunner().invoke(cli, ["cost", "--project-dir", str(ROOT), "--stack", "nlp-inference", "--format", "table"])
    assert result.exit_code == 0, result.output
    for label in ("on-demand", "spot", "1y commit", "3y commit", "hybrid", "saving 36.7%", "EKS control plane", "NAT gateway"):
        assert label in result.output


def test_autoscaled_stack_is_costed_at_its_minimum_with_the_maximum_shown(tmp_path: Path) -> None:
    raw, _ = load_stack_config(ROOT, "nlp-inference")
    raw = {k: v for k, v in raw.items() if not k.startswith("gpuforge:kube")}
    raw.update({"gpuforge:autoscaling": "true"})
    cost = stack_cost(parse_stack_config(raw, "asg"))
    # seed autoscaling: min 4, max 32 g4dn.8xlarge at 2.176 + 0.021918 = 2.197918 $/node-h, plus the
    # private nodes' NAT gateway (publicIps: false in the stack file) at 0.045 $/h
    assert (cost.node_count, cost.max_nodes) == (4, 32)
    assert cost.hourly("on_demand") == pytest.approx(4 * 2.197918 + 0.045, abs=1e-5)
    assert cost.to_dict()["options"]["on_demand"]["usd_per_hour_at_max"] == pytest.approx(32 * 2.197918 + 0.045, abs=1e-4)
