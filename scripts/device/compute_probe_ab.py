"""A/B of the compute probe's timing on a lent GPU, in one process so the GPU's state carries over:
the probe as it was (OLD, a file path) on a cold GPU, the shipped probe, the old one again right
after (warm), the shipped one again. Prints one JSON line per run with the SM clock read after it.
Usage (device machine, repository root): python3 scripts/device/compute_probe_ab.py OLD_PROBE.py

Run once, 2026-12-04, on a lent H200, with a variant probe (0.5 s warm-up, then 1 s of batched
calls) against the shipped one (tests/validate/fixtures/compute_h200_lent_ab.jsonl): the variant
read LOWER fp16 (630, 643 TFLOPS) than the shipped probe cold (701) and warm (718), so the idea it
tested (a cold GPU's clock ramp biasing the short timing) was wrong, and the variant was dropped.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType


def load(name: str, path: str | Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sm_clock() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return "no nvidia-smi"
    return out.stdout.strip()


old = load("old_probe", sys.argv[1])
new = load("new_probe", Path(__file__).resolve().parents[2] / "validate" / "node_scripts" / "gpu_compute.py")
print(json.dumps({"run": "idle", "sm_clock_power": sm_clock()}), flush=True)
for label, mod in (("old-cold", old), ("new", new), ("old-warm", old), ("new-again", new)):
    t0 = time.perf_counter()
    doc = mod.main()
    print(json.dumps({"run": label, "wall_s": round(time.perf_counter() - t0, 2), "sm_clock_power": sm_clock(), **doc}),
          flush=True)
