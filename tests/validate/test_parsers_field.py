"""Defects that other people's real output exposed (issue 12, item 1); each test fails on the
parsers as they were. Files under corpus/ are real captures (corpus/SOURCES.md); where a test
changes one, it says so and why (derived, never stored as captured)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gpuforge.common.results import Level
from gpuforge.validate.checks import ParseError
from gpuforge.validate.gpu.nvlink import NvlinkCheck, parse_nvlink
from gpuforge.validate.gpu.topology import TopologyCheck, parse_topo
from gpuforge.validate.gpu.xid import MARK as XID_MARK
from gpuforge.validate.gpu.xid import XidScanCheck
from gpuforge.validate.nccl import NcclLocalCheck, evaluate_nccl, parse_nccl
from gpuforge.validate.network import iperf
from gpuforge.validate.thresholds import build_expectations
from tests.validate.gpu_fixtures import fixture

CORPUS = Path(__file__).resolve().parent / "corpus"
P4DE = build_expectations("cv-training", None, {})
P5 = build_expectations(None, "p5.48xlarge", {})
G6E = build_expectations(None, "g6e.xlarge", {})
G4DN = build_expectations(None, "g4dn.xlarge", {})


def corpus(path: str) -> str:
    return (CORPUS / path).read_bytes().decode()


def by_check(results):
    return {r.check: r for r in results}


# --- topo -m: ANSI underline from driver 590 on, even into a file -------------------------------


def test_topo_590_header_underlined_even_in_a_file_parses():
    text = fixture("topo_h100_590_exporter_capture.txt")
    assert "\x1b[4mGPU0" in text  # the bytes nvidia-smi wrote to the collector's file
    topo = parse_topo(text)
    assert topo.gpus == ("GPU0",) and topo.matrix == (("X",),)
    one = dataclasses.replace(P5, gpus_per_node=1, interconnect="pcie")
    [r] = TopologyCheck().run_on_output("n1", text, one)
    assert r.level is Level.PASS


def test_topo_595_and_610_captures_parse_too():
    for name in ("exporter_linux_l40s_595.80.txt", "exporter_linux_rtx-2080-super_610.57.04.txt"):
        assert parse_topo(corpus(f"topo/{name}")).gpus == ("GPU0",)


# --- nvlink -s: PCIe boards and MIG mode are verdicts, not unknowns ------------------------------


def test_nvlink_pcie_board_says_no_nvlink_and_passes_where_pcie_is_expected():
    text = corpus("nvlink/exporter_linux_l40s_595.80.txt")  # "Device does not have or support Nvlink"
    [gpu] = parse_nvlink(text)
    assert gpu.state == "unsupported" and gpu.links == {}
    [r] = NvlinkCheck().run_on_output("g6e", text, G6E)
    assert r.level is Level.PASS
    # the same board where NVSwitch was expected: the wrong hardware, an error
    [wrong] = NvlinkCheck().run_on_output("p5", text, dataclasses.replace(P5, gpus_per_node=1))
    assert wrong.level is Level.ERROR and "no NVLink" in wrong.message


def test_nvlink_mig_mode_is_a_warning_on_nvswitch_and_a_pass_on_pcie():
    text = corpus("nvlink/exporter_linux_h100-mig_590.48.01.txt")
    [gpu] = parse_nvlink(text)
    assert gpu.state == "mig"
    [r] = NvlinkCheck().run_on_output("p5", text, dataclasses.replace(P5, gpus_per_node=1))
    assert r.level is Level.WARNING and "MIG" in r.message
    assert NvlinkCheck().run_on_output("x", text, G6E)[0].level is Level.PASS


def test_nvlink_all_links_inactive_in_the_595_spelling():
    text = corpus("nvlink/exporter_linux_rtx-2080-super_595.71.05.txt")  # "...all links are inActive"
    [gpu] = parse_nvlink(text)
    assert gpu.all_inactive
    assert NvlinkCheck().run_on_output("g4dn", text, G4DN)[0].level is Level.PASS
    [r] = NvlinkCheck().run_on_output("p4de", text, dataclasses.replace(P4DE, gpus_per_node=1))
    assert r.level is Level.ERROR and "all links inactive" in r.message


# --- nccl-tests: #wrong in e-notation, runs that die mid-table -----------------------------------


def test_nccl_wrong_count_in_e_notation_is_an_error():
    # nccl-tests prints #wrong with "%6g" (src/util.cu writeBenchmarkLineBody, NVIDIA/nccl-tests
    # a0b82b2260cf5152b9f8c061bbf7eaf0ba096432), so 1048576 wrong elements print as 1.04858e+06.
    # DERIVED: F1's 1 MiB row with its in-place #wrong replaced by what %6g prints for 2^20.
    lines = fixture("nccl_f1_p4de_2node_srun.txt").splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.split()[1:2] == ["1048576"])
    lines[row] = lines[row][: lines[row].rstrip().rfind(" ")] + " 1.04858e+06"
    run = parse_nccl("\n".join(lines) + "\n")
    assert run.rows[row - 2].ip_wrong == 1048580  # %g keeps six digits: a count, rounded
    assert by_check(evaluate_nccl(("n1",), run, P4DE))["nccl.run"].level is Level.ERROR


def test_nccl_run_dying_mid_table_is_an_error_not_unknown():
    text = corpus("nccl/nccl-tests-355_h800_2node_cuda_failure.txt")
    [run_result, *_] = NcclLocalCheck().run_on_output("n1", text, P5)
    assert run_result.check == "nccl.run" and run_result.level is Level.ERROR
    assert "Test CUDA failure common.cu:389" in run_result.message


def test_nccl_run_dying_before_the_table_is_an_error():
    text = corpus("nccl/nccl-tests-338_h20_fabricmanager_cuda_failure.txt")
    results = by_check(NcclLocalCheck().run_on_output("n1", text, P5))
    assert results["nccl.run"].level is Level.ERROR and "system not yet initialized" in results["nccl.run"].message


# --- Xid: MIG attribution and Xid 95 ------------------------------------------------------------

# The driver's own examples of its Xid lines (NVIDIA/open-gpu-kernel-modules
# src/nvidia/src/kernel/gpu/arch/ampere/kern_gpu_error_cont_ga100.c at df1c9a3: the error-log comment),
# as they reach the kernel log after the "NVRM: " prefix.
XID_MIG_94 = "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No"
XID_95 = "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No"


def xid_scan(*lines: str) -> str:
    return f"{XID_MARK} source=journalctl\n" + "".join(f"{ln}\n" for ln in lines) + f"{XID_MARK} end\n"


def test_xid_from_a_mig_instance_is_read_with_its_instance():
    scan = XidScanCheck().parse(xid_scan(XID_MIG_94))
    [event] = scan.events
    assert (event.pci, event.code, event.mig) == ("PCI:0000:01:00", 94, "GPU-I:05")
    [r] = XidScanCheck().run_on_output("n1", xid_scan(XID_MIG_94), P4DE)
    assert r.level is Level.WARNING  # contained: the application died, the GPU is fine


def test_xid_95_uncontained_ecc_is_fatal():
    [r] = XidScanCheck().run_on_output("n1", xid_scan(XID_MIG_94, XID_95), P4DE)
    assert r.level is Level.ERROR and "95" in r.message


# --- iperf3 3.7-3.10: --bidir JSON with duplicate keys -------------------------------------------


def test_iperf_bidir_duplicate_keys_keep_both_directions():
    text = corpus("iperf3/iperf3-3.9_bidir_loopback.json")
    assert text.count('"sum_received":') == 2  # the old versions' duplicate keys (esnet/iperf#952)
    m = iperf.parse(text)
    doc_pairs: list[list[tuple[str, object]]] = []

    def keep(pairs: list[tuple[str, object]]) -> dict[str, object]:
        doc_pairs.append(pairs)
        return dict(pairs)

    json.loads(text, object_pairs_hook=keep)
    end = next(p for p in doc_pairs if [k for k, _ in p].count("sum_received") == 2)
    fwd, rev = (v for k, v in end if k == "sum_received")
    assert m.forward_bps == fwd["bits_per_second"] and m.reverse_bps == rev["bits_per_second"]  # type: ignore[index]
    assert m.version is not None and m.version.startswith("iperf 3.9")


def test_gpu_fallen_off_the_bus_without_an_xid_line_is_fatal():
    import subprocess

    from gpuforge.validate.gpu.xid import GREP

    log = CORPUS / "xid/nvsentinel-155_570_fallen_off_bus_no_xid.txt"
    # the command's own grep keeps the lines that say so (no "NVRM: Xid" among them)
    kept = subprocess.run(["grep", "-E", GREP, str(log)], capture_output=True, text=True, timeout=10, check=True)
    assert "fallen off the bus" in kept.stdout and "NVRM: Xid" not in kept.stdout
    [r] = XidScanCheck().run_on_output("n1", xid_scan(*kept.stdout.splitlines()), P5)
    assert r.level is Level.ERROR and r.observed == [{"pci": "PCI:0000:b3:00.0", "xid": 79}]


def test_topo_header_with_the_escape_byte_lost_in_a_paste_parses():
    # B300 (590.44.01) pasted into an issue: "[4mGPU0 ... GPU NUMA ID[0m" without the ESC byte
    topo = parse_topo(corpus("topo/sglang-26039_b300_590.44.01_8gpu_escape_lost.txt"))
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8))
    assert {topo.matrix[i][j] for i in range(8) for j in range(8) if i != j} == {"NV18"}


def test_smi_q_of_one_selected_gpu_is_not_a_truncated_output():
    # DERIVED from corpus/smi_q/azhpc-diag_a100_460.32.03_8gpu.txt: its preamble ("Attached GPUs :
    # 8") and first GPU block whole, which is what `nvidia-smi -q -i 0` prints; cut inside the
    # block (no "Processes" section yet) it is still a truncated output
    from gpuforge.validate.gpu.health import GpuHealthCheck

    lines = corpus("smi_q/azhpc-diag_a100_460.32.03_8gpu.txt").splitlines(keepends=True)
    second = [i for i, ln in enumerate(lines) if ln.startswith("GPU ")][1]
    one = "".join(lines[:second])
    levels = {r.check: r.level for r in GpuHealthCheck().run_on_output("n1", one, P4DE)}
    assert levels == {"gpu.ecc": Level.PASS, "gpu.remap": Level.PASS, "gpu.throttle": Level.PASS}
    cut = "".join(lines[: second // 2])
    assert GpuHealthCheck().run_on_output("n1", cut, P4DE)[0].level is Level.UNKNOWN


# --- corpus helper: captures the parsers did not read (tests/validate/corpus/SOURCES.md) -------


def test_iperf_json_stream_error_is_read_as_the_error_it_reports():
    m = iperf.parse(corpus("iperf3/omnt-34_json-stream_server_busy.jsonl"))
    assert m.error == "the server is busy running a test. try again later"
    assert iperf.evaluate("a", "b", m, 1.0, "test").level is Level.ERROR


def test_iperf_json_stream_needs_every_line_to_be_an_event():
    # a truncated -J document or a text report mixed in is not a stream: still a parse error
    stream = corpus("iperf3/omnt-34_json-stream_server_busy.jsonl")
    for text in (stream + "iperf3: interrupt - the client has terminated\n", '{"event":"end"}\n', "{}\n{}\n"):
        with pytest.raises(ParseError):
            iperf.parse(text)


def test_smi_table_gpu_names_from_every_driver_generation_in_the_corpus():
    from gpuforge.validate.kubernetes import parse_smi_gpus

    names = {
        "smi_table/exporter_windows_rtx-2080-super_610.62.txt": ["NVIDIA GeForce RTX 2080 ..."],  # WDDM column
        "smi_table/cs259_rtx3070_wsl_530.47.txt": ["NVIDIA GeForce RTX 3070"],
        "smi_table/nvml_fix-11_gtx1070_396.24.txt": ["GeForce GTX 1070"],
        "smi_table/exporter_linux_h100-mig_590.48.01.txt": ["NVIDIA H100 80GB HBM3"],  # not the MIG rows
        "smi_table/thamada_h100-sxm_8gpu.txt": ["NVIDIA H100 80GB HBM3"] * 8,
    }
    for path, want in names.items():
        assert parse_smi_gpus(corpus(path)) == want, path


def test_xid_154_is_judged_by_the_recovery_action_the_driver_asks_for():
    def level(line: str) -> Level:
        out = f"{XID_MARK} source=dmesg\n{line}\n{XID_MARK} end\n"
        return XidScanCheck().run_on_output("n1", out, P5)[0].level

    assert level(corpus("xid/nvsentinel-test_xid154_to_gpu_reset_required.txt").strip()) is Level.ERROR
    assert level(corpus("xid/nvsentinel-test_xid154_back_to_none.txt").strip()) is Level.WARNING
    # DERIVED from the driver's format string (gpu.c, "GPU recovery action changed from 0x%x (%s)
    # to 0x%x (%s)"): the code decides, whatever the driver calls it; 5 is the IMEX domain's job
    line = "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x{} ({})"
    assert level(line.format(2, "OS Reboot")) is Level.ERROR
    assert level(line.format(5, "Recover IMEX Domain")) is Level.WARNING


def test_nvlink_without_a_model_figure_judges_the_shape_of_the_board():
    b300 = corpus("nvlink/xe9780_b300_610.57.04_7gpu.txt")
    nvswitch8 = build_expectations(None, None, {"gpus_per_node": 8, "interconnect": "nvswitch"})
    assert NvlinkCheck().run_on_output("n1", b300, nvswitch8)[0].level is Level.PASS
    # DERIVED from the capture: GPU 3 loses its last link line (17 links where the others have 18)
    lines = b300.splitlines(keepends=True)
    gpu3 = lines.index(next(ln for ln in lines if ln.startswith("GPU 3:")))
    derived = "".join(lines[: gpu3 + 18] + lines[gpu3 + 19 :])
    result = NvlinkCheck().run_on_output("n1", derived, nvswitch8)[0]
    assert result.level is Level.ERROR and "GPU3" in result.message
