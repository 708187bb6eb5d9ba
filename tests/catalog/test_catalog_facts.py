"""The shipped catalog against the research facts: every check in aws-gpu-specs.md §6, plus §2.

The numbers below are the reference (aws-gpu-specs.md), typed from the research notes on purpose:
the test is only worth something if the expected values do not come from the catalog itself.
"""

from __future__ import annotations

import re

import pytest

from gpuforge.core.catalog import load_catalog

CAT = load_catalog()
TYPES = CAT.instance_types
REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1")

# aws-gpu-specs.md §2: (GPUs, model, vCPU, RAM GiB, baseline Gbps, EFA, NVMe count, NVMe GB each, link).
SECTION_2 = {
    "g4dn.xlarge": (1, "T4", 4, 16, 5, 0, 1, 125, "none"),
    "g4dn.2xlarge": (1, "T4", 8, 32, 10, 0, 1, 225, "none"),
    "g4dn.4xlarge": (1, "T4", 16, 64, 20, 0, 1, 225, "none"),
    "g4dn.8xlarge": (1, "T4", 32, 128, 50, 1, 1, 900, "none"),
    "g4dn.12xlarge": (4, "T4", 48, 192, 50, 1, 1, 900, "pcie"),
    "g4dn.16xlarge": (1, "T4", 64, 256, 50, 1, 1, 900, "none"),
    "g4dn.metal": (8, "T4", 96, 384, 100, 1, 2, 900, "pcie"),
    "g5.xlarge": (1, "A10G", 4, 16, 2.5, 0, 1, 250, "none"),
    "g5.2xlarge": (1, "A10G", 8, 32, 5, 0, 1, 450, "none"),
    "g5.4xlarge": (1, "A10G", 16, 64, 10, 0, 1, 600, "none"),
    "g5.8xlarge": (1, "A10G", 32, 128, 25, 1, 1, 900, "none"),
    "g5.12xlarge": (4, "A10G", 48, 192, 40, 1, 1, 3800, "pcie"),
    "g5.16xlarge": (1, "A10G", 64, 256, 25, 1, 1, 1900, "none"),
    "g5.24xlarge": (4, "A10G", 96, 384, 50, 1, 1, 3800, "pcie"),
    "g5.48xlarge": (8, "A10G", 192, 768, 100, 1, 2, 3800, "pcie"),
    "g6.xlarge": (1, "L4", 4, 16, 2.5, 0, 1, 250, "none"),
    "g6.2xlarge": (1, "L4", 8, 32, 5, 0, 1, 450, "none"),
    "g6.4xlarge": (1, "L4", 16, 64, 10, 0, 1, 600, "none"),
    "g6.8xlarge": (1, "L4", 32, 128, 25, 1, 2, 450, "none"),
    "g6.12xlarge": (4, "L4", 48, 192, 40, 1, 4, 940, "pcie"),
    "g6.16xlarge": (1, "L4", 64, 256, 25, 1, 2, 940, "none"),
    "g6.24xlarge": (4, "L4", 96, 384, 50, 1, 4, 940, "pcie"),
    "g6.48xlarge": (8, "L4", 192, 768, 100, 1, 8, 940, "pcie"),
    "g6e.xlarge": (1, "L40S", 4, 32, 2.5, 0, 1, 250, "none"),
    "g6e.2xlarge": (1, "L40S", 8, 64, 5, 0, 1, 450, "none"),
    "g6e.4xlarge": (1, "L40S", 16, 128, 20, 0, 1, 600, "none"),
    "g6e.8xlarge": (1, "L40S", 32, 256, 25, 1, 2, 450, "none"),
    "g6e.12xlarge": (4, "L40S", 48, 384, 100, 1, 2, 1900, "pcie"),
    "g6e.16xlarge": (1, "L40S", 64, 512, 35, 1, 2, 950, "none"),
    "g6e.24xlarge": (4, "L40S", 96, 768, 200, 2, 2, 1900, "pcie"),
    "g6e.48xlarge": (8, "L40S", 192, 1536, 400, 4, 4, 1900, "pcie"),
    "p3.2xlarge": (1, "V100", 8, 61, 2.5, 0, 0, 0, "none"),
    "p3.8xlarge": (4, "V100", 32, 244, 10, 0, 0, 0, "nvlink"),
    "p3.16xlarge": (8, "V100", 64, 488, 25, 0, 0, 0, "nvlink"),
    "p3dn.24xlarge": (8, "V100-32GB", 96, 768, 100, 1, 2, 900, "nvlink"),
    "p4d.24xlarge": (8, "A100", 96, 1152, 400, 4, 8, 1000, "nvswitch"),
    "p4de.24xlarge": (8, "A100-80GB", 96, 1152, 400, 4, 8, 1000, "nvswitch"),
    "p5.4xlarge": (1, "H100", 16, 256, 100, 1, 1, 3800, "none"),
    "p5.48xlarge": (8, "H100", 192, 2048, 3200, 32, 8, 3800, "nvswitch"),
    "p5e.48xlarge": (8, "H200", 192, 2048, 3200, 32, 8, 3800, "nvswitch"),
    "p5en.48xlarge": (8, "H200", 192, 2048, 3200, 16, 8, 3800, "nvswitch"),
}
# §2 "GPUDirect RDMA over EFA": yes for p4d/p4de (S4) and the P5 family; explicitly no for p3dn.
GPUDIRECT = {
    "p3dn.24xlarge": False,
    "p4d.24xlarge": True,
    "p4de.24xlarge": True,
    "p5.48xlarge": True,
    "p5e.48xlarge": True,
    "p5en.48xlarge": True,
}


def test_catalog_covers_exactly_the_issue_families() -> None:
    # Issue 2 item 2 names these families; p6-b200/p6-b300/g6f are in the research but not asked for.
    # That is why the §6 checks about p6-b200/p6-b300 have nothing to check here.
    assert {t.family for t in TYPES.values()} == {
        "p3",
        "p3dn",
        "p4d",
        "p4de",
        "p5",
        "p5e",
        "p5en",
        "g4dn",
        "g5",
        "g6",
        "g6e",
    }
    assert set(TYPES) == set(SECTION_2)


@pytest.mark.parametrize("name", sorted(SECTION_2))
def test_section_2_row(name: str) -> None:
    gpus, model, vcpus, ram, gbps, efa, nvme_n, nvme_gb, link = SECTION_2[name]
    it = TYPES[name]
    got = (
        it.gpu_count,
        it.gpu_model,
        it.vcpus,
        it.memory_gib,
        it.network_gbps,
        it.efa_interfaces,
        it.nvme_count,
        it.nvme_gb_each,
        it.interconnect,
    )
    assert got == (gpus, model, vcpus, ram, gbps, efa, nvme_n, nvme_gb, link)
    # §2: each network card takes at most one EFA, so EFA count equals card count on EFA types.
    if it.efa_interfaces:
        assert it.network_cards == it.efa_interfaces
    if name in GPUDIRECT:
        assert it.gpudirect_rdma is GPUDIRECT[name]
    if not it.efa:
        assert not it.gpudirect_rdma


def test_s6_g4dn_sizes() -> None:
    assert (TYPES["g4dn.12xlarge"].gpu_count, TYPES["g4dn.12xlarge"].vcpus, TYPES["g4dn.12xlarge"].memory_gib) == (
        4,
        48,
        192,
    )
    assert (TYPES["g4dn.16xlarge"].gpu_count, TYPES["g4dn.16xlarge"].vcpus, TYPES["g4dn.16xlarge"].memory_gib) == (
        1,
        64,
        256,
    )
    assert (TYPES["g4dn.metal"].gpu_count, TYPES["g4dn.metal"].vcpus, TYPES["g4dn.metal"].memory_gib) == (8, 96, 384)
    assert all(TYPES[n].gpu_model == "T4" for n in ("g4dn.12xlarge", "g4dn.16xlarge", "g4dn.metal"))


def test_s6_g_12xlarge_and_16xlarge() -> None:
    for name in ("g5.12xlarge", "g6.12xlarge"):
        assert (TYPES[name].gpu_count, TYPES[name].vcpus, TYPES[name].memory_gib) == (4, 48, 192)
    assert (TYPES["g6e.12xlarge"].gpu_count, TYPES["g6e.12xlarge"].gpu_model, TYPES["g6e.12xlarge"].memory_gib) == (
        4,
        "L40S",
        384,
    )
    for fam in ("g5", "g6", "g6e"):
        assert TYPES[f"{fam}.16xlarge"].gpu_count == 1


def test_s6_instance_store() -> None:
    for name in ("p3.2xlarge", "p3.8xlarge", "p3.16xlarge"):
        assert TYPES[name].nvme_total_gb == 0
    assert (TYPES["p3dn.24xlarge"].nvme_count, TYPES["p3dn.24xlarge"].nvme_gb_each) == (2, 900)
    for name in ("p4d.24xlarge", "p4de.24xlarge"):
        assert (TYPES[name].nvme_count, TYPES[name].nvme_gb_each) == (8, 1000)
    for name in ("p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"):
        assert (TYPES[name].nvme_count, TYPES[name].nvme_gb_each) == (8, 3800)


def test_s6_efa_interfaces() -> None:
    expected = {
        "p3dn.24xlarge": 1,
        "p4d.24xlarge": 4,
        "p4de.24xlarge": 4,
        "p5.48xlarge": 32,
        "p5e.48xlarge": 32,
        "p5en.48xlarge": 16,
        "g6e.24xlarge": 2,
        "g6e.48xlarge": 4,
    }
    for name, it in TYPES.items():
        if name in expected:
            assert it.efa_interfaces == expected[name], name
        elif name.startswith("p3."):
            assert it.efa_interfaces == 0, name
        elif name.startswith("g"):
            size = name.split(".")[1]
            below_8x = size in ("xlarge", "2xlarge", "4xlarge")
            assert it.efa_interfaces == (0 if below_8x else 1), name


def test_s6_network() -> None:
    assert TYPES["p4d.24xlarge"].network_gbps == TYPES["p4de.24xlarge"].network_gbps == 400
    for name in ("p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"):
        assert TYPES[name].network_gbps == 3200
    assert TYPES["p5.4xlarge"].network_gbps == 100


def test_s6_p5e_has_no_on_demand_price_and_one_spot_row() -> None:
    offs = TYPES["p5e.48xlarge"].offerings
    assert all(o.on_demand_usd_per_hour is None for o in offs.values())
    assert set(offs) == {"us-west-2"}
    assert offs["us-west-2"].az_ids == ("usw2-az3",)
    assert offs["us-west-2"].spot_usd_per_hour is not None


def test_s6_regional_absences() -> None:
    for name, it in TYPES.items():
        if it.family in ("g6", "g6e", "p4de", "p5", "p5e", "p5en"):
            assert "eu-west-1" not in it.offerings, name
    for region in ("us-east-1", "ap-northeast-1"):
        assert region not in TYPES["p5e.48xlarge"].offerings


def test_s6_gpu_memory_is_ec2_api_values_and_skus_are_separate() -> None:
    # The choice: EC2 API GiB per GPU (MiB/1024), applied to every type (aws-gpu-specs.md conventions).
    api_gib = {
        "T4": 16.0,
        "A10G": 22.35,
        "L4": 22.35,
        "L40S": 44.70,
        "V100": 16.0,
        "V100-32GB": 32.0,
        "A100": 40.0,
        "A100-80GB": 80.0,
        "H100": 80.0,
        "H200": 141.0,
    }
    for name, it in TYPES.items():
        assert it.gpu_memory_gib == api_gib[it.gpu_model], name
    assert CAT.gpus["A100-80GB"].family == CAT.gpus["A100"].family == "A100"
    assert CAT.gpus["V100-32GB"].family == CAT.gpus["V100"].family == "V100"


def test_s6_no_spot_price_at_or_above_on_demand() -> None:
    # Snapshot quirk (§6): a spot price equal to on-demand is not a discount and must not be copied.
    for name, it in TYPES.items():
        for region, o in it.offerings.items():
            if o.spot_usd_per_hour is not None and o.on_demand_usd_per_hour is not None:
                assert o.spot_usd_per_hour < o.on_demand_usd_per_hour, (name, region)


def test_s6_az_ids_are_regular_azs_of_their_region() -> None:
    # Local Zone IDs (usw2-lax1-az1, use1-atl2-az1) must not appear; every AZ ID belongs to its region.
    for name, it in TYPES.items():
        for region, o in it.offerings.items():
            assert region in REGIONS
            assert o.az_ids, (name, region)
            for az in o.az_ids:
                assert re.fullmatch(r"[a-z]+\d-az\d+", az), (name, region, az)
                assert az in CAT.regions[region].az_ids, (name, region, az)


def test_section_3_fp64_peaks() -> None:
    # §3: only V100, A100, H100, H200 have real FP64 hardware; the others run it at 1/32-1/64.
    fp64 = {n: g.fp64_tflops for n, g in CAT.gpus.items()}
    assert fp64["V100"] == fp64["V100-32GB"] == 7.8
    assert fp64["A100"] == fp64["A100-80GB"] == 9.7
    assert fp64["H100"] == fp64["H200"] == 34
    for name in ("T4", "L4", "L40S"):
        value = fp64[name]
        assert value is not None and value < 2
    assert fp64["A10G"] is None  # no NVIDIA datasheet: unknown, never guessed
