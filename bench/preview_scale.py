"""Benchmark: offline preview time against the SDK floor, for 1, 8, 64 and 256 nodes.

For each size N the real program (risk-sim profile: instance + st1 volume + attachment per
node, the richest per-node shape) runs under the mock engine, in process, and is timed against
two floors under the same mock engine:

- bare floor (the issue's definition): the same number of custom resources with one input each;
- graph floor: the very graph the preview recorded (same type tokens, same inputs), registered
  flat as untyped custom resources by a trivial program;
- typed floor: the same graph declared flat through the same pulumi-aws classes
  (`aws.ec2.Instance(...)` with the recorded inputs): what the SDK and the provider SDK cost for
  these resources however the program is written. preview / typed floor is gpuforge's own
  overhead (components, outputs, bootstrap rendering, config validation, policies).

Goal: at 256 nodes at most 1.3x the floor, and linear growth.

    .venv/bin/python bench/preview_scale.py [--repeat 3] [--sizes 1,8,64,256]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

from gpuforge.offline.engine import run_program  # noqa: E402
from gpuforge.offline.mocks import MockHints, OfflineMocks  # noqa: E402
from gpuforge.preview import run_preview  # noqa: E402

FLOOR_MAIN = '''
import pulumi

class Bare(pulumi.CustomResource):
    def __init__(self, name):
        super().__init__("bench:index:Bare", name, {"value": name})

for i in range(int(pulumi.Config("bench").require("count"))):
    Bare(f"bare-{i}")
'''

GRAPH_MAIN = '''
import json
import pulumi

class Recorded(pulumi.CustomResource):
    def __init__(self, typ, name, inputs):
        super().__init__(typ, name, inputs)

for typ, name, inputs in json.load(open("graph.json")):
    Recorded(typ, name, inputs)
'''


def make_project(base: Path, nodes: int) -> Path:
    proj = base / f"gpuforge-{nodes}"
    (proj / "stacks").mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, proj / name)
    cfg = yaml.safe_load((ROOT / "stacks" / "Pulumi.risk-sim.yaml").read_text())
    cfg["config"]["gpuforge:nodeCount"] = nodes
    cfg["config"]["gpuforge:subnetCidr"] = "10.42.0.0/20"
    (proj / "stacks" / "Pulumi.bench.yaml").write_text(yaml.safe_dump(cfg))
    return proj


def make_floor(base: Path) -> Path:
    proj = base / "floor"
    proj.mkdir()
    (proj / "__main__.py").write_text(FLOOR_MAIN)
    return proj


def time_preview(proj: Path) -> tuple[float, int, list[tuple[str, str, dict]]]:
    t0 = time.perf_counter()
    result = run_preview(proj, "bench")
    elapsed = time.perf_counter() - t0
    graph = [(r.type, r.name, r.inputs) for r in result.run.resources if r.custom]
    return elapsed, len(graph), graph


TYPED_MAIN = '''
import importlib
import json
import re
import warnings

import pulumi

warnings.simplefilter("ignore", DeprecationWarning)
KEEP = {"tags", "tagsAll"}  # user keys inside these maps are data, not property names


def snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def to_kwargs(value, keep=False):
    if isinstance(value, dict):
        return {(k if keep else snake(k)): to_kwargs(v, k in KEEP) for k, v in value.items()}
    if isinstance(value, list):
        return [to_kwargs(v) for v in value]
    return value


class Recorded(pulumi.CustomResource):
    def __init__(self, typ, name, inputs):
        super().__init__(typ, name, inputs)


for typ, name, inputs in json.load(open("graph.json")):
    pkg, mod, cls_name = typ.split(":")
    if pkg == "aws":
        cls = getattr(importlib.import_module("pulumi_aws." + mod.split("/")[0]), cls_name)
        cls(name, **{snake(k): to_kwargs(v, k in KEEP) for k, v in inputs.items()})
    else:
        Recorded(typ, name, inputs)
'''


def time_graph_floor(base: Path, graph: list[tuple[str, str, dict]], typed: bool = False) -> float:
    proj = base / ("typed-floor" if typed else "graph-floor")
    proj.mkdir(exist_ok=True)
    (proj / "__main__.py").write_text(TYPED_MAIN if typed else GRAPH_MAIN)
    (proj / "graph.json").write_text(json.dumps(graph))
    mocks = OfflineMocks(MockHints("us-east-1", "use1-az6", "10.42.0.0/20"))
    t0 = time.perf_counter()
    run = run_program(proj, "bench", "graph", {}, [], mocks)
    elapsed = time.perf_counter() - t0
    assert sum(r.custom for r in run.resources) == len(graph)
    return elapsed


def time_floor(proj: Path, count: int) -> float:
    mocks = OfflineMocks(MockHints("us-east-1", "use1-az6", "10.42.0.0/20"))
    t0 = time.perf_counter()
    run = run_program(proj, "bench", "floor", {"bench:count": str(count)}, [], mocks)
    elapsed = time.perf_counter() - t0
    assert sum(r.custom for r in run.resources) == count
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="1,8,64,256")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        floor = make_floor(base)
        time_preview(make_project(base, 1))  # warm imports and caches once, outside the timings
        rows = []
        for n in sizes:
            proj = make_project(base, n)
            runs = [time_preview(proj) for _ in range(args.repeat)]
            t = statistics.median(r[0] for r in runs)
            count, graph = runs[0][1], runs[0][2]
            f = statistics.median(time_floor(floor, count) for _ in range(args.repeat))
            g = statistics.median(time_graph_floor(base, graph) for _ in range(args.repeat))
            ty = statistics.median(time_graph_floor(base, graph, typed=True) for _ in range(args.repeat))
            rows.append((n, count, t, f, g, ty))

    print(
        f"{'nodes':>6} {'resources':>10} {'preview s':>10} {'bare floor s':>13} {'ratio':>6} "
        f"{'graph floor s':>14} {'ratio':>6} {'typed floor s':>14} {'ratio':>6} {'ms/resource':>12}"
    )
    for n, count, t, f, g, ty in rows:
        print(
            f"{n:>6} {count:>10} {t:>10.3f} {f:>13.3f} {t / f:>6.2f} {g:>14.3f} {t / g:>6.2f} "
            f"{ty:>14.3f} {t / ty:>6.2f} {1000 * t / count:>12.2f}"
        )
    n0, c0, t0 = rows[0][:3]
    n1, c1, t1 = rows[-1][:3]
    print(f"growth {n0}->{n1} nodes: resources x{c1 / c0:.1f}, time x{t1 / t0:.1f}")


if __name__ == "__main__":
    main()
