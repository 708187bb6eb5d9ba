"""nvidia-smi --query-gpu CSV and -q text parsers, and the inventory/health checks built on them."""

from __future__ import annotations

import re

import pytest

from gpuforge.common.results import Level
from gpuforge.validate.checks import Expectations, ParseError
from gpuforge.validate.gpu.health import GpuHealthCheck
from gpuforge.validate.gpu.inventory import GpuInventoryCheck, cluster_consistency
from gpuforge.validate.gpu.smi_csv import parse_query_csv
from gpuforge.validate.gpu.smi_q import parse_smi_q
from gpuforge.validate.thresholds import build_expectations
from tests.validate.gpu_fixtures import a100_inventory, drop_csv_column, fixture, truncate, with_smi_header

P4DE = build_expectations("cv-training", None, {})


def by_check(results):
    return {r.check: r for r in results}


# --- CSV: real F8 ---------------------------------------------------------------------------


def test_f8_header_units_parse_to_plain_values():
    rows = parse_query_csv(fixture("smi_csv_f8_header_units.txt"))
    assert rows == [
        {
            "timestamp": "2024/01/16 14:44:16.977",
            "pstate": "P8",
            "temperature.gpu": "25",
            "utilization.gpu": "0",
            "utilization.memory": "0",
            "memory.total": "23028",
            "memory.free": "22494",
            "memory.used": "21",
        }
    ]


def test_f8_other_fields_still_count_gpus_and_memory():
    # F8 asked for other fields than ours: one row is one GPU whatever the fields, memory.total
    # is there; the rest is not in the output, said so (info), never a guessed value
    results = {r.check: r for r in GpuInventoryCheck().run_on_output("n1", fixture("smi_csv_f8_header_units.txt"), P4DE)}
    assert results["gpu.count"].level is Level.ERROR and results["gpu.count"].observed == 1
    assert results["gpu.memory"].level is Level.ERROR
    for check in ("gpu.model", "gpu.driver", "gpu.vbios", "gpu.persistence"):
        assert results[check].level is Level.INFO and "not in this --query-gpu output" in results[check].message


def test_f8_wrong_column_layout_is_a_parse_error():
    with pytest.raises(ParseError, match="columns"):
        parse_query_csv(drop_csv_column(fixture("smi_csv_f8_header_units.txt"), 2))


def test_noheader_output_is_rejected_not_misread():
    # the xCAT capture (F8) is noheader: without a header we cannot know the layout
    with pytest.raises(ParseError, match="header"):
        parse_query_csv("Tesla K80, 0322415075970, GPU-b4f79b83-c282-4409-a0e8-0da3e06a13c3\n")


@pytest.mark.parametrize(
    "stdout",
    [
        "No devices were found\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
        "latest NVIDIA driver is installed and running.\n",
        "Field \"bogus\" is not a valid field to query.\n",
        "8\n",  # `--query-gpu=count,noheader`: a lone number names no GPU
        "NVIDIA L40S, 0x26B910DE\nNVIDIA L40S\n",  # ragged rows
    ],
)
def test_noheader_fallback_never_reads_other_text_as_gpus(stdout):
    result = GpuInventoryCheck().run_on_output("n1", stdout, P4DE)
    assert [r.level for r in result] == [Level.UNKNOWN]


def test_noheader_rows_are_counted_by_the_cells_that_name_a_gpu():
    # akash-network/provider-configs#95 (tests/validate/corpus/smi_csv/): a real g6e.xlarge
    g6e = build_expectations(None, "g6e.xlarge", {})
    results = by_check(
        GpuInventoryCheck().run_on_output("n1", "NVIDIA L40S, 0x26B910DE, 00000000:30:00.0, 46068 MiB\n", g6e)
    )
    assert results["gpu.count"].level is Level.PASS and results["gpu.model"].level is Level.PASS
    assert results["gpu.memory"].level is Level.INFO  # a MiB cell could be total, used or free


def test_samples_over_time_without_gpu_identity_are_not_counted_as_gpus():
    # `--query-gpu=timestamp,utilization.gpu,utilization.memory -l 1`: eight rows are eight
    # samples of one GPU, not eight GPUs
    log = "timestamp, utilization.gpu [%], utilization.memory [%]\n" + "".join(
        f"2024/09/08 13:03:3{i}.000, 35 %, 19 %\n" for i in range(8)
    )
    result = GpuInventoryCheck().run_on_output("n1", log, P4DE)
    assert [r.level for r in result] == [Level.UNKNOWN]
    assert "samples over time" in result[0].message


def test_empty_and_header_only_output():
    with pytest.raises(ParseError):
        parse_query_csv("")
    assert GpuInventoryCheck().run_on_output("n1", truncate(a100_inventory(), 1), P4DE)[0].level is Level.UNKNOWN


# --- inventory evaluation -------------------------------------------------------------------


def test_healthy_p4de_inventory_passes_everything():
    results = by_check(GpuInventoryCheck().run_on_output("n1", a100_inventory(), P4DE))
    assert {k: r.level for k, r in results.items()} == {
        "gpu.count": Level.PASS,
        "gpu.model": Level.PASS,
        "gpu.memory": Level.PASS,
        "gpu.driver": Level.PASS,
        "gpu.vbios": Level.PASS,
        "gpu.persistence": Level.PASS,
    }
    assert results["gpu.driver"].observed == "535.104.12"


def test_truncated_inventory_names_the_missing_gpus():
    results = by_check(GpuInventoryCheck().run_on_output("n1", truncate(a100_inventory(), 8), P4DE))
    assert results["gpu.count"].level is Level.ERROR
    assert results["gpu.count"].observed == 7 and results["gpu.count"].expected == 8


def test_na_values_are_unknown_never_zero():
    text = a100_inventory(vbios={3: "[N/A]"}, mem={5: "[N/A]"}, pm={0: "[Not Supported]"})
    results = by_check(GpuInventoryCheck().run_on_output("n1", text, P4DE))
    assert results["gpu.vbios"].level is Level.UNKNOWN
    assert results["gpu.memory"].level is Level.UNKNOWN
    assert results["gpu.persistence"].level is Level.UNKNOWN


def test_wrong_model_small_memory_mixed_driver_persistence_off():
    text = a100_inventory(name={2: "NVIDIA A100-SXM4-40GB"}, mem={2: "40960 MiB"}, driver={4: "535.54.03"}, pm={1: "Disabled"})
    results = by_check(GpuInventoryCheck().run_on_output("n1", text, P4DE))
    assert results["gpu.model"].level is Level.ERROR
    assert results["gpu.memory"].level is Level.ERROR and results["gpu.memory"].observed == 40.0
    assert results["gpu.driver"].level is Level.ERROR
    assert results["gpu.driver"].observed == ["535.104.12", "535.54.03"]
    assert results["gpu.persistence"].level is Level.WARNING and results["gpu.persistence"].observed == ["1"]


def test_memory_out_of_bounds_value_is_unknown():
    results = GpuInventoryCheck().run_on_output("n1", a100_inventory(mem={0: "lots MiB"}), P4DE)
    assert results[0].level is Level.UNKNOWN and "not a number" in results[0].message


def test_without_expectations_count_and_model_are_info():
    results = by_check(GpuInventoryCheck().run_on_output("n1", a100_inventory(4), Expectations()))
    assert results["gpu.count"].level is Level.INFO
    assert results["gpu.model"].level is Level.INFO


# --- cluster consistency --------------------------------------------------------------------


def _inv(**changes):
    check = GpuInventoryCheck()
    return check.parse(a100_inventory(**changes))


def test_cluster_consistency_names_the_odd_node_out():
    per_node = {"n1": _inv(), "n2": _inv(), "n3": _inv(driver=dict.fromkeys(range(8), "550.54.15")), "n4": _inv()}
    results = by_check(cluster_consistency(per_node))
    assert results["gpu.cluster.driver"].level is Level.ERROR
    assert results["gpu.cluster.driver"].targets == ("n3",)
    assert results["gpu.cluster.driver"].expected == "535.104.12"
    assert results["gpu.cluster.vbios"].level is Level.PASS
    assert results["gpu.cluster.vbios"].targets == ("n1", "n2", "n3", "n4")


def test_cluster_consistency_tie_mixed_and_silent_nodes():
    per_node = {
        "a": _inv(),
        "b": _inv(vbios=dict.fromkeys(range(8), "92.00.36.00.02")),
        "c": _inv(vbios={0: "[N/A]"}),
        "d": _inv(driver={0: "550.54.15"}),  # mixed within the node
    }
    results = cluster_consistency(per_node)
    vbios = [r for r in results if r.check == "gpu.cluster.vbios"]
    assert {r.level for r in vbios} == {Level.UNKNOWN, Level.ERROR}
    assert next(r for r in vbios if r.level is Level.UNKNOWN).targets == ("c",)
    odd = next(r for r in vbios if r.level is Level.ERROR)
    assert odd.targets == ("b",) and odd.expected == "92.00.45.00.05"
    driver = next(r for r in results if r.check == "gpu.cluster.driver")
    assert driver.level is Level.ERROR and driver.targets == ("d",)


def test_cluster_consistency_two_way_tie_names_everyone():
    per_node = {"a": _inv(), "b": _inv(driver=dict.fromkeys(range(8), "550.54.15"))}
    result = next(r for r in cluster_consistency(per_node) if r.check == "gpu.cluster.driver")
    assert result.level is Level.ERROR and result.targets == ("a", "b") and "no majority" in result.message


# --- nvidia-smi -q: real F10b ---------------------------------------------------------------


def test_f10b_excerpt_alone_has_no_gpu_block():
    with pytest.raises(ParseError, match="no 'GPU"):
        parse_smi_q(fixture("smi_q_f10b_ecc_a100.txt"))


def test_f10b_under_gpu_headers_parses_every_counter():
    text = with_smi_header(fixture("smi_q_f10b_ecc_a100.txt"), ["00000000:10:1C.0", "00000000:10:1D.0"])
    blocks = parse_smi_q(text)
    assert [b.bus_id for b in blocks] == ["00000000:10:1C.0", "00000000:10:1D.0"]
    assert blocks[0].get("ECC Errors", "Aggregate", "DRAM Uncorrectable") == "0"
    assert blocks[0].get("Retired Pages", "Single Bit ECC") is None  # N/A
    assert blocks[1].get("Remapped Rows", "Remapping Failure Occurred") == "No"


def test_f10b_health_passes_ecc_and_remap_but_throttle_unknown():
    text = with_smi_header(fixture("smi_q_f10b_ecc_a100.txt"), ["00000000:10:1C.0"])
    results = by_check(GpuHealthCheck().run_on_output("n1", text, P4DE))
    assert results["gpu.ecc"].level is Level.PASS
    assert results["gpu.remap"].level is Level.PASS
    assert results["gpu.throttle"].level is Level.UNKNOWN  # the excerpt has no throttle block


def test_attached_count_detects_a_truncated_q_output():
    text = with_smi_header(fixture("smi_q_f10b_ecc_a100.txt"), ["00000000:10:1C.0", "00000000:10:1D.0"])
    cut = truncate(text, 1 + 21)  # the first GPU block only
    assert GpuHealthCheck().run_on_output("n1", cut, P4DE)[0].level is Level.UNKNOWN


@pytest.mark.parametrize(
    ("key", "value", "check", "needle"),
    [
        ("SRAM Uncorrectable", "1", "gpu.ecc", "SRAM uncorrectable 1"),
        ("SRAM Correctable", "10001", "gpu.ecc", "SRAM correctable"),
        ("DRAM Correctable", "20000001", "gpu.ecc", "DRAM"),
        ("Pending", "Yes", "gpu.remap", "pending"),
        ("Remapping Failure Occurred", "Yes", "gpu.remap", "RMA"),
    ],
)
def test_out_of_bounds_counters_fail(key, value, check, needle):
    body = fixture("smi_q_f10b_ecc_a100.txt")
    changed, n = re.subn(rf"^(\s+{key}\s+: )\S+$", rf"\g<1>{value}", body, count=1, flags=re.M)
    assert n == 1
    text = with_smi_header(changed, ["00000000:10:1C.0"])
    result = by_check(GpuHealthCheck().run_on_output("n1", text, P4DE))[check]
    assert result.level is Level.ERROR and needle in result.message


def test_all_counters_na_is_unknown_not_pass():
    body = fixture("smi_q_f10b_ecc_a100.txt")
    for word in (": 0", ": No"):
        body = body.replace(word, ": N/A")
    results = by_check(GpuHealthCheck().run_on_output("n1", with_smi_header(body, ["00000000:10:1C.0"]), P4DE))
    assert results["gpu.ecc"].level is Level.UNKNOWN
    assert results["gpu.remap"].level is Level.UNKNOWN


# Not captured (SOURCES.md): a throttle block in nvidia-smi -q's key : value layout.
THROTTLE = """    Clocks Throttle Reasons
        Idle                              : {idle}
        SW Power Cap                      : Not Active
        HW Slowdown                       : Not Active
            HW Thermal Slowdown           : {thermal}
        Sync Boost                        : Not Active
"""


def test_throttle_reasons_nested_and_benign():
    body = fixture("smi_q_f10b_ecc_a100.txt")
    idle = with_smi_header(body + THROTTLE.format(idle="Active", thermal="Not Active"), ["00000000:10:1C.0"])
    hot = with_smi_header(body + THROTTLE.format(idle="Not Active", thermal="Active"), ["00000000:10:1C.0"])
    assert by_check(GpuHealthCheck().run_on_output("n1", idle, P4DE))["gpu.throttle"].level is Level.PASS
    result = by_check(GpuHealthCheck().run_on_output("n1", hot, P4DE))["gpu.throttle"]
    assert result.level is Level.WARNING and "HW Thermal Slowdown" in result.message


def test_garbled_yes_no_is_unknown():
    body = fixture("smi_q_f10b_ecc_a100.txt").replace("Pending                           : No", "Pending : maybe")
    result = GpuHealthCheck().run_on_output("n1", with_smi_header(body, ["00000000:10:1C.0"]), P4DE)
    assert result[0].level is Level.UNKNOWN
