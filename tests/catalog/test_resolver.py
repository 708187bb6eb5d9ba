"""The resolver on the three seed profiles (DESIGN.md table) and on hand-made requirements."""

from __future__ import annotations

import itertools

import pytest

from gpuforge.core.catalog import load_catalog
from gpuforge.core.profiles import Requirements, all_profiles, load_profile
from gpuforge.core.resolver import Candidate, ResolveError, best_exact, resolve

CAT = load_catalog()


def _by_type(cands: list[Candidate]) -> dict[str, Candidate]:
    return {c.instance_type: c for c in cands}


def test_cv_training_is_one_p4de_with_the_8_gpu_note() -> None:
    ranked = resolve(load_profile("cv-training").requirements, "us-east-1")
    top = ranked[0]
    assert (top.instance_type, top.node_count, top.fit) == ("p4de.24xlarge", 1, "exact")
    assert "no AWS instance has 4×A100-80GB; p4de.24xlarge has 8 (4 more than needed)" in top.surpluses
    # The only exact fit: every other shape misses something.
    assert [c.instance_type for c in ranked if c.fit == "exact"] == ["p4de.24xlarge"]
    p4d = _by_type(ranked)["p4d.24xlarge"]
    assert p4d.gaps == ["A100 40 GiB < 80 GiB per GPU"]
    assert any(n.startswith("20% cheaper on-demand than 1× p4de.24xlarge") and "54% cheaper on spot" in n for n in p4d.notes), (
        p4d.notes
    )
    # p4d is the best of the shapes with gaps: one gap, and the cheapest of those.
    assert ranked[1].instance_type == "p4d.24xlarge"


def test_nlp_inference_is_two_g4dn_8xlarge_cheapest_exact() -> None:
    ranked = resolve(load_profile("nlp-inference").requirements, "us-east-1")
    top = ranked[0]
    assert (top.instance_type, top.node_count, top.fit) == ("g4dn.8xlarge", 2, "exact")
    assert top.on_demand_usd_per_hour == pytest.approx(2 * 2.176)
    assert top.spot_usd_per_hour == pytest.approx(2 * 0.5935)
    exact = [c for c in ranked if c.fit == "exact"]
    prices = [c.on_demand_usd_per_hour for c in exact]
    assert None not in prices
    assert prices == sorted(p for p in prices if p is not None)
    by = _by_type(ranked)
    # g4dn.12xlarge has 192 GiB: RAM alone makes it two nodes.
    assert by["g4dn.12xlarge"].node_count == 2 and "256 GiB RAM in total" in by["g4dn.12xlarge"].node_reason
    # The L4 alternative is cheaper on-demand, but it is not a T4.
    assert by["g6.8xlarge"].gaps == ["L4, not T4: g6.8xlarge has 1×L4"]
    assert by["g6.8xlarge"].on_demand_usd_per_hour < top.on_demand_usd_per_hour  # type: ignore[operator]
    # Below 8xlarge the network is too slow, and that is said.
    assert "20 Gbps per node < 25 Gbps needed" in by["g4dn.4xlarge"].gaps


def test_risk_sim_is_p3dn_exact_and_p4d_flagged_from_data() -> None:
    ranked = resolve(load_profile("risk-sim").requirements, "us-east-1")
    top = ranked[0]
    assert (top.instance_type, top.node_count, top.fit) == ("p3dn.24xlarge", 2, "exact")
    assert any("st1 EBS volume" in n for n in top.notes)  # HDD is noted, never a gap
    by = _by_type(ranked)
    p4d = by["p4d.24xlarge"]
    assert p4d.gaps == ["A100, not V100: p4d.24xlarge has 8×A100"]
    assert p4d.faster_per_dollar
    assert p4d.on_demand_usd_per_hour < top.on_demand_usd_per_hour  # type: ignore[operator]
    note = next(n for n in p4d.notes if "FP64 TFLOPS per $/h" in n)
    # 16×9.7 / (2×21.957642 + st1) vs 16×7.8 / (2×31.212 + st1): about 3.5 vs 2.0 (aws-gpu-specs.md §5.3).
    assert "3.5 FP64 TFLOPS per $/h on-demand vs 2.0 for 2× p3dn.24xlarge" in note
    assert "cheaper on-demand" in note and "dearer on spot" in note
    # No RDMA without EFA: p3.16xlarge has V100s on NVLink but fails RDMA and network.
    assert any("no EFA" in g for g in by["p3.16xlarge"].gaps)
    assert any("25 Gbps per node < 100" in g for g in by["p3.16xlarge"].gaps)
    # T4 is slower per dollar in FP64 than the V100 baseline: no flag.
    assert not by["g4dn.metal"].faster_per_dollar


@pytest.mark.parametrize("name", sorted(all_profiles()))
def test_profile_shape_is_the_resolvers_top_exact_fit(name: str) -> None:
    # Drift guard: if the catalog or requirements change, the profile's shape must be re-decided.
    profile = load_profile(name)
    best = best_exact(profile.requirements, "us-east-1")
    assert best is not None
    assert (best.instance_type, best.node_count) == (profile.shape.instance_type, profile.shape.node_count)


def test_nvlink_needs_the_gpus_in_one_domain() -> None:
    req = Requirements(gpu_model="V100", gpus=8, gpu_memory_gib=16, interconnect="nvlink")
    by = _by_type(resolve(req, "us-east-1"))
    assert by["p3.16xlarge"].fit == "exact" and by["p3.16xlarge"].node_count == 1
    p3_8 = by["p3.8xlarge"]
    assert p3_8.node_count == 2
    assert any("8 GPUs needed on one NVLink domain; p3.8xlarge has 4 per node" in g for g in p3_8.gaps)
    # Same 8 GPUs without the NVLink ask: two p3.8xlarge are fine.
    loose = _by_type(resolve(req.model_copy(update={"interconnect": "none"}), "us-east-1"))
    assert loose["p3.8xlarge"].fit == "exact"


def test_pcie_board_fails_nvlink_and_nvswitch_satisfies_it() -> None:
    req = Requirements(gpu_model="A10G", gpus=4, gpu_memory_gib=20, interconnect="nvlink")
    by = _by_type(resolve(req, "us-east-1"))
    assert "NVLink needed; g5.12xlarge has PCIe only" in by["g5.12xlarge"].gaps
    req_h = Requirements(gpu_model="H100", gpus=8, gpu_memory_gib=80, interconnect="nvlink")
    assert _by_type(resolve(req_h, "us-east-1"))["p5.48xlarge"].fit == "exact"


def test_nvme_and_region_availability() -> None:
    req = Requirements(gpu_model="A100-80GB", gpus=8, gpu_memory_gib=80, nvme_gb=1000)
    # eu-west-1 has no p4de (§6): not a candidate there.
    assert "p4de.24xlarge" not in _by_type(resolve(req, "eu-west-1"))
    v = Requirements(gpu_model="V100", gpus=1, gpu_memory_gib=16, nvme_gb=100)
    assert "no instance-store NVMe per node < 100 GB NVMe needed" in _by_type(resolve(v, "us-east-1"))["p3.2xlarge"].gaps


def test_sorted_by_fit_then_gap_count_then_price() -> None:
    ranked = resolve(load_profile("risk-sim").requirements, "us-west-2")
    keys = [(0 if c.fit == "exact" else 1, len(c.gaps)) for c in ranked]
    assert keys == sorted(keys)
    for a, b in itertools.pairwise(ranked):
        if (a.fit, len(a.gaps)) == (b.fit, len(b.gaps)) and b.on_demand_usd_per_hour is not None:
            assert a.on_demand_usd_per_hour is not None and a.on_demand_usd_per_hour <= b.on_demand_usd_per_hour


def test_type_without_on_demand_price_sorts_last_and_says_why() -> None:
    req = Requirements(gpu_model="H200", gpus=8, gpu_memory_gib=141)
    ranked = resolve(req, "us-west-2")
    p5e = _by_type(ranked)["p5e.48xlarge"]
    assert p5e.on_demand_usd_per_hour is None
    assert any("no on-demand price in us-west-2" in n for n in p5e.notes)
    assert ranked.index(p5e) > ranked.index(_by_type(ranked)["p5en.48xlarge"])


def test_unknown_gpu_model_and_region() -> None:
    with pytest.raises(ResolveError, match="did you mean 'A100-80GB'"):
        resolve(Requirements(gpu_model="A100-80G", gpus=1, gpu_memory_gib=1), "us-east-1")
    with pytest.raises(KeyError, match=r"region .us-east-2x. is not in the catalog"):
        resolve(Requirements(gpu_model="T4", gpus=1, gpu_memory_gib=1), "us-east-2x")
