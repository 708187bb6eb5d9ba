"""What a measured (or published) workload figure costs on a stack (issue 23).

The same numbers `gpuforge cost` prints (core/costplan.py `stack_cost`: catalog prices,
commitment factors, storage, the fixed items) turned into the seeds' POC units:

- resnet50-train: the time and cost of one ImageNet epoch (1,281,167 images) on the stack;
- bert-infer: the cost of one million inferences at the best measured batch size;
- mc-fp64: the cost of 10^9 Monte Carlo paths.

Scaling from what was measured to the stack is stated, not hidden: a training result covers one
node's GPUs (torchrun over all of them), and the stack's epoch assumes the nodes add up linearly
(no inter-node all-reduce was measured); an inference or Monte Carlo result covers one GPU (or
GPU share), and the stack serves from every GPU independently. Pure arithmetic: no Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuforge.core.catalog import GpuModel
from gpuforge.core.costplan import OPTION_LABELS, OPTIONS, StackCost, price_option

IMAGENET_TRAIN_IMAGES = 1_281_167
UNITS = {
    "resnet50-train": ("epoch", "one ImageNet-1k epoch (1,281,167 images)"),
    "bert-infer": ("1M inferences", "one million BERT-base inferences"),
    "mc-fp64": ("1e9 paths", "10^9 FP64 Monte Carlo paths"),
}


@dataclass(frozen=True)
class Throughput:
    """A workload figure for one node's run (training) or one GPU (inference, Monte Carlo)."""

    workload: str
    per_unit: float  # images/s per node, QPS per GPU, paths/s per GPU
    scope: str  # "node" | "gpu"
    measured_on: str = ""  # what the figure came from, for the scaling sentence ("8 GPUs", "a CPU")

    def stack_rate(self, sc: StackCost) -> float:
        if self.scope == "node":
            return self.per_unit * sc.node_count
        return self.per_unit * sc.node_count * sc.gpus_per_node


def throughput_from_result(doc: dict[str, Any]) -> Throughput:
    """The figure that the cost is computed from, out of a gpuforge-poc result document."""
    workload, result = str(doc["workload"]), doc["result"]
    device = ((doc.get("provenance") or {}).get("device") or {}).get("kind")
    cpu = device == "cpu"
    if workload == "resnet50-train":
        ranks = int(result.get("ranks", 1))
        on = f"{ranks} CPU process(es)" if cpu else f"{ranks} GPU(s) of one node"
        return Throughput(workload, float(result["images_per_s"]), "node", on)
    on = "the CPU" if cpu else "one GPU"
    if workload == "bert-infer":
        return Throughput(workload, float(result["best_qps"]), "gpu", on)
    if workload == "mc-fp64":
        return Throughput(workload, float(result["paths_per_s"]), "gpu", on)
    raise ValueError(f"unknown workload {workload!r}")


def _work_units(workload: str) -> float:
    """How many of the rate's items one cost unit is."""
    return {"resnet50-train": IMAGENET_TRAIN_IMAGES, "bert-infer": 1e6, "mc-fp64": 1e9}[workload]


@dataclass(frozen=True)
class WorkloadCost:
    workload: str
    unit: str
    stack_rate: float  # items per second on the whole stack
    seconds_per_unit: float
    usd_per_unit: dict[str, float | None]  # costplan option -> USD for one unit (None: no price)
    stack_option: str | None  # the option the stack buys, or None where its price is unknown
    purchase_option: str
    scaling: str

    def usd_at_stack_option(self) -> float | None:
        return None if self.stack_option is None else self.usd_per_unit[self.stack_option]

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "unit": self.unit,
            "stack_rate_per_s": round(self.stack_rate, 3),
            "seconds_per_unit": round(self.seconds_per_unit, 3),
            "usd_per_unit": {o: None if v is None else round(v, 4) for o, v in self.usd_per_unit.items()},
            "purchase_option": self.purchase_option,
            "usd_at_purchase_option": None if self.usd_at_stack_option() is None else round(self.usd_at_stack_option() or 0, 4),
            "scaling": self.scaling,
        }


def workload_cost(tp: Throughput, sc: StackCost, purchase_option: str) -> WorkloadCost:
    """Time and cost of one unit of the workload on the stack, under every purchase option."""
    priced_as = price_option(purchase_option)  # ValueError on an unknown option
    rate = tp.stack_rate(sc)
    if rate <= 0:
        raise ValueError("a throughput must be positive to be costed")
    seconds = _work_units(tp.workload) / rate
    usd = {o: (None if (h := sc.hourly(o)) is None else h * seconds / 3600) for o in OPTIONS}
    on = tp.measured_on or ("one node" if tp.scope == "node" else "one GPU")
    if tp.scope == "node":
        scaling = (f"figure from {on}, taken as one node's rate; the stack's {sc.node_count} node(s) assumed to add up "
                   "linearly (no inter-node all-reduce measured)")
    else:
        gpus = sc.node_count * sc.gpus_per_node
        scaling = f"figure from {on}, taken as one GPU's rate; the stack's {gpus} GPUs each serve independently"
    return WorkloadCost(tp.workload, UNITS[tp.workload][0], rate, seconds, usd, priced_as,
                        purchase_option, scaling)


def fp64_ratio(doc: dict[str, Any], gpu: GpuModel | None) -> dict[str, Any]:
    """mc-fp64: the counted FP64 rate of one GPU against that GPU's FP64 peak in the catalog
    (catalog/gpus.yaml, NVIDIA datasheets; the vector peak, not the FP64 tensor-core one: the kernel
    is element-wise). No ratio for a CPU run or a GPU the catalog gives no FP64 peak."""
    counted = float(doc["result"]["counted_fp64_gflops"])
    kind = ((doc.get("provenance") or {}).get("device") or {}).get("kind")
    if kind != "cuda":
        return {"counted_gflops": counted, "peak_tflops": None, "ratio": None, "why": "CPU run: no GPU peak to compare"}
    if gpu is None or gpu.fp64_tflops is None:
        name = gpu.name if gpu else "this GPU"
        return {"counted_gflops": counted, "peak_tflops": None, "ratio": None, "why": f"the catalog has no FP64 peak for {name}"}
    return {"counted_gflops": counted, "peak_tflops": gpu.fp64_tflops, "ratio": counted / (gpu.fp64_tflops * 1000),
            "why": f"catalog gpus.yaml {gpu.name} fp64_tflops"}


def cost_line(wc: WorkloadCost) -> str:
    """One line for the terminal: the unit's time and its cost at the stack's option and on-demand."""
    at = wc.usd_at_stack_option()
    own = (f"{_usd(at)} at {wc.purchase_option}" if wc.stack_option is not None
           else f"unknown at {wc.purchase_option} (its price is not in the catalog)")
    others = ", ".join(f"{OPTION_LABELS[o]} {_usd(v)}" for o, v in wc.usd_per_unit.items() if o != wc.stack_option)
    return f"cost of {wc.unit}: {own} ({_duration(wc.seconds_per_unit)}); {others}"


def _usd(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"${value:,.2f}" if value >= 0.1 else f"${value:.4f}"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"
