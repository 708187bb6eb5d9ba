"""The compute probe's timing (validate/node_scripts/gpu_compute.py) against a GPU whose clocks ramp.

An idle GPU runs its first tenths of a second of work at low clocks. On the lent H200
(2026-12-04, driver 580.159.04) the probe's old timing (one warm-up call, then up to 50 timed
calls) measured 686 fp16 TFLOPS, 69% of the datasheet's 989, on a healthy GPU. Here a stand-in
for torch (no GPU on the build machine) makes each call's duration depend on how much work the
device has done, and the probe must report the steady rate, not the ramp.
"""

from __future__ import annotations

import importlib.util
import types

import pytest

from gpuforge.validate.compute import SCRIPT

STEADY_S = 0.0016  # one 8192^3 fp16 product at about 690 TFLOPS
RAMP_S = 0.25  # device-busy seconds before the clocks reach full speed
SLOWDOWN = 2.5  # a call during the ramp takes this many times longer


def _probe() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_compute_probe", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _RampingGpu:
    """A clock that only the GPU's work advances; synchronize() waits for nothing more."""

    def __init__(self) -> None:
        self.now = 0.0
        self.busy = 0.0
        self.calls = 0

    def perf_counter(self) -> float:
        return self.now

    def call(self) -> None:
        d = STEADY_S * (SLOWDOWN if self.busy < RAMP_S else 1.0)
        self.busy += d
        self.now += d
        self.calls += 1


def _fake_torch(gpu: _RampingGpu) -> types.SimpleNamespace:
    return types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda device: None))


def test_the_probe_times_the_gpu_at_its_working_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _probe()
    gpu = _RampingGpu()
    monkeypatch.setattr(probe.time, "perf_counter", gpu.perf_counter)
    seconds = probe._timed(_fake_torch(gpu), gpu.call, "cuda:0")
    assert seconds == pytest.approx(STEADY_S, rel=0.02), f"timed {seconds * 1e3:.3f} ms per call, steady is 1.6 ms"


def test_the_probe_stays_bounded_when_calls_are_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU so slow that one call outlasts both budgets still gets a figure after a bounded number of calls."""
    probe = _probe()
    gpu = _RampingGpu()
    monkeypatch.setattr(probe.time, "perf_counter", gpu.perf_counter)

    def slow_call() -> None:
        gpu.now += 2.0
        gpu.calls += 1

    seconds = probe._timed(_fake_torch(gpu), slow_call, "cuda:0")
    assert seconds == pytest.approx(2.0)
    assert gpu.calls <= 1 + 2 * probe.BATCH
