"""Rank a profile's catalog shapes by what its workload costs on them (issue 23).

For every shape `resolve()` offers (type x nodes), the workload's throughput comes from a
measurement (a `gpuforge poc` result, or the workload script's own output, on that instance
type, on a GPU, at full size) or, where nobody here measured that type, from NVIDIA's published
figure for its GPU (components/published.py), labelled "published" with the system it was
measured on. Shapes are ranked by the cost of one unit (an epoch, 1M inferences, 1e9 paths) at
on-demand prices; a shape with neither figure is listed, unranked. CPU runs and --quick smoke
runs are shown as such and never ranked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpuforge.core.catalog import Catalog, load_catalog
from gpuforge.core.costplan import shape_cost
from gpuforge.core.poccost import Throughput, WorkloadCost, workload_cost
from gpuforge.core.profiles import Profile
from gpuforge.core.published import load_published
from gpuforge.core.resolver import Candidate, resolve

PROFILE_WORKLOAD = {"cv-training": "resnet50-train", "nlp-inference": "bert-infer", "risk-sim": "mc-fp64"}
FIGURE_UNITS = {"resnet50-train": "images/s per node", "bert-infer": "QPS per GPU", "mc-fp64": "paths/s per GPU"}


@dataclass
class ShapeFigure:
    candidate: Candidate
    label: str | None  # measured | published | None (no figure)
    figure: float | None  # in FIGURE_UNITS[workload]
    basis: str = ""  # how the figure was taken: "published 8-GPU run", "measured, 8 ranks", ...
    system: str = ""  # what it was measured on
    source: str = ""  # URL or result file
    cost: WorkloadCost | None = None

    def to_dict(self) -> dict[str, Any]:
        c = self.candidate
        return {"shape": c.label, "instance_type": c.instance_type, "node_count": c.node_count, "gpu_model": c.gpu_model,
                "gpus": c.gpus_total, "fit": c.fit, "label": self.label, "figure": None if self.figure is None else
                round(self.figure, 3), "basis": self.basis, "system": self.system, "source": self.source,
                "cost": None if self.cost is None else self.cost.to_dict()}  # fmt: skip


@dataclass
class Ranking:
    profile: str
    workload: str
    region: str
    ranked: list[ShapeFigure] = field(default_factory=list)
    unranked: list[ShapeFigure] = field(default_factory=list)  # no figure, or no price
    set_aside: list[tuple[str, str]] = field(default_factory=list)  # (result file, why it is not ranked)


def result_label(doc: dict[str, Any]) -> str:
    """measured | measured-cpu | quick, for `gpuforge poc` files and bare script outputs alike."""
    device = ((doc.get("provenance") or {}).get("device") or {}).get("kind")
    if device != "cuda":
        return "measured-cpu"
    if (doc.get("run") or {}).get("quick") or doc.get("label") == "quick":
        return "quick"
    return "measured"


def _measured_figure(doc: dict[str, Any], gpu_count: int) -> tuple[float, str]:
    r = doc["result"]
    if doc["workload"] == "resnet50-train":
        ranks = int(r.get("ranks", 1))
        if ranks == gpu_count:
            return float(r["images_per_s"]), f"measured on all {ranks} GPU(s) of the node"
        return float(r["images_per_s_per_rank"]) * gpu_count, f"measured on {ranks} GPU(s), x {gpu_count} (linear)"
    key = "best_qps" if doc["workload"] == "bert-infer" else "paths_per_s"
    return float(r[key]), "measured on one GPU"


def rank(profile: Profile, region: str, results: list[dict[str, Any]], catalog: Catalog | None = None) -> Ranking:
    catalog = catalog or load_catalog()
    workload = PROFILE_WORKLOAD.get(profile.name, "")
    out = Ranking(profile.name, workload, region)
    measured: dict[str, dict[str, Any]] = {}
    for doc in results:
        where = str(doc.get("_file", "?"))
        itype = (doc.get("provenance") or {}).get("instance_type")
        label = result_label(doc)
        if doc.get("workload") != workload:
            out.set_aside.append((where, f"workload {doc.get('workload')} (this profile's is {workload})"))
        elif doc.get("status") != "ok":
            out.set_aside.append((where, f"status {doc.get('status')}: {doc.get('reason')}"))
        elif label != "measured":
            out.set_aside.append((where, f"{label} run on {itype}: shown, never ranked"))
        elif itype not in catalog.instance_types:
            out.set_aside.append((where, f"instance type {itype!r} is not in the catalog: no shape to rank it as"))
        else:  # the latest measurement of a type wins
            prev = measured.get(itype)
            if prev is None or str(doc["provenance"].get("date")) >= str(prev["provenance"].get("date")):
                measured[itype] = doc
    published = load_published().get(workload, {})
    for c in resolve(profile.requirements, region, catalog):
        it = catalog.instance_types[c.instance_type]
        sf = ShapeFigure(c, None, None)
        got_doc = measured.get(c.instance_type)
        if got_doc is not None:
            fig, basis = _measured_figure(got_doc, it.gpu_count)
            prov = got_doc["provenance"]
            dev = prov["device"]
            sf = ShapeFigure(c, "measured", fig, basis, f"{dev.get('name')}, driver {dev.get('driver')}, "
                             f"torch {prov.get('torch')}, {prov.get('date')}", str(got_doc.get("_file", "")))
        elif (pub := published.get(c.gpu_model)) is not None:
            if workload == "resnet50-train":
                got = pub.images_per_s(it.gpu_count)
                if got is not None:
                    sf = ShapeFigure(c, "published", got[0], got[1], pub.system + "; " + pub.software, pub.url)
            else:
                best = pub.best_qps()
                if best is not None:
                    sf = ShapeFigure(c, "published", best[1], f"BERT-base seq 128 FP16, best at batch {best[0]}",
                                     pub.system + "; " + pub.software, pub.url)
        if sf.figure is not None:
            sc = shape_cost(profile, it, region, c.node_count)
            sf.cost = workload_cost(Throughput(workload, sf.figure, "node" if workload == "resnet50-train" else "gpu"),
                                    sc, "on-demand")
        (out.ranked if sf.cost is not None and sf.cost.usd_per_unit["on_demand"] is not None else out.unranked).append(sf)
    out.ranked.sort(key=lambda s: (s.cost.usd_per_unit["on_demand"] if s.cost else math.inf, s.candidate.label))
    return out
