"""Expectations for a node, built in one place from profile + catalog + validate/data/thresholds.yaml.

`build_expectations` is the only place numbers enter validate: the catalog (GPU count, model,
memory, interconnect, EFA, link speed, peaks), thresholds.yaml (NCCL figures per instance
type, ECC limits, Xid list, efficiency floors) and the inventory's own overrides, which win.
Every number carries its origin in `Expectations.sources`. A baseline saved from a healthy run
replaces the performance figures (`apply_baseline`).

Units: `nccl_busbw_gbps` is GB/s as nccl-tests prints it (the field name predates this module);
it is the **single-node** all-GPU figure. The two-node figure is `extra["nccl_inter_2node_busbw_gbps"]`.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpuforge.common.results import CheckResult, Level, atomic_write
from gpuforge.validate.checks import Expectations
from gpuforge.validate.system import ENA_EXPRESS_MTU

DATA_FILE = Path(__file__).resolve().parent / "data" / "thresholds.yaml"
BASELINE_SCHEMA = 1

# Figures a baseline may carry, and the Expectations key (field or extra) each replaces.
BASELINE_KEYS = (
    "nccl_busbw_gbps",
    "nccl_inter_2node_busbw_gbps",
    "compute_tflops",
    "memory_bandwidth_gbs",
    "topology_matrix",
    "driver_version",
    "vbios_version",
    "tcp_pair_gbps",
)
_FIELDS = {f.name for f in dataclasses.fields(Expectations)} - {"extra", "sources"}


class ThresholdsError(ValueError):
    """A profile, instance type, override or baseline file that cannot be used."""


@cache
def thresholds_data() -> dict[str, Any]:
    """The parsed thresholds.yaml (read on first use, never at import)."""
    doc = yaml.safe_load(DATA_FILE.read_text())
    if not isinstance(doc, dict):
        raise ThresholdsError(f"{DATA_FILE}: not a mapping")
    return doc


def _policy_defaults() -> dict[str, tuple[Any, str]]:
    """Policy values every check may need, keyed as in Expectations.extra, with their source."""
    d = thresholds_data()
    return {
        "gpu_memory_min_fraction": (d["gpu_memory"]["min_fraction"], d["gpu_memory"]["source"]),
        "ecc": ({k: v for k, v in d["ecc"].items() if k != "source"}, d["ecc"]["source"]),
        "throttle_benign": (list(d["throttle"]["benign_reasons"]), d["throttle"]["source"]),
        "persistence_level": (d["persistence"]["level_when_disabled"], d["persistence"]["source"]),
        "xid_fatal": (list(d["xid"]["fatal_codes"]), d["xid"]["source"]),
        "nccl_pass_fraction": (d["nccl"]["pass_fraction"], d["nccl"]["pass_fraction_source"]),
        "nccl_min_large_bytes": (d["nccl"]["min_large_message_bytes"], d["nccl"]["min_large_message_source"]),
        "nccl_small_latency_us": (d["nccl"]["small_message_latency_us"], d["nccl"]["small_message_latency_source"]),
        "nccl_small_max_bytes": (d["nccl"]["small_message_max_bytes"], d["nccl"]["small_message_max_source"]),
        "compute_min_fraction": (
            d["compute"]["min_fraction_of_peak"],
            d["compute"]["min_fraction_of_peak_source"],
        ),
        "compute_peer_min_fraction": (d["compute"]["peer_min_fraction"], d["compute"]["peer_min_fraction_source"]),
    }


def policy(expect: Expectations, key: str) -> Any:
    """`expect.extra[key]`, else the thresholds.yaml default, so hand-made Expectations still judge."""
    if key in expect.extra:
        return expect.extra[key]
    defaults = _policy_defaults()
    if key not in defaults:
        return None
    return defaults[key][0]


def build_expectations(
    profile: str | None, instance_type: str | None, overrides: dict[str, Any] | None = None
) -> Expectations:
    """Expectations for one node of `profile` (or of a bare `instance_type`), then `overrides`.

    The instance type defaults to the profile's shape. Overrides (from the inventory) use
    Expectations field names or extra keys and win over everything, with source "inventory".
    """
    from gpuforge.core.catalog import load_catalog  # imported here: keep `import validate` light
    from gpuforge.core.profiles import UnknownProfileError, load_profile

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def put(key: str, value: Any, source: str) -> None:
        values[key] = value
        sources[key] = source

    for key, (value, source) in _policy_defaults().items():
        put(key, value, f"thresholds.yaml: {source}")

    precision = None
    if profile is not None:
        try:
            prof = load_profile(profile)
        except UnknownProfileError as exc:
            raise ThresholdsError(f"unknown profile {profile!r}{exc.suggestion}") from None
        instance_type = instance_type or prof.shape.instance_type
        precision = prof.requirements.precision
        put("bootstrap_expected", True, f"profile {profile}: nodes are bootstrapped by gpuforge")
        put(
            "placement_group",
            "cluster",
            f"profile {profile}: a gpuforge stack puts every node in one cluster placement group (components/cluster.py)",
        )
        put("compute_precision", precision, f"profile {profile}: requirements.precision")

    if instance_type is not None:
        catalog = load_catalog()
        try:
            it = catalog.instance(instance_type)
        except KeyError as exc:
            raise ThresholdsError(str(exc.args[0])) from None
        gpu = catalog.gpu(it)
        src = f"catalog: {it.name}"
        put("gpus_per_node", it.gpu_count, src)
        put("gpu_model", it.gpu_model, src)
        put("gpu_memory_gib", it.gpu_memory_gib, src)
        put("interconnect", it.interconnect, src)
        put("efa_interfaces", it.efa_interfaces, src)
        put("link_gbps", it.network_gbps, src)
        put("tcp_card_baseline_gbps", it.card_baseline_gbps, f"{src}: card 0 baseline (describe_instance_types)")
        put("tcp_card_peak_gbps", it.card_peak_gbps, f"{src}: card 0 peak (describe_instance_types)")
        put("ena_express_supported", it.ena_express, f"{src}: EnaSrdSupported (describe_instance_types)")
        put("gpudirect_rdma", it.gpudirect_rdma, src)
        _put_gpu_facts(put, it.gpu_model, precision, gpu, src)
        _put_nccl(put, it.name)
    for key, value in (overrides or {}).items():
        put(key, value, "inventory")
    if values.get("ena_express") and values.get("ena_express_supported"):
        # The bootstrap sets MTU 8900 on ENA Express nodes (validate.system.ENA_EXPRESS_MTU); the
        # check and the path-MTU probe expect that, not more.
        if values.get("mtu") is None or int(values["mtu"]) > ENA_EXPRESS_MTU[1]:
            put("mtu", ENA_EXPRESS_MTU[1], "ENA Express: SRD carries packets of up to MTU 8900 (EC2 User Guide)")
    return _to_expectations(values, sources)


def _put_gpu_facts(put: Any, model: str, precision: str | None, gpu: Any, src: str) -> None:
    d = thresholds_data()
    names = d["gpu_names"]["models"].get(model)
    if names:
        put("gpu_name_patterns", list(names), f"thresholds.yaml gpu_names: {d['gpu_names']['source']}")
    link = d["nvlink"]["models"].get(model) or {}
    if link.get("links_per_gpu") is not None:
        put("nvlink_links_per_gpu", link["links_per_gpu"], f"thresholds.yaml nvlink: {d['nvlink']['source']}")
    if link.get("link_gbs") is not None:
        put("nvlink_link_gbs", link["link_gbs"], f"thresholds.yaml nvlink: {d['nvlink']['source']}")
    if gpu.memory_bandwidth_gbs is not None:
        put("memory_bandwidth_gbs", float(gpu.memory_bandwidth_gbs), f"{src}: gpus.yaml {model} (datasheet peak)")
    wanted = d["compute"]["precision_peak"].get(precision or "fp32")
    attrs = [wanted] if isinstance(wanted, str) else list(wanted or [])
    attr = next((a for a in attrs if getattr(gpu, a, None) is not None), None)
    peak = getattr(gpu, attr) if attr else None
    if peak is not None:
        put("compute_tflops", float(peak), f"{src}: gpus.yaml {model} {attr} (datasheet peak)")
        put("compute_peak_field", attr, f"thresholds.yaml compute.precision_peak[{precision or 'fp32'}]")
        by_model = d["compute"].get("min_fraction_by_model", {}).get(model) or {}
        if attr in by_model:
            why = f"thresholds.yaml compute.min_fraction_by_model {model}: {by_model['source']}"
            put("compute_min_fraction", float(by_model[attr]), why)


def _put_nccl(put: Any, instance_type: str) -> None:
    row = thresholds_data()["nccl"]["instance_types"].get(instance_type)
    if row is None:  # no published figure: the check reports info rather than invent one
        return
    if row.get("intra") is not None:
        put("nccl_busbw_gbps", float(row["intra"]), f"thresholds.yaml nccl {instance_type}: {row['intra_source']}")
    if row.get("inter_2node") is not None:
        put(
            "nccl_inter_2node_busbw_gbps",
            float(row["inter_2node"]),
            f"thresholds.yaml nccl {instance_type}: {row['inter_2node_source']}",
        )


def _to_expectations(values: dict[str, Any], sources: dict[str, str]) -> Expectations:
    fields = {k: v for k, v in values.items() if k in _FIELDS}
    extra = {k: v for k, v in values.items() if k not in _FIELDS}
    return Expectations(**fields, extra=extra, sources=dict(sources))


# --- baselines -------------------------------------------------------------------------------


def baseline_figures(results: list[CheckResult]) -> dict[str, Any]:
    """The figures of a healthy run worth keeping, from results whose check names carry them.

    Only `pass` results count: a baseline must never be captured from a failing measurement.
    """
    carried = {
        "nccl.busbw": "nccl_busbw_gbps",
        "nccl.busbw.inter": "nccl_inter_2node_busbw_gbps",
        "compute.matmul": "compute_tflops",
        "compute.membw": "memory_bandwidth_gbs",
        "gpu.topology": "topology_matrix",
        "gpu.cluster.driver": "driver_version",
        "gpu.cluster.vbios": "vbios_version",
        "network.localise": "tcp_pair_gbps",
    }
    figures: dict[str, list[Any]] = {}
    for r in results:
        key = carried.get(r.check)
        if key is None or r.level is not Level.PASS or r.observed is None:
            continue
        if key == "tcp_pair_gbps":  # the slowest healthy pair, per direction (localise.results)
            if not isinstance(r.observed, dict) or r.observed.get("min_gbps") is None:
                continue
            figures.setdefault(key, []).append(r.observed["min_gbps"])
            continue
        figures.setdefault(key, []).append(r.observed)
    out: dict[str, Any] = {}
    for key, seen in figures.items():
        if key in {"topology_matrix", "driver_version", "vbios_version"}:
            out[key] = seen[0]
        else:  # the slowest healthy node is the figure every node must reach again
            out[key] = min(float(v) for v in seen)
    return out


def save_baseline(path: Path, figures: dict[str, Any], *, profile: str | None, instance_type: str | None) -> None:
    unknown = set(figures) - set(BASELINE_KEYS)
    if unknown:
        raise ThresholdsError(f"baseline: unknown figure(s) {sorted(unknown)}; known: {list(BASELINE_KEYS)}")
    doc = {
        "schema": BASELINE_SCHEMA,
        "captured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "profile": profile,
        "instance_type": instance_type,
        "figures": figures,
    }
    atomic_write(Path(path), json.dumps(doc, indent=2) + "\n")


BASELINE_FILE_KEYS = ("schema", "captured_at", "profile", "instance_type", "figures")


def load_baseline(path: Path, flag: str = "--baseline") -> dict[str, Any]:
    """A baseline file, read by the one reader (common/inputfile.py: InputError on a bad file)."""
    from gpuforge.common.inputfile import BASELINE, read_document, refuse_unknown_keys

    path = Path(path)
    doc = read_document(path, BASELINE, flag)
    refuse_unknown_keys(doc, BASELINE_FILE_KEYS, f"{flag} {path}")
    if isinstance(doc.get("figures"), dict):
        refuse_unknown_keys(doc["figures"], BASELINE_KEYS, f"{flag} {path}", "figures.")
    if doc.get("schema") != BASELINE_SCHEMA or not isinstance(doc.get("figures"), dict):
        raise ThresholdsError(f"baseline {path}: not a gpuforge baseline (schema {BASELINE_SCHEMA} with 'figures')")
    unknown = set(doc["figures"]) - set(BASELINE_KEYS)
    if unknown:
        raise ThresholdsError(f"baseline {path}: unknown figure(s) {sorted(unknown)}")
    doc["path"] = str(path)
    return doc


def apply_baseline(expect: Expectations, baseline: dict[str, Any]) -> Expectations:
    """`expect` with the baseline's figures in place of the published/catalog ones."""
    src = f"baseline: {baseline.get('path', '?')} (captured {baseline.get('captured_at', '?')})"
    values: dict[str, Any] = {f: getattr(expect, f) for f in _FIELDS}
    values.update(expect.extra)
    sources = dict(expect.sources)
    for key, value in baseline["figures"].items():
        values[key] = value
        sources[key] = src
    if any(k in baseline["figures"] for k in ("compute_tflops", "memory_bandwidth_gbs")):
        # a measured baseline is what a healthy GPU reaches, not a datasheet peak: judge against it
        # at the NCCL tolerance rather than at the seed's 10-20% loss band
        values["compute_min_fraction"] = values.get("nccl_pass_fraction", policy(expect, "nccl_pass_fraction"))
        sources["compute_min_fraction"] = f"{src}; tolerance = nccl pass_fraction"
        values["compute_below_level"] = "error"  # below a measured healthy figure is a fault
        sources["compute_below_level"] = src
    return _to_expectations(values, sources)
