"""Pure halves of the network stage: schedules, iperf3/ping parsers and evaluators, localisation."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from gpuforge.common.results import Level
from gpuforge.validate import localise
from gpuforge.validate.checks import ParseError
from gpuforge.validate.network import iperf, ping, schedule, tcp_test

FIX = Path(__file__).with_name("netfix")

# F7 (validation-anchors.md §5): iperf3 3.9, 1 stream, the `end` block verbatim.
F7_END = {
    "sum_sent": {"start": 0, "end": 9.999619, "seconds": 9.999619, "bytes": 2137784320,
                 "bits_per_second": 1710292618.1487515, "retransmits": 1262, "sender": True},
    "sum_received": {"start": 0, "end": 10.001951, "seconds": 10.001951, "bytes": 2137536896,
                     "bits_per_second": 1709695955.1191564, "sender": True},
    "sender_tcp_congestion": "cubic",
    "receiver_tcp_congestion": "cubic",
}  # fmt: skip


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16, 17, 32])
def test_tournament_covers_every_pair_once_in_disjoint_rounds(n: int) -> None:
    nodes = [f"n{i}" for i in range(n)]
    rounds = schedule.tournament(nodes)
    assert schedule.all_disjoint(rounds)
    pairs = [frozenset(p) for r in rounds for p in r]
    assert len(pairs) == len(set(pairs)) == n * (n - 1) // 2
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)


@pytest.mark.parametrize("n", [3, 4, 5, 8, 16, 31, 32])
def test_ring_puts_every_node_in_two_pairs_in_constant_rounds(n: int) -> None:
    nodes = [f"n{i}" for i in range(n)]
    rounds = schedule.ring(nodes)
    assert schedule.all_disjoint(rounds)
    assert len(rounds) == (2 if n % 2 == 0 else 3)
    degree = {x: 0 for x in nodes}
    for a, b in itertools.chain.from_iterable(rounds):
        degree[a] += 1
        degree[b] += 1
    assert set(degree.values()) == {2}


def test_confirm_round_pairs_suspect_with_a_new_partner() -> None:
    nodes = ["a", "b", "c", "d", "e", "f"]
    tested = {frozenset(p) for r in schedule.ring(nodes) for p in r}
    extra = schedule.confirm_round(["c"], nodes, tested, avoid={"c"})
    assert len(extra) == 1 and extra[0][0] == "c" and frozenset(extra[0]) not in tested


def test_iperf_parses_real_bidir_output() -> None:
    m = iperf.parse((FIX / "iperf3_3.12_bidir_testbed.json").read_text())
    assert m.version == "iperf 3.12" and m.streams == 4 and m.error is None
    assert 0.04e9 < m.forward_bps < 0.1e9 and m.reverse_bps is not None and 0.04e9 < m.reverse_bps < 0.1e9


def test_iperf_parses_f7_end_block_one_way() -> None:
    m = iperf.parse(json.dumps({"start": {"version": "iperf 3.9"}, "end": F7_END}))
    assert m.forward_bps == pytest.approx(1709695955.1191564)
    assert m.reverse_bps is None and m.retransmits == 1262


def test_iperf_error_key_is_an_error_not_a_pass() -> None:
    doc = {"start": {}, "intervals": [], "end": {}, "error": "the server is busy running a test. try again later"}
    m = iperf.parse(json.dumps(doc))
    r = iperf.evaluate("a", "b", m, 25.0, "catalog")
    assert r.level is Level.ERROR and "busy" in r.message


@pytest.mark.parametrize(
    "text",
    [
        "",
        (FIX / "iperf3_3.12_bidir_testbed.json").read_text()[:2000],  # truncated
        json.dumps({"start": {}, "end": {"sum_sent": F7_END["sum_sent"]}}),  # UDP-like: no sum_received
        json.dumps({"start": {}, "end": {"sum_received": {"bits_per_second": "fast"}}}),
        json.dumps({"start": {}, "end": {"sum_received": {"bits_per_second": -5}}}),
        json.dumps({"start": {}}),  # killed before `end`
    ],
)
def test_iperf_broken_output_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        iperf.parse(text)


def test_iperf_judged_on_the_slower_direction() -> None:
    m = iperf.IperfMeasurement(24e9, 10e9, 0, 4, "iperf 3.16")
    bad = iperf.evaluate("a", "b", m, 25.0, "catalog: g4dn.8xlarge")
    good = iperf.evaluate("a", "b", iperf.IperfMeasurement(24e9, 23e9, 0, 4, None), 25.0, "catalog")
    none = iperf.evaluate("a", "b", m, None, None)
    assert (bad.level, good.level, none.level) == (Level.ERROR, Level.PASS, Level.INFO)
    assert bad.targets == ("a<->b",) and "catalog: g4dn.8xlarge" in str(bad.expected)


def test_commands_are_bounded_and_use_the_given_ports() -> None:
    st = iperf.IperfSettings()
    cli = tcp_test.client_command("10.0.0.2", [5400, 5401, 5402, 5403], 2, st)
    # two processes forward (5400, 5401), then two reverse (5402, 5403), each -P 2
    assert cli.index("-p 5400 ") < cli.index("wait;") < cli.index("-p 5402 -R")
    assert cli.count(" -P 2 ") == 4 and "--bidir" not in cli
    assert "--bidir" in tcp_test.client_command("x", [1], 4, iperf.IperfSettings(bidir=True))
    srv = tcp_test.server_command("10.0.0.2", [5400, 5401], st)
    assert srv.count("timeout -k") == 2 and srv.count("iperf3 -s -1 ") == 2 and "seq 50" in srv
    assert st.port(1, 0, 3) != st.port(0, 0, 3)


def test_ping_parses_real_output_and_percentiles() -> None:
    m = ping.parse((FIX / "ping_testbed.txt").read_text())
    assert (m.sent, m.received, len(m.rtts_ms)) == (10, 10, 10)
    [r] = ping.evaluate("a", "b", m, None, None)
    assert r.level is Level.INFO and r.observed["p50_ms"] == 0.029 and r.observed["p99_ms"] == 0.063
    [r] = ping.evaluate("a", "b", m, 0.05, None)
    assert r.level is Level.ERROR


def test_ping_total_loss_and_garbage() -> None:
    lost = "PING x\n\n--- x ping statistics ---\n5 packets transmitted, 0 received, 100% packet loss, time 4ms\n"
    [r] = ping.evaluate("a", "b", ping.parse(lost), None, None)
    assert r.level is Level.ERROR
    with pytest.raises(ParseError):
        ping.parse("ping: unknown host x\n")


def test_ping_mtu_probe() -> None:
    text = (FIX / "ping_testbed.txt").read_text()
    refused = (
        text
        + "--- gpuforge path mtu ---\nping: local error: message too long, mtu=1500\n"
        + ("--- x ping statistics ---\n2 packets transmitted, 0 received, +2 errors, 100% packet loss\n")
    )
    results = ping.evaluate("a", "b", ping.parse(refused), None, 9001)
    assert [r.level for r in results] == [Level.INFO, Level.ERROR]
    assert "-M do -s 8973" in ping.command("x", ping.PingSettings(), 9001)


def _pairs(values: dict[tuple[str, str], float]) -> list[localise.PairValue]:
    return [localise.PairValue(a, b, v, v) for (a, b), v in values.items()]


def _ring_values(n: int, slow_node: str | None = None, slow_link: tuple[str, str] | None = None, base: float = 10.0):
    nodes = [f"n{i}" for i in range(n)]
    vals = {}
    for a, b in itertools.chain.from_iterable(schedule.ring(nodes)):
        v = base * (1 + 0.01 * (sum(map(ord, a + b)) % 5 - 2))  # deterministic +-2 % jitter
        if slow_node in (a, b) or {a, b} == set(slow_link or ()):
            v = base / 2
        vals[(a, b)] = v
    return vals


def test_localise_healthy_node_link_fabric() -> None:
    assert localise.classify(_pairs(_ring_values(8)), 10.0).kind == "healthy"
    v = localise.classify(_pairs(_ring_values(8, slow_node="n3")), 10.0)
    assert (v.kind, v.slow_nodes) == ("node", ["n3"])
    v = localise.classify(_pairs(_ring_values(8, slow_link=("n2", "n3"))), 10.0)
    assert (v.kind, v.slow_links) == ("link", [("n2", "n3")])
    v = localise.classify(_pairs(_ring_values(8, base=4.0)), 10.0)
    assert v.kind == "fabric"


def test_localise_without_expectation_uses_peers() -> None:
    v = localise.classify(_pairs(_ring_values(16, slow_node="n9")), None)
    assert (v.kind, v.slow_nodes) == ("node", ["n9"])


def test_localise_two_nodes_is_inconclusive_and_no_data() -> None:
    assert localise.classify([localise.PairValue("a", "b", 1.0, 1.0)], 10.0).kind == "inconclusive"
    [r] = localise.results(localise.classify([], 10.0), {})
    assert r.level is Level.UNKNOWN


def test_matrix_is_directional() -> None:
    m = localise.matrix(["a", "b", "c"], [localise.PairValue("a", "b", 1.0, 2.0)])
    assert m["a"]["b"] == 1.0 and m["b"]["a"] == 2.0 and m["a"]["c"] is None


# Measured on the netns test bed, policed run (tests/validate/test_testbed_e2e.py
# ::test_worst_node_on_a_slow_fabric_is_named[policer], 2026-12-01): every link policed at
# 100 mbit, node4 at 40 mbit; each pair's slower direction in Gbit/s.
POLICED_RING = {
    ("node1", "node2"): 0.0451, ("node2", "node3"): 0.044, ("node3", "node4"): 0.0247,
    ("node4", "node5"): 0.0235, ("node5", "node6"): 0.0467, ("node6", "node1"): 0.0378,
}  # fmt: skip


def test_slow_fabric_and_its_worst_node_are_two_findings() -> None:
    v = localise.classify(_pairs(POLICED_RING), 0.1, 0.8)
    assert (v.kind, v.slow_nodes, v.slow_links) == ("fabric", ["node4"], [])
    results = localise.results(v, localise.matrix([f"node{i}" for i in range(1, 7)], _pairs(POLICED_RING)))
    assert [(r.check, r.level, r.targets) for r in results][1] == ("network.localise.outlier", Level.ERROR, ("node4",))
    assert "whole fabric is slow" in results[0].message and len(results[0].targets) == 6
    # the same fabric judged on its own (no floor): node4 alone, a node verdict
    v = localise.classify(_pairs(POLICED_RING), None)
    assert (v.kind, v.slow_nodes, v.slow_links) == ("node", ["node4"], [])


def test_a_node_with_one_slow_link_is_not_a_standout() -> None:
    vals = dict(POLICED_RING)
    vals[("node4", "node5")] = 0.046  # node4 fine with node5: its node3 link is the slow one
    v = localise.classify(_pairs(vals), 0.1, 0.8)
    assert v.slow_nodes == [] and v.slow_links == [("node3", "node4")]
