"""Rehearse first boot for every profile and print a timing table (root; `make bench-rehearsal`).

Each row boots one node of the stack with its launch-template user data and the rehearsal's
mirror (tests/rehearsal), waits for the first bootstrap run, then stops and starts it and waits
for the second (which must change nothing). Two shapes per training profile: the reference
instance type, and p5.4xlarge (EFA, one instance-store disk) where the reference shape's RAID0
needs an md driver this kernel may lack. Times include the container boot and cloud-init.

Slurm clusters (`slurm:STACK:N`, default cv-training with 1 and 4 GPU nodes): the head and N
nodes booted at once (tests/rehearsal/slurm.py, the shape and AZ of tests/rehearsal/test_slurm_cluster.py),
timed to every first bootstrap run done, every node IDLE, and an N-node `sbatch --gres` job.

    .venv/bin/python -m bench.rehearsal [STACK[:INSTANCE_TYPE] | slurm:STACK:N ...]
"""

from __future__ import annotations

import sys
import time

from tests.rehearsal.nodes import Rehearsal
from tests.rehearsal.root import RootImage, ensure_root
from tests.rehearsal.slurm import boot_cluster
from tests.rehearsal.stacks import boot_stack

DEFAULT = ["cv-training", "cv-training:p5.4xlarge", "risk-sim", "risk-sim:p5.4xlarge", "nlp-inference",
           "slurm:cv-training:1", "slurm:cv-training:4"]  # fmt: skip
SLURM_SHAPE, SLURM_AZ = "p3.16xlarge", "use1-az5"  # as tests/rehearsal/test_slurm_cluster.py


def slurm_row(image: RootImage, stack: str, n: int) -> tuple[str, ...]:
    """Head + n GPU nodes: seconds to every first bootstrap run, to every node IDLE, and an n-node job."""
    with Rehearsal(image, cuda_os="ubuntu-24.04", slurm=True).up() as r:
        t = time.monotonic()
        try:
            c = boot_cluster(r, stack, n, SLURM_SHAPE, SLURM_AZ, timeout=1800)
        except (TimeoutError, RuntimeError) as exc:
            return (f"slurm:{stack}:{n}", SLURM_SHAPE, f"error: {exc}"[:90], "-", "-", "-")
        booted = time.monotonic() - t
        failed = {k: (v.get("error") or {}).get("phase") for k, v in c.status.items() if v["state"] != "succeeded"}
        end = time.monotonic() + 300
        idle: list[str] = []
        while time.monotonic() < end:
            idle = r.ssh(c.head, "sinfo -h -N -o %T").stdout.split()
            if len(idle) == n and set(idle) == {"idle"}:
                break
            time.sleep(3)
        all_idle = time.monotonic() - t
        gres = f"gpu:{c.cfg.slurm.gpu_type}:{c.cfg.instance.gpu_count}" if c.cfg.slurm else "-"
        j = time.monotonic()
        job = r.ssh(c.head, f"cd /tmp && sudo sbatch --wait -N{n} --gres={gres} -o /dev/null --wrap 'srun true'", timeout=600)
        job_s = f"{time.monotonic() - j:.0f}" + ("" if job.returncode == 0 else f" (rc {job.returncode})")
        result = "succeeded" if not failed else f"failed: {failed}"
        return (f"slurm:{stack}:{n}", SLURM_SHAPE, f"{result}; idle: {','.join(idle)}"[:90], f"{booted:.0f}",
                f"{all_idle:.0f}", f"{n}-node job {job_s} s")  # fmt: skip


def node_rows(image: RootImage, specs: list[str]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    with Rehearsal(image).up() as r:
        for i, spec in enumerate(specs, 1):
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
    return rows


def main(argv: list[str]) -> int:
    rows: list[tuple[str, ...]] = []
    t0 = time.monotonic()
    image = ensure_root()
    root_s = time.monotonic() - t0
    specs = argv or DEFAULT
    for spec in (s for s in specs if s.startswith("slurm:")):
        _, stack, n = spec.split(":")
        rows.append(slurm_row(image, stack, int(n)))
    nodes = [s for s in specs if not s.startswith("slurm:")]
    if nodes:
        rows += node_rows(image, nodes)
    print(f"root image: {root_s:.0f} s (cached: ~0 s)")
    head = ("stack[:shape]", "instance", "first boot", "1st s", "2nd boot s | all idle s",
            "changed on 2nd boot (mirror files) | job")  # fmt: skip
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
