"""NVIDIA's published ResNet-50 training and BERT-base inference figures, read out of the vendor's
own README tables (catalog/published/*.md, excerpts copied from the commits catalog/published.yaml
names). Every figure keeps its system, software and source URL: `catalog suggest` shows it
labelled "published", beside what was measured here, and never as a measurement of an EC2 shape.
Pure: files in, data out; no Pulumi.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpuforge.core.catalog import CATALOG_DIR

PUBLISHED_DIR = CATALOG_DIR / "published"
_HEADING = re.compile(r"^#{2,6}\s+(.*?)\s*$")
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(?:img/s)?\s*$")


class PublishedFormatError(ValueError):
    """A published table that does not read as expected (a changed README layout)."""


@dataclass(frozen=True)
class Published:
    workload: str
    gpu_model: str
    system: str  # the heading's system, e.g. "NVIDIA DGX A100 (8x A100 80GB)"
    per_gpu_count: dict[int, float]  # resnet50-train: GPUs in the run -> images/s of the run
    per_batch_qps: dict[int, float]  # bert-infer: batch size -> QPS on one GPU
    per_batch_p99_ms: dict[int, float]
    software: str
    url: str

    def best_qps(self) -> tuple[int, float] | None:
        if not self.per_batch_qps:
            return None
        bs = max(self.per_batch_qps, key=lambda b: self.per_batch_qps[b])
        return bs, self.per_batch_qps[bs]

    def images_per_s(self, gpus: int) -> tuple[float, str] | None:
        """images/s for a node of `gpus` GPUs: the published run of that size, else the 1-GPU figure
        times the count (said so)."""
        if gpus in self.per_gpu_count:
            return self.per_gpu_count[gpus], f"published {gpus}-GPU run"
        if 1 in self.per_gpu_count:
            return self.per_gpu_count[1] * gpus, f"published 1-GPU figure x {gpus} (linear, not published)"
        return None

    def label(self) -> str:
        return f"published: {self.system}, {self.software}"


Table = list[list[str]]


def sections(text: str) -> list[tuple[str, list[Table]]]:
    """Markdown text -> [(heading, [table, ...]), ...] in document order (a heading such as
    "BERT Base" repeats under each GPU), a table as rows of stripped cells, bold removed. A
    table belongs to the nearest heading above it."""
    out: list[tuple[str, list[Table]]] = [("", [])]
    table: Table | None = None
    for line in text.splitlines():
        m = _HEADING.match(line)
        if m:
            out.append((m.group(1), []))
            table = None
            continue
        if line.lstrip().startswith("|"):
            cells = [c.strip().replace("**", "").strip() for c in line.strip().strip("|").split("|")]
            if all(set(c) <= set(":- ") for c in cells):
                continue  # the |---|:--:| separator
            if table is None:
                table = []
                out[-1][1].append(table)
            table.append(cells)
        else:
            table = None
    return out


def _tables(text: str, heading: str) -> list[Table]:
    return next((tables for h, tables in sections(text) if h == heading), [])


def _number(cell: str, where: str) -> float:
    m = _NUMBER.match(cell)
    if not m:
        raise PublishedFormatError(f"{where}: {cell!r} is not a number")
    return float(m.group(1))


def resnet_training(text: str, heading: str) -> dict[int, float]:
    """{GPUs: mixed-precision img/s} from a DeepLearningExamples "Training performance" table."""
    tables = _tables(text, heading)
    if not tables:
        raise PublishedFormatError(f"no table under {heading!r}")
    head, *rows = tables[0]
    cols = [i for i, h in enumerate(head) if "mixed precision" in h.lower() and "speedup" not in h.lower()
            and "scaling" not in h.lower() and "time" not in h.lower()]  # fmt: skip
    if len(cols) != 1 or head[0].lower() != "gpus":
        raise PublishedFormatError(f"{heading!r}: no single mixed-precision throughput column in {head}")
    return {int(_number(r[0], heading)): _number(r[cols[0]], heading) for r in rows}


def bert_base_fp16(text: str, heading: str, seq_len: int = 128) -> tuple[dict[int, float], dict[int, float]]:
    """({batch: QPS}, {batch: p99 ms}) for BERT base at `seq_len`, FP16, from a TensorRT demoBERT
    table (two header rows: precision groups, then 95th / 99th / Average per group)."""
    found = sections(text)
    start = next((i for i, (h, _) in enumerate(found) if h == heading), None)
    if start is None:
        raise PublishedFormatError(f"no section {heading!r}")
    sub = next((t for h, t in found[start + 1:] if h.lower() == "bert base"), None)
    if not sub:
        raise PublishedFormatError(f"{heading!r}: no 'BERT base' table")
    groups, stats, *rows = sub[0]
    fp16 = next((i for i, g in enumerate(groups) if g.startswith("FP16")), None)
    if fp16 is None or stats[fp16 : fp16 + 3] != ["95th Percentile", "99th Percentile", "Average"]:
        raise PublishedFormatError(f"{heading!r}: FP16 columns not as expected: {groups} / {stats}")
    qps, p99 = {}, {}
    for r in rows:
        if int(_number(r[0], heading)) != seq_len:
            continue
        bs = int(_number(r[1], heading))
        avg = _number(r[fp16 + 2], heading)
        qps[bs] = bs / avg * 1000.0
        p99[bs] = _number(r[fp16 + 1], heading)
    if not qps:
        raise PublishedFormatError(f"{heading!r}: no rows at sequence length {seq_len}")
    return qps, p99


@cache
def load_published(directory: Path = PUBLISHED_DIR) -> dict[str, dict[str, Published]]:
    """{workload: {gpu_model: Published}} from published.yaml and the excerpts it names."""
    doc: dict[str, Any] = yaml.safe_load((directory.parent / "published.yaml").read_text())
    files = doc["files"]
    out: dict[str, dict[str, Published]] = {}
    for workload in ("resnet50-train", "bert-infer"):
        for gpu, ref in (doc.get(workload) or {}).items():
            meta = files[ref["file"]]
            text = (directory / ref["file"]).read_text()
            system = re.sub(r"^(Training performance|Inference [Pp]erformance):?\s*", "", ref["heading"])
            if workload == "resnet50-train":
                pub = Published(workload, gpu, system, resnet_training(text, ref["heading"]), {}, {},
                                meta["software"], meta["url"])
            else:
                qps, p99 = bert_base_fp16(text, ref["heading"])
                pub = Published(workload, gpu, system, {}, qps, p99, meta["software"], meta["url"])
            out.setdefault(workload, {})[gpu] = pub
    return out
