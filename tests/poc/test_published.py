"""NVIDIA's published figures, read out of the vendor's own README tables as gpuforge ships them
(core/catalog/published/*.md: excerpts of the commits catalog/published.yaml names). The
expected numbers below are the README cells as printed there; broken variants are made from the
real files inside the tests, never stored."""

from __future__ import annotations

import pytest

from gpuforge.core.published import PUBLISHED_DIR, PublishedFormatError, bert_base_fp16, load_published, resnet_training


def test_resnet50_training_figures_per_gpu_model_with_system_and_software() -> None:
    pub = load_published()["resnet50-train"]
    a100 = pub["A100-80GB"]
    assert a100.per_gpu_count == {1: 2470.0, 8: 16621.0}
    assert a100.system == "NVIDIA DGX A100 (8x A100 80GB)" and "pytorch-21.03" in a100.software
    assert a100.url.startswith("https://github.com/NVIDIA/DeepLearningExamples/blob/729963dd")
    assert pub["V100"].per_gpu_count == {1: 1200.0, 8: 8322.0}
    assert pub["V100-32GB"].per_gpu_count == {1: 1156.0, 8: 8056.0}
    # the older README's layout (mixed precision first, decimals) and its older container
    assert pub["A100"].per_gpu_count == {1: 1240.81, 8: 9604.92} and "pytorch-20.06" in pub["A100"].software


def test_a_shape_takes_the_published_run_of_its_size_or_says_it_scaled() -> None:
    a100 = load_published()["resnet50-train"]["A100-80GB"]
    assert a100.images_per_s(8) == (16621.0, "published 8-GPU run")
    assert a100.images_per_s(4) == (4 * 2470.0, "published 1-GPU figure x 4 (linear, not published)")


def test_bert_base_seq128_fp16_qps_is_batch_over_average_latency() -> None:
    pub = load_published()["bert-infer"]
    t4 = pub["T4"]
    # T4 (16GB), TensorRT 8.4.3: seq 128, batch 12, FP16 average 12.53 ms, 99th 13.55 ms
    assert t4.per_batch_qps[12] == pytest.approx(12 / 12.53 * 1000)
    assert t4.per_batch_p99_ms[12] == 13.55
    assert t4.best_qps() == (12, pytest.approx(957.70, abs=0.01))
    assert set(t4.per_batch_qps) == {1, 2, 4, 8, 12, 16, 24, 32, 64, 128}  # the 384 rows are left out
    a100 = pub["A100"]
    assert a100.per_batch_qps[1] == pytest.approx(1 / 0.67 * 1000) and "TensorRT 8.4.3" in a100.software
    l40s = pub["L40S"]
    assert l40s.per_batch_qps[32] == pytest.approx(32 / 3.93 * 1000) and "TensorRT 10.11" in l40s.software


def test_a_changed_readme_layout_is_an_error_not_a_wrong_number() -> None:
    text = (PUBLISHED_DIR / "dle_resnet50v15_pytorch_729963dd.md").read_text()
    with pytest.raises(PublishedFormatError, match="no single mixed-precision"):
        resnet_training(text.replace("Throughput - mixed precision", "Throughput - AMP"),
                        "Training performance: NVIDIA DGX A100 (8x A100 80GB)")
    with pytest.raises(PublishedFormatError, match="no table"):
        resnet_training(text, "Training performance: NVIDIA DGX H100 (8x H100 80GB)")
    bert = (PUBLISHED_DIR / "trt_demobert_007c3470.md").read_text()
    with pytest.raises(PublishedFormatError, match="FP16 columns"):
        bert_base_fp16(bert.replace("| Average |", "| Mean |"), "Inference performance: NVIDIA T4 (16GB)")
    with pytest.raises(PublishedFormatError, match="not a number"):
        bert_base_fp16(bert.replace("| 13.55 | 12.53 |", "| 13.55 | n/a |"), "Inference performance: NVIDIA T4 (16GB)")
