"""nvidia-smi topo -m and nvlink -s parsers and checks, on the real captures F5 and F6."""

from __future__ import annotations

import dataclasses

import pytest

from gpuforge.common.results import Level
from gpuforge.validate.checks import ParseError
from gpuforge.validate.gpu.nvlink import NvlinkCheck, parse_nvlink
from gpuforge.validate.gpu.topology import TopologyCheck, parse_topo
from gpuforge.validate.thresholds import build_expectations
from tests.validate.gpu_fixtures import fixture, truncate

P4DE = build_expectations(None, "p4de.24xlarge", {})
P3DN = build_expectations(None, "p3dn.24xlarge", {})
G4DN = build_expectations(None, "g4dn.12xlarge", {})


def test_f6a_a100_nvswitch_matrix():
    topo = parse_topo(fixture("topo_f6a_a100_nvswitch.txt"))
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8))
    assert {topo.matrix[i][j] for i in range(8) for j in range(8) if i != j} == {"NV12"}
    [result] = TopologyCheck().run_on_output("n1", fixture("topo_f6a_a100_nvswitch.txt"), P4DE)
    assert result.level is Level.PASS


def test_f6b_v100_hybrid_mesh_six_links_per_gpu():
    topo = parse_topo(fixture("topo_f6b_v100_hybrid_mesh.txt"))
    assert topo.matrix[0] == ("X", "NV1", "NV2", "NV1", "SYS", "SYS", "SYS", "NV2")
    [result] = TopologyCheck().run_on_output("n1", fixture("topo_f6b_v100_hybrid_mesh.txt"), P3DN)
    assert result.level is Level.PASS and "[6, 6, 6, 6, 6, 6, 6, 6]" in result.message


def test_f6b_on_an_nvswitch_type_fails_naming_pairs():
    [result] = TopologyCheck().run_on_output("n1", fixture("topo_f6b_v100_hybrid_mesh.txt"), P4DE)
    assert result.level is Level.ERROR and "GPU0-GPU1: NV1" in result.message


def test_f6c_tab_separated_four_gpus():
    topo = parse_topo(fixture("topo_f6c_v100_4gpu_tabs.txt"))
    assert topo.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert topo.matrix[3] == ("NV2", "NV2", "NV2", "X")
    # 4 GPUs where p3dn has 8: the matrix cannot be the expected one
    [result] = TopologyCheck().run_on_output("n1", fixture("topo_f6c_v100_4gpu_tabs.txt"), P3DN)
    assert result.level is Level.ERROR and result.observed == 4


def test_f6d_excerpt_with_missing_rows_is_a_parse_error():
    with pytest.raises(ParseError, match="no row for"):
        parse_topo(fixture("topo_f6d_a100_pairs_excerpt.txt"))


def test_truncated_and_garbled_topology():
    text = fixture("topo_f6a_a100_nvswitch.txt")
    [cut] = TopologyCheck().run_on_output("n1", truncate(text, 5), P4DE)
    assert cut.level is Level.UNKNOWN
    garbled = text.replace("NV12", "NV?", 1)
    [bad] = TopologyCheck().run_on_output("n1", garbled, P4DE)
    assert bad.level is Level.UNKNOWN and "path codes" in bad.message


def test_one_degraded_pair_on_nvswitch_fails():
    lines = fixture("topo_f6a_a100_nvswitch.txt").splitlines()
    lines[3] = lines[3].replace("NV12", "SYS", 1)  # GPU2 -> GPU0
    [result] = TopologyCheck().run_on_output("n1", "\n".join(lines), P4DE)
    assert result.level is Level.ERROR and "GPU2-GPU0: SYS" in result.message
    assert result.observed[2][0] == "SYS"


def test_baseline_matrix_must_match_exactly():
    text = fixture("topo_f6b_v100_hybrid_mesh.txt")
    matrix = [list(r) for r in parse_topo(text).matrix]
    same = dataclasses.replace(P3DN, extra={**P3DN.extra, "topology_matrix": matrix})
    assert TopologyCheck().run_on_output("n1", text, same)[0].level is Level.PASS
    matrix[0][1] = "NV2"
    other = dataclasses.replace(P3DN, extra={**P3DN.extra, "topology_matrix": matrix})
    [result] = TopologyCheck().run_on_output("n1", text, other)
    assert result.level is Level.ERROR and "GPU0-GPU1: NV1 (baseline NV2)" in result.message


def test_pcie_board_topology_is_info():
    [result] = TopologyCheck().run_on_output("n1", fixture("topo_f6c_v100_4gpu_tabs.txt"), G4DN)
    assert result.level is Level.INFO


# --- nvlink -s ------------------------------------------------------------------------------


def test_f5_a100_twelve_links_at_25():
    [gpu] = parse_nvlink(fixture("nvlink_f5_a100.txt"))
    assert gpu.name == "NVIDIA A100-SXM4-80GB" and gpu.links == {i: 25.0 for i in range(12)}


def test_f5_a100_one_gpu_of_eight_judges_the_links_shown():
    # the capture is `nvlink -s` of GPU 0 only: its 12 links are fine; how many GPUs the node has
    # is gpu.count's verdict (which gates the node), not this check's
    [result] = NvlinkCheck().run_on_output("n1", fixture("nvlink_f5_a100.txt"), P4DE)
    assert result.level is Level.PASS and result.observed == 1 and "1 of 8 GPUs listed" in result.message


def test_f5_v100_links_on_a_one_gpu_expectation_pass():
    one = dataclasses.replace(P3DN, gpus_per_node=1)
    [result] = NvlinkCheck().run_on_output("n1", fixture("nvlink_f5_v100.txt"), one)
    assert result.level is Level.PASS


def test_f5_all_inactive_fails():
    [result] = NvlinkCheck().run_on_output("n1", fixture("nvlink_f5_all_inactive.txt"), P4DE)
    assert result.level is Level.ERROR and result.observed == {"GPU6": "all links inactive"}


def test_inactive_and_slow_links_fail():
    text = fixture("nvlink_f5_a100.txt")
    one = dataclasses.replace(P4DE, gpus_per_node=1)
    down = text.replace("Link 7: 25 GB/s", "Link 7: <inactive>")
    slow = text.replace("Link 3: 25 GB/s", "Link 3: 12.5 GB/s")
    assert "1 of 12 links inactive" in NvlinkCheck().run_on_output("n1", down, one)[0].message
    assert "12.5 GB/s" in NvlinkCheck().run_on_output("n1", slow, one)[0].message
    # a missing link line (truncated) means fewer links than the type has
    [cut] = NvlinkCheck().run_on_output("n1", truncate(text, 8), one)
    assert cut.level is Level.ERROR and "7 links, expected 12" in cut.message


def test_wrong_layout_and_pcie_types():
    [bad] = NvlinkCheck().run_on_output("n1", "Link 0 is 25 GB/s\n", P4DE)
    assert bad.level is Level.UNKNOWN
    [empty] = NvlinkCheck().run_on_output("n1", "", P4DE)
    assert empty.level is Level.ERROR
    # a PCIe type listing no link at all is what it should be: a verdict, not an aside
    [pcie] = NvlinkCheck().run_on_output("n1", "", G4DN)
    assert pcie.level is Level.PASS
