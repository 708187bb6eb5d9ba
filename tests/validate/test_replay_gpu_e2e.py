"""The GPU tier on the test bed, from real captures replayed by the test hosts.

Fixtures (fixtures/SOURCES.md): one H100 80GB HBM3 (driver 590.48.01) captured by
utkuozdemir/nvidia_gpu_exporter: its `--query-gpu` CSV and its `nvidia-smi -q` dump. The
missing-GPU host replays a DERIVED file: that CSV with its one GPU row deleted.
Also here: the two real variants these captures showed the parsers did not handle.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.common.results import Level
from gpuforge.validate.checks import Expectations
from gpuforge.validate.gpu.health import GpuHealthCheck
from gpuforge.validate.gpu.inventory import GpuInventoryCheck
from tests.validate.gpu_fixtures import fixture
from tests.validate.test_replay import run as replay
from tests.validate.testbed import Testbed, missing_requirements

CSV = "smi_csv_h100_590_exporter_capture.txt"
SMI_Q = "smi_q_h100_590_exporter_capture.txt"
EXPECT = Expectations(gpus_per_node=1, gpu_memory_gib=80.0)
GOOD = {Level.PASS, Level.INFO, Level.WARNING}


def test_camel_case_query_fields_are_a_header() -> None:
    """Driver 590 names some fields in camelCase (pci.baseClass, fabric.cliqueId): still the header."""
    [gpu] = GpuInventoryCheck().parse(fixture(CSV)).gpus
    # every value agrees with the -q dump of the same capture
    assert (gpu.name, gpu.bus_id, gpu.memory_mib) == ("NVIDIA H100 80GB HBM3", "00000000:00:09.0", 81559.0)
    assert (gpu.driver, gpu.vbios, gpu.persistence) == ("590.48.01", "96.00.A5.00.01", "Enabled")
    by_check = {r.check: r for r in GpuInventoryCheck().run_on_output("n1", fixture(CSV), EXPECT)}
    assert by_check["gpu.count"].level is Level.PASS and by_check["gpu.memory"].level is Level.PASS


def test_hopper_split_sram_uncorrectable_counters_are_read() -> None:
    """Hopper drivers report SRAM Uncorrectable as Parity + SEC-DED; both count (variant made here)."""
    [h] = GpuHealthCheck().parse(fixture(SMI_Q))
    assert h.sram_uncorrectable == 0 and h.throttle_active == ("Idle",)
    levels = {r.check: r.level for r in GpuHealthCheck().run_on_output("n1", fixture(SMI_Q), EXPECT)}
    assert levels == {"gpu.ecc": Level.PASS, "gpu.remap": Level.PASS, "gpu.throttle": Level.PASS}
    lines = fixture(SMI_Q).splitlines(keepends=True)
    i = next(n for n, ln in enumerate(lines) if "SRAM Uncorrectable SEC-DED" in ln)  # the Volatile one
    lines[i] = lines[i].replace(": 0", ": 1")
    [ecc] = [r for r in GpuHealthCheck().run_on_output("n1", "".join(lines), EXPECT) if r.check == "gpu.ecc"]
    assert ecc.level is Level.ERROR and "SRAM uncorrectable 1" in ecc.message


def test_h100_scenarios_replay_the_fixtures() -> None:
    out = replay("nvidia-smi", "--query-gpu=index,name", "--format=csv", scenario="h100-590")
    assert out.returncode == 0 and out.stdout == fixture(CSV) and "(captured output, not a live GPU)" in out.stderr
    out = replay("nvidia-smi", "-q", "-d", "ECC", scenario="h100-590-gpu-missing")
    assert out.stdout == fixture(SMI_Q)
    out = replay("nvidia-smi", "--query-gpu=index", "--format=csv", scenario="h100-590-gpu-missing")
    assert out.stdout == fixture(CSV).splitlines(keepends=True)[0]
    assert "(derived from captured output, not a live GPU)" in out.stderr


@pytest.fixture
def bed() -> Iterator[Testbed]:
    why = missing_requirements()
    if why:
        pytest.skip(why)
    tb = Testbed(3, scenarios={1: "h100-590", 2: "h100-590-gpu-missing", 3: "h100-590"}).up()
    try:
        yield tb
    finally:
        tb.down()


@pytest.mark.netns
@pytest.mark.slow
def test_default_run_passes_the_gpu_tier_and_names_the_host_missing_its_gpu(
    bed: Testbed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuforge.cli import main

    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps(bed.inventory(expect={"gpus_per_node": 1, "gpu_memory_gib": 80})))
    args = ["validate", "--inventory", str(inv), "--format", "json", "--out", str(tmp_path / "ev")]
    with pytest.raises(SystemExit) as ex:
        main([*args, "--iperf-seconds", "1", "--connect-timeout", "2"])  # default checks: no --checks
    doc = json.loads(capsys.readouterr().out)
    states = {n: s["state"] for n, s in doc["context"]["nodes"].items()}
    bad = [
        (r["check"], r["targets"], r["level"], r["message"][:120]) for r in doc["results"] if r["level"] in ("error", "unknown")
    ]
    assert states == {"node1": "ok", "node2": "failed_gates", "node3": "ok"}, bad
    assert ex.value.code == 1
    results = doc["results"]

    def levels(node: str, check: str) -> set[str]:
        return {r["level"] for r in results if r["check"] == check and node in r["targets"]}

    for node in ("node1", "node3"):  # the GPU tier passed, on the replayed captures
        for check in ("gpu.count", "gpu.memory", "gpu.persistence", "gpu.ecc", "gpu.remap", "gpu.throttle"):
            assert levels(node, check) == {"pass"}, (node, check, levels(node, check))
        tier0 = [r for r in results if node in r["targets"] and r["check"] in {"gpu.xid", "bootstrap.status", "efa.provider"}]
        assert {r["check"] for r in tier0} == {"gpu.xid", "bootstrap.status", "efa.provider"}
        assert {r["level"] for r in tier0} <= {lvl.value for lvl in GOOD}, tier0
    [missing] = [r for r in results if r["check"] == "gpu.inventory" and "node2" in r["targets"]]
    assert missing["level"] == "unknown" and "header but no GPU rows" in missing["message"]
    assert levels("node2", "gpu.count") == set()  # no count was made up for it
    pairs = {tuple(p) for r in doc["context"].get("rounds", []) for p in r}
    assert all("node2" not in p for p in pairs)  # gated out: no pair test with it
