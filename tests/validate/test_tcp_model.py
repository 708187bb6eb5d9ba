"""The TCP expectation model (issue 15): per catalog type, the ceiling a pair test can reach and why.

The card figures are checked against describe_instance_types as moto ships it (a capture of the
real API, getmoto/moto moto/ec2/resources/instance_types.json); the per-flow limits are the EC2
User Guide's (tcp_model.yaml). EXPECTED below was worked out by hand from those two sources for a
pair in one cluster placement group running iperf3 3.9 (Ubuntu 22.04): flows = min(8, max(4,
ceil(card / 10))), ceiling = min(flows x 10, card baseline).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuforge.common.results import Level
from gpuforge.core.catalog import load_catalog
from gpuforge.validate import localise, thresholds
from gpuforge.validate.checks import Expectations
from gpuforge.validate.network import model, tcp_test

FIX = Path(__file__).with_name("netfix")

# type: (card 0 baseline, flows, ceiling Gbit/s per direction in a cluster placement group)
EXPECTED = {
    "g4dn.xlarge": (5, 4, 5), "g4dn.2xlarge": (10, 4, 10), "g4dn.4xlarge": (20, 4, 20),
    "g4dn.8xlarge": (50, 5, 50), "g4dn.12xlarge": (50, 5, 50), "g4dn.16xlarge": (50, 5, 50),
    "g4dn.metal": (100, 8, 80),
    "g5.xlarge": (2.5, 4, 2.5), "g5.2xlarge": (5, 4, 5), "g5.4xlarge": (10, 4, 10), "g5.8xlarge": (25, 4, 25),
    "g5.12xlarge": (40, 4, 40), "g5.16xlarge": (25, 4, 25), "g5.24xlarge": (50, 5, 50), "g5.48xlarge": (100, 8, 80),
    "g6.xlarge": (2.5, 4, 2.5), "g6.2xlarge": (5, 4, 5), "g6.4xlarge": (10, 4, 10), "g6.8xlarge": (25, 4, 25),
    "g6.12xlarge": (40, 4, 40), "g6.16xlarge": (25, 4, 25), "g6.24xlarge": (50, 5, 50), "g6.48xlarge": (100, 8, 80),
    "g6e.xlarge": (2.5, 4, 2.5), "g6e.2xlarge": (5, 4, 5), "g6e.4xlarge": (20, 4, 20), "g6e.8xlarge": (25, 4, 25),
    "g6e.12xlarge": (100, 8, 80), "g6e.16xlarge": (35, 4, 35), "g6e.24xlarge": (200, 8, 80),
    "g6e.48xlarge": (400, 8, 80),
    "p3.2xlarge": (2.5, 4, 2.5), "p3.8xlarge": (5, 4, 5), "p3.16xlarge": (5, 4, 5),
    "p3dn.24xlarge": (100, 8, 80), "p4d.24xlarge": (100, 8, 80), "p4de.24xlarge": (100, 8, 80),
    "p5.4xlarge": (100, 8, 80), "p5.48xlarge": (100, 8, 80), "p5e.48xlarge": (100, 8, 80),
    "p5en.48xlarge": (200, 8, 80),
}  # fmt: skip
ENA_EXPRESS = {"g6.48xlarge", "g6e.12xlarge", "g6e.24xlarge", "g6e.48xlarge", "p5.4xlarge", "p5.48xlarge",
               "p5e.48xlarge", "p5en.48xlarge"}  # fmt: skip


def _moto_types() -> dict[str, dict[str, object]]:
    moto = pytest.importorskip("moto")
    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    if not path.is_file():
        path = path.with_suffix("")  # older moto ships it uncompressed
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def test_catalog_cards_agree_with_describe_instance_types() -> None:
    api = _moto_types()
    checked = 0
    for name, it in load_catalog().instance_types.items():
        entry = api.get(name)
        if entry is None:  # p3.* left the API listing; their figures come from an older capture (meta.yaml)
            continue
        net: dict = entry["NetworkInfo"]  # type: ignore[assignment]
        [card] = [c for c in net["NetworkCards"] if c["NetworkCardIndex"] == net.get("DefaultNetworkCardIndex", 0)]
        assert (it.card_baseline_gbps, it.card_peak_gbps) == (card["BaselineBandwidthInGbps"], card["PeakBandwidthInGbps"]), name
        assert it.ena_express is bool(net["EnaSrdSupported"]), name
        checked += 1
    assert checked >= 38


def test_every_catalog_type_has_a_tested_ceiling() -> None:
    types = load_catalog().instance_types
    assert set(types) == set(EXPECTED)  # a new catalog type needs its row here
    for name, (card, flows, gbps) in EXPECTED.items():
        exp = thresholds.build_expectations("cv-training", name)
        facts = model.facts(exp)
        assert facts.placement == "cluster" and facts.card_baseline_gbps == card, name
        p = model.plan(facts, ((3, 9), (3, 9)))
        assert (p.flows, p.processes) == (flows, flows), name  # 3.9: one process per flow
        c = model.ceiling(facts, p)
        assert c.kind == "model" and c.gbps == gbps, name
        assert f"{flows} flows x 10 Gbit/s in a cluster placement group = {flows * 10:g} Gbit/s" in c.reason
        assert f"card 0 baseline {card:g}" in c.reason
        assert c.floor_gbps == pytest.approx(0.5 * gbps)
        sources = " ".join(c.sources)
        assert f"catalog: {name}" in sources and "ec2-instance-network-bandwidth" in sources
        assert types[name].ena_express is (name in ENA_EXPRESS)


@pytest.mark.parametrize(
    ("name", "old_floor"), [("p4de.24xlarge", 320.0), ("p3dn.24xlarge", 80.0), ("g4dn.12xlarge", 40.0)]
)
def test_floor_is_within_what_the_documented_limits_let_a_healthy_pair_reach(name: str, old_floor: float) -> None:
    """The old judgement (0.8 x the instance's headline bandwidth) put the floor above what four
    flows could ever carry; the model's floor sits at or below half of the documented maximum,
    whatever the placement, so a healthy pair never falls below it by design."""
    exp = thresholds.build_expectations(None, name)  # no profile: placement unknown
    facts = model.facts(exp)
    assert facts.placement is None
    p = model.plan(facts, ((3, 9), (3, 9)))
    c = model.ceiling(facts, p)
    reachable = min(p.flows * 5.0, facts.card_baseline_gbps or 0)  # outside a placement group: 5 per flow
    assert c.floor_gbps is not None and c.floor_gbps <= 0.5 * reachable < old_floor
    assert "placement group unknown" in c.reason


def test_multithreaded_iperf3_runs_one_process_and_ena_express_raises_the_flow_limit() -> None:
    exp = thresholds.build_expectations("cv-training", "p5.48xlarge", {"ena_express": True})
    facts = model.facts(exp)
    p = model.plan(facts, ((3, 16), (3, 17)))
    assert (p.flows, p.processes) == (4, 1)  # 100 / 25 = 4 flows, all in one 3.16+ process
    c = model.ceiling(facts, p)
    assert c.gbps == 100 and "4 flows x 25 Gbit/s with ENA Express = 100 Gbit/s; card 0 baseline 100" in c.reason
    # one end still on 3.9: back to one process per flow
    assert model.plan(facts, ((3, 16), (3, 9))).processes == 4
    # ENA Express on a type without it (p4de) changes nothing
    p4 = model.facts(thresholds.build_expectations("cv-training", "p4de.24xlarge", {"ena_express": True}))
    assert model.flow_limit(p4)[0] == 10


def test_stated_and_baseline_ceilings_judge_at_the_strict_fraction() -> None:
    stated = model.facts(Expectations(link_gbps=0.1, sources={"link_gbps": "test bed"}))
    c = model.ceiling(stated, model.plan(stated, ()))
    assert (c.kind, c.gbps, c.floor_gbps) == ("stated", 0.1, pytest.approx(0.08))
    base = thresholds.apply_baseline(
        thresholds.build_expectations("cv-training", "p4de.24xlarge"), {"figures": {"tcp_pair_gbps": 61.5}, "path": "b.json"}
    )
    cb = model.ceiling(model.facts(base), model.plan(model.facts(base), ((3, 9),)))
    assert (cb.kind, cb.gbps, cb.floor_gbps) == ("baseline", 61.5, pytest.approx(0.8 * 61.5))
    assert model.parse_version("iperf 3.9 (cJSON 1.7.13)") == (3, 9) and model.parse_version("garbage") is None


def test_sequential_multi_process_output_is_summed_per_direction() -> None:
    run = tcp_test.parse((FIX / "iperf3_3.12_seq_2proc_testbed.txt").read_text())
    assert (run.processes, run.streams, run.version) == (2, 4, "iperf 3.12")
    # two processes of two flows each on a tbf 100mbit link: the sum is the link, each direction
    # (each process times its own window, so the sum can exceed the rate by a few percent)
    assert 0.085e9 < run.forward_bps < 0.11e9 and run.reverse_bps is not None and 0.085e9 < run.reverse_bps < 0.11e9
    assert run.cpu_percent is not None and not tcp_test.cpu_bound(run)


def test_cpu_bound_run_is_said_not_called_a_slow_link() -> None:
    run = tcp_test.parse((FIX / "iperf3_3.9_cpu_bound_loopback_openwisp.json").read_text())
    assert run.cpu_percent == pytest.approx(99.5, abs=0.01) and tcp_test.cpu_bound(run)
    c = model.Ceiling(80.0, "model", "8 flows x 10", (), 0.6)  # a floor (48) above what this run reached (44)
    res = tcp_test.evaluate("a", "b", [run], c)
    assert res.level is Level.WARNING and "CPU-bound" in res.message and "not judged slow" in res.message
    # the same figure without the CPU evidence is an error
    plain = tcp_test.PairRun(run.forward_bps, None, 0, 1, 1, "iperf 3.9", 20.0)
    assert tcp_test.evaluate("a", "b", [plain], c).level is Level.ERROR
    # from 3.16 a process's figure sums its stream threads: 99.5 % over 4 threads is not CPU-bound
    mt = tcp_test.PairRun(run.forward_bps, None, 0, 1, 4, "iperf 3.16", run.cpu_percent)
    assert not tcp_test.cpu_bound(mt) and tcp_test.evaluate("a", "b", [mt], c).level is Level.ERROR


def test_best_run_counts_and_expected_text_prints_the_reason() -> None:
    c = model.Ceiling(0.1, "stated", "link speed stated in the inventory: 0.1 Gbit/s per direction", (), 0.8)
    low = tcp_test.PairRun(0.05e9, 0.05e9, 0, 1, 4, None, None)
    good = tcp_test.PairRun(0.095e9, 0.094e9, 0, 1, 4, None, None)
    res = tcp_test.evaluate("a", "b", [low, good], c)
    assert res.level is Level.PASS and res.observed["all_runs_gbps"] == [0.05, 0.094]
    assert "0.8 x 0.1: link speed stated in the inventory" in str(res.expected)
    assert tcp_test.evaluate("a", "b", [low, low], c).level is Level.ERROR


def test_a_saved_baseline_carries_the_slowest_healthy_pair(tmp_path: Path) -> None:
    """--save-baseline keeps the slowest direction of a healthy run; --baseline judges against it."""
    pairs = [localise.PairValue("a", "b", 0.095, 0.097), localise.PairValue("b", "c", 0.093, 0.096),
             localise.PairValue("c", "a", 0.097, 0.094)]  # fmt: skip
    results = localise.results(localise.classify(pairs, 0.1), localise.matrix(["a", "b", "c"], pairs))
    figures = thresholds.baseline_figures(results)
    assert figures == {"tcp_pair_gbps": 0.093}
    thresholds.save_baseline(tmp_path / "b.json", figures, profile="cv-training", instance_type="p4de.24xlarge")
    exp = thresholds.apply_baseline(
        thresholds.build_expectations("cv-training", "p4de.24xlarge"), thresholds.load_baseline(tmp_path / "b.json")
    )
    facts = model.facts(exp)
    c = model.ceiling(facts, model.plan(facts, ((3, 9),)))
    assert (c.kind, c.gbps, c.floor_gbps) == ("baseline", 0.093, pytest.approx(0.8 * 0.093))
    assert any("baseline" in s for s in c.sources)
