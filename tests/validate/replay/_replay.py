#!/usr/bin/env python3
"""Replay of real captured GPU-tool output for test hosts that have no GPU.

Called by the shims next to it (nvidia-smi, fi_info, all_reduce_perf, mpirun) as
`_replay.py TOOL ARGS...`. Prints the fixture for (scenario, invocation) on stdout, exactly as
captured, and a label on **stderr** only, so no parser ever sees the label. An invocation the
scenario has no capture for exits 3 with nothing on stdout: the check then reports unknown.

Scenario: $GPUFORGE_REPLAY_SCENARIO, else the first line of a `scenario` file next to this
script, else "a100-nvswitch". Fixtures: $GPUFORGE_REPLAY_FIXTURES, else ../fixtures from the
real location of this script, else (when bind-mounted, as tests/validate/testbed.py does over
/usr/local/bin) ../fixtures of the mount's source directory from /proc/self/mountinfo.
"""

import os
import sys
from pathlib import Path

# (scenario, invocation key) -> fixture file. All are real captures (fixtures/SOURCES.md), except
# files named derived_*, which SOURCES.md lists with how they were made.
SCENARIOS = {
    "a100-nvswitch": {
        "nvidia-smi topo": "topo_f6a_a100_nvswitch.txt",
        "nvidia-smi nvlink": "nvlink_f5_a100.txt",
        "fi_info": "fi_info_f12_efa.txt",
        "all_reduce_perf": "nccl_f1_p4de_2node_srun.txt",
        "mpirun": "nccl_f1_p4de_2node_srun.txt",
    },
    "v100-mesh": {
        "nvidia-smi topo": "topo_f6b_v100_hybrid_mesh.txt",
        "nvidia-smi nvlink": "nvlink_f5_v100.txt",
        "fi_info": "fi_info_f12_efa.txt",
        "all_reduce_perf": "nccl_f3_legacy_p3dn.txt",
        "mpirun": "nccl_f3_legacy_p3dn.txt",
    },
    # One H100 80GB HBM3 (driver 590.48.01, a pass-through VM): its --query-gpu CSV, -q dump, topo -m, nvlink -s,
    # all from one capture file of utkuozdemir/nvidia_gpu_exporter (fixtures/SOURCES.md).
    "h100-590": {
        "nvidia-smi topo": "topo_h100_590_exporter_capture.txt",
        "nvidia-smi nvlink": "nvlink_h100_590_exporter_capture.txt",
        "nvidia-smi --query-gpu": "smi_csv_h100_590_exporter_capture.txt",
        "nvidia-smi -q": "smi_q_h100_590_exporter_capture.txt",
    },
    # DERIVED, not captured: the h100-590 CSV with its one GPU row deleted (a node whose GPU is gone).
    "h100-590-gpu-missing": {
        "nvidia-smi topo": "topo_h100_590_exporter_capture.txt",
        "nvidia-smi nvlink": "nvlink_h100_590_exporter_capture.txt",
        "nvidia-smi --query-gpu": "derived_smi_csv_h100_590_gpu_row_deleted.txt",
        "nvidia-smi -q": "smi_q_h100_590_exporter_capture.txt",
    },
    "nvlink-down": {
        "nvidia-smi topo": "topo_f6d_a100_pairs_excerpt.txt",
        "nvidia-smi nvlink": "nvlink_f5_all_inactive.txt",
        "mpirun": "nccl_f2_p5_eks_tag_output.txt",
    },
}
DEFAULT = "a100-nvswitch"


def invocation(tool, args):
    if tool == "nvidia-smi":
        for word in ("topo", "nvlink"):
            if word in args:
                return f"nvidia-smi {word}"
        if "-q" in args:
            return "nvidia-smi -q"
        if any(a.startswith("--query-gpu") for a in args):
            return "nvidia-smi --query-gpu"
        return "nvidia-smi"
    return tool


def scenario(here):
    name = os.environ.get("GPUFORGE_REPLAY_SCENARIO")
    if not name and (here / "scenario").is_file():
        name = (here / "scenario").read_text().split("\n", 1)[0].strip()
    return name or DEFAULT


def fixtures_dir(here):
    candidates = []
    if os.environ.get("GPUFORGE_REPLAY_FIXTURES"):
        candidates.append(Path(os.environ["GPUFORGE_REPLAY_FIXTURES"]))
    candidates.append(here.resolve().parent / "fixtures")
    try:  # bind mount: field 4 is the source path within its filesystem, field 5 the mount point
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            if len(fields) > 4 and fields[4] == str(here):
                candidates.append(Path(fields[3]).parent / "fixtures")
    except OSError:
        pass
    return next((c for c in candidates if c.is_dir()), None)


def main(argv):
    tool, args = argv[1], argv[2:]
    # nccl-tests prints from rank 0 only (its PRINT macro: the other ranks' stdout stays empty).
    # Started once per rank (srun --mpi=pmix), the shim prints as that rank would.
    if tool == "all_reduce_perf" and os.environ.get("SLURM_PROCID", "0") != "0":
        return 0
    here = Path(argv[0]).absolute().parent
    name = scenario(here)
    key = invocation(tool, args)
    fixture = SCENARIOS.get(name, {}).get(key)
    directory = fixtures_dir(here)
    if fixture is None or directory is None:
        print(f"# gpuforge replay: no captured output for {key!r} in scenario {name!r}", file=sys.stderr)
        return 3
    kind = "derived from captured output" if fixture.startswith("derived_") else "captured output"
    print(f"# gpuforge replay of {fixture} ({kind}, not a live GPU)", file=sys.stderr)
    sys.stdout.write((directory / fixture).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
