#!/usr/bin/env python3
"""gpuforge compute probe: achieved dense matmul TFLOPS (fp16, fp32, fp64) and device memory
copy bandwidth per GPU, printed as one JSON object on stdout.

Runs on the node (sent by validate/compute.py), needs torch with CUDA. Every loop is bounded
by a time budget and an iteration cap. On any failure it still prints JSON with "error", and
exits 1, so the caller reports `unknown` with the reason instead of guessing.
"""

import json
import sys
import time

SCHEMA = 1
BUDGET_S = 1.0  # per measurement, after warm-up
MAX_ITERS = 50
SIZES = {"fp16": 8192, "fp32": 8192, "fp64": 4096}
COPY_BYTES = 1 << 30


def _timed(torch, fn, device):
    """Seconds per call of fn, bounded by BUDGET_S and MAX_ITERS."""
    fn()  # warm-up: cuBLAS picks its kernel here
    torch.cuda.synchronize(device)
    n, start = 0, time.perf_counter()
    while n < MAX_ITERS and (n < 2 or time.perf_counter() - start < BUDGET_S):
        fn()
        n += 1
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / n


def _matmul_tflops(torch, device, dtype_name):
    dtype = {"fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}[dtype_name]
    n = SIZES[dtype_name]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = _timed(torch, lambda: torch.matmul(a, b), device)
    return 2.0 * n**3 / seconds / 1e12


def _copy_gbs(torch, device):
    x = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    seconds = _timed(torch, lambda: y.copy_(x), device)
    return 2.0 * COPY_BYTES / seconds / 1e9  # each copy reads and writes every byte


def main():
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, not raised
        return {"error": f"torch not importable: {exc}"}
    if not torch.cuda.is_available():
        return {"error": "torch.cuda.is_available() is False"}
    # strict fp32: TF32 would report tensor-core speed against the fp32 peak
    torch.backends.cuda.matmul.allow_tf32 = False
    gpus = []
    for i in range(torch.cuda.device_count()):
        device = torch.device("cuda", i)
        with torch.cuda.device(device):
            gpus.append(
                {
                    "index": i,
                    "name": torch.cuda.get_device_name(device),
                    "matmul_tflops": {k: round(_matmul_tflops(torch, device, k), 3) for k in SIZES},
                    "copy_gbs": round(_copy_gbs(torch, device), 1),
                }
            )
            torch.cuda.empty_cache()
    return {"backend": f"torch {torch.__version__} cuda {torch.version.cuda}", "gpus": gpus}


if __name__ == "__main__":
    try:
        doc = main()
    except Exception as exc:  # noqa: BLE001 - a CUDA failure mid-run is evidence, print it
        doc = {"error": f"{type(exc).__name__}: {exc}"}
    doc = {"tool": "gpuforge-compute", "schema": SCHEMA, **doc}
    print(json.dumps(doc))
    sys.exit(1 if "error" in doc else 0)
