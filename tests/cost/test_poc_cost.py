"""The POC's cost lines against figures worked out by hand from the catalog and a published run.

cv-training: 1x p4de.24xlarge us-east-1, on-demand 27.44705 $/h, spot 14.2574 $/h (offerings.csv),
200 GiB gp3 root = 200 * 0.08 / 730 $/h; no fixed items. NVIDIA's DGX A100 (8x A100 80GB)
mixed-precision ResNet-50 run: 16621 img/s (DeepLearningExamples README @729963dd, as shipped).
One epoch = 1,281,167 / 16621 = 77.0812 s; its cost = that many hours x the stack's hourly.
nlp-inference: 2x g4dn.8xlarge (1 T4 each); T4 BERT-base seq 128 FP16 best: batch 12 at 12.53 ms
= 957.70 QPS per GPU (TensorRT demoBERT README @007c3470); the stack serves 2 x 957.70 QPS.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuforge.cli import cli
from gpuforge.core.config import StackConfig, parse_stack_config
from gpuforge.core.costplan import stack_cost
from gpuforge.core.poccost import Throughput, cost_line, throughput_from_result, workload_cost
from gpuforge.core.published import load_published
from gpuforge.stackfile import load_stack_config

ROOT = Path(__file__).resolve().parents[2]


def _cfg(stack: str) -> StackConfig:
    raw, _ = load_stack_config(ROOT, stack)
    return parse_stack_config(raw, stack)


def test_cost_of_an_epoch_from_the_published_dgx_a100_run_on_cv_training() -> None:
    figure = load_published()["resnet50-train"]["A100-80GB"].images_per_s(8)
    assert figure == (16621.0, "published 8-GPU run")
    images_per_s = figure[0]
    wc = workload_cost(Throughput("resnet50-train", images_per_s, "node"), stack_cost(_cfg("cv-training")), "on-demand")
    epoch_s = 1_281_167 / 16621
    hourly = 27.44705 + 200 * 0.08 / 730
    assert wc.seconds_per_unit == pytest.approx(epoch_s)
    assert wc.usd_at_stack_option() == pytest.approx(hourly * epoch_s / 3600)  # about $0.588
    assert wc.usd_per_unit["spot"] == pytest.approx((14.2574 + 200 * 0.08 / 730) * epoch_s / 3600)
    assert wc.usd_per_unit["1y"] == pytest.approx((27.44705 * 0.6 + 200 * 0.08 / 730) * epoch_s / 3600)
    line = cost_line(wc)
    assert line.startswith("cost of epoch: $0.59 at on-demand (1.3 min)") and "spot $0.31" in line


def test_the_same_hourly_figure_as_gpuforge_cost() -> None:
    res = CliRunner().invoke(cli, ["cost", "--project-dir", str(ROOT), "--format", "json", "--stack", "cv-training"])
    assert res.exit_code == 0, res.output
    hourly = json.loads(res.output)["stacks"][0]["options"]["on_demand"]["usd_per_hour"]
    wc = workload_cost(Throughput("resnet50-train", 16621.0, "node"), stack_cost(_cfg("cv-training")), "on-demand")
    assert wc.usd_at_stack_option() == pytest.approx(hourly * wc.seconds_per_unit / 3600, rel=1e-4)


def test_cost_of_a_million_inferences_on_shared_t4s() -> None:
    bs, qps = load_published()["bert-infer"]["T4"].best_qps() or (0, 0.0)
    assert bs == 12
    sc = stack_cost(_cfg("nlp-inference"))
    wc = workload_cost(Throughput("bert-infer", qps, "gpu"), sc, "on-demand")
    assert wc.stack_rate == pytest.approx(2 * 12 / 12.53 * 1000)  # two nodes, one T4 each
    hourly = sc.hourly("on_demand")
    assert hourly is not None and sc.fixed  # EKS: control plane, system nodes, NAT: in the hourly
    assert wc.usd_at_stack_option() == pytest.approx(hourly * 1e6 / wc.stack_rate / 3600)


def test_purchase_options_map_to_prices_and_a_capacity_block_is_unknown() -> None:
    sc = stack_cost(_cfg("cv-training"))
    tp = Throughput("resnet50-train", 16621.0, "node")
    reserved = workload_cost(tp, sc, "capacity-reservation").usd_at_stack_option()
    assert reserved == workload_cost(tp, sc, "on-demand").usd_at_stack_option()
    block = workload_cost(tp, sc, "capacity-block")
    assert block.usd_at_stack_option() is None and "unknown at capacity-block" in cost_line(block)
    assert workload_cost(tp, sc, "spot").usd_at_stack_option() == block.usd_per_unit["spot"]


def test_figures_come_from_the_result_document_with_their_scope() -> None:
    doc = {"workload": "mc-fp64", "result": {"paths_per_s": 2.0e9}, "provenance": {"device": {"kind": "cuda"}}}
    tp = throughput_from_result(doc)
    sc = stack_cost(_cfg("risk-sim"))
    wc = workload_cost(tp, sc, "on-demand")
    assert tp.scope == "gpu" and wc.stack_rate == 2.0e9 * sc.node_count * sc.gpus_per_node
    assert "figure from one GPU" in wc.scaling
    cpu = throughput_from_result({"workload": "resnet50-train", "result": {"images_per_s": 3.0, "ranks": 1},
                                  "provenance": {"device": {"kind": "cpu"}}})
    assert cpu.measured_on == "1 CPU process(es)"


def test_fp64_ratio_is_against_the_catalogs_vector_peak_and_never_for_a_cpu_run() -> None:
    from gpuforge.core.catalog import load_catalog
    from gpuforge.core.poccost import fp64_ratio

    cat = load_catalog()
    v100 = cat.gpu(cat.instance_types["p3dn.24xlarge"])  # V100-32GB: fp64_tflops 7.8 (gpus.yaml)
    # an input figure for the arithmetic, not a measurement: 97.5 counted GFLOP/s
    gpu_doc = {"result": {"counted_fp64_gflops": 97.5}, "provenance": {"device": {"kind": "cuda"}}}
    r = fp64_ratio(gpu_doc, v100)
    assert r["peak_tflops"] == 7.8 and r["ratio"] == pytest.approx(97.5 / 7800)
    cpu = fp64_ratio({"result": {"counted_fp64_gflops": 0.03}, "provenance": {"device": {"kind": "cpu"}}}, v100)
    assert cpu["ratio"] is None and cpu["why"].startswith("CPU run")
    a10g = cat.gpu(cat.instance_types["g5.xlarge"])  # no NVIDIA datasheet for the AWS-only A10G: null peak
    assert fp64_ratio(gpu_doc, a10g)["why"] == "the catalog has no FP64 peak for A10G"
