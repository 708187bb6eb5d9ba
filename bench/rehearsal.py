"""Rehearse first boot for every profile and print a timing table (root; `make bench-rehearsal`).

Each row boots one node of the stack with its launch-template user data and the rehearsal's
mirror (tests/rehearsal), waits for the first bootstrap run, then stops and starts it and waits
for the second (which must change nothing). Two shapes per training profile: the reference
instance type, and p5.4xlarge (EFA, one instance-store disk) where the reference shape's RAID0
needs an md driver this kernel may lack. Times include the container boot and cloud-init.

    .venv/bin/python -m bench.rehearsal [STACK[:INSTANCE_TYPE] ...]
"""

from __future__ import annotations

import sys
import time

from tests.rehearsal.nodes import Rehearsal
from tests.rehearsal.root import ensure_root
from tests.rehearsal.stacks import boot_stack

DEFAULT = ["cv-training", "cv-training:p5.4xlarge", "risk-sim", "risk-sim:p5.4xlarge", "nlp-inference"]


def main(argv: list[str]) -> int:
    rows = []
    t0 = time.monotonic()
    image = ensure_root()
    root_s = time.monotonic() - t0
    with Rehearsal(image).up() as r:
        for i, spec in enumerate(argv or DEFAULT, 1):
            stack, _, shape = spec.partition(":")
            t = time.monotonic()
            try:
                booted = boot_stack(r, stack, f"bench-{i}", shape or None, timeout=1500)
            except (TimeoutError, RuntimeError) as exc:
                rows.append((spec, "-", f"error: {exc}", "-", "-", "-"))
                continue
            first = time.monotonic() - t
            err = booted.status.get("error") or {}
            result = booted.status["state"] + (f" in {err.get('phase')}: {err.get('message')}" if err else "")
            second, changed = "-", "-"
            if booted.status["state"] == "succeeded":
                t = time.monotonic()
                r.stop(booted.node)
                r.start(booted.node)
                again = r.wait_bootstrap(booted.node, run=2, timeout=600)
                second = f"{time.monotonic() - t:.0f}"
                changed = ",".join(p["name"] for p in again["phases"] if p["changed"]) or "none"
            downloads = len(r.mirror.downloads(booted.node.ip)) if r.mirror else 0
            rows.append((spec, booted.cfg.instance.name, result[:90], f"{first:.0f}", second, f"{changed} ({downloads} files)"))
            r.stop(booted.node)
    print(f"root image: {root_s:.0f} s (cached: ~0 s)")
    head = ("stack[:shape]", "instance", "first boot", "1st s", "2nd boot s", "changed on 2nd boot (mirror files)")
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
