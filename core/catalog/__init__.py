"""The instance catalog: facts and prices of AWS GPU instance types, as data.

Everything gpuforge knows about an instance type comes from the files next to this module
(see meta.yaml for their sources). Code never carries these numbers as literals.
"""

from __future__ import annotations

import csv
import difflib
import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from gpuforge.common import inputfile
from gpuforge.common.errors import InputError

CATALOG_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class GpuModel:
    name: str
    family: str
    memory_gb: float
    memory_bandwidth_gbs: float | None
    fp64_tflops: float | None
    fp32_tflops: float | None
    fp16_tensor_tflops: float | None
    mig: bool
    mig_profiles: tuple[str, ...]
    fp64_tensor_tflops: float | None = None
    nvlink: str | None = None


@dataclass(frozen=True)
class Offering:
    region: str
    on_demand_usd_per_hour: float | None
    spot_usd_per_hour: float | None
    az_ids: tuple[str, ...]


@dataclass(frozen=True)
class InstanceType:
    name: str
    family: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: float
    vcpus: int
    memory_gib: float
    network_gbps: float
    network_cards: int
    efa_interfaces: int
    nvme_count: int
    nvme_gb_each: int
    interconnect: str  # none | pcie | nvlink | nvswitch
    gpudirect_rdma: bool
    # The default network card (index 0), which carries the primary interface and so a TCP test
    # between two nodes' addresses: describe_instance_types NetworkInfo.NetworkCards[i].
    card_baseline_gbps: float
    card_peak_gbps: float
    ena_express: bool  # NetworkInfo.EnaSrdSupported
    offerings: dict[str, Offering] = field(default_factory=dict, compare=False, hash=False)
    # VCpuInfo.DefaultCores / DefaultThreadsPerCore (None where the source does not list the type);
    # EC2 publishes no socket count
    cores: int | None = None
    threads_per_core: int | None = None

    @property
    def efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def nvme_total_gb(self) -> int:
        return self.nvme_count * self.nvme_gb_each

    @property
    def nvswitch(self) -> bool:
        return self.interconnect == "nvswitch"

    def offering(self, region: str) -> Offering | None:
        return self.offerings.get(region)


@dataclass(frozen=True)
class Region:
    name: str
    az_ids: tuple[str, ...]
    s3express_az_ids: tuple[str, ...]


@dataclass(frozen=True)
class StoragePrices:
    usd_per_gb_month: dict[str, float]
    source: str


@dataclass(frozen=True)
class Catalog:
    instance_types: dict[str, InstanceType]
    gpus: dict[str, GpuModel]
    regions: dict[str, Region]
    storage: StoragePrices
    meta: dict[str, Any]

    def instance(self, name: str) -> InstanceType:
        try:
            return self.instance_types[name]
        except KeyError:
            raise KeyError(f"unknown instance type {name!r}{did_you_mean(name, self.instance_types)}") from None

    def gpu(self, instance: InstanceType) -> GpuModel:
        return self.gpus[instance.gpu_model]

    def region(self, name: str) -> Region:
        try:
            return self.regions[name]
        except KeyError:
            raise KeyError(f"region {name!r} is not in the catalog{did_you_mean(name, self.regions)}") from None


def did_you_mean(word: str, choices: Any) -> str:
    """' (did you mean 'x'?)' when a close match exists, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _opt_int(text: str) -> int | None:
    return int(text) if text.strip() else None


def _opt_float(text: str) -> float | None:
    return float(text) if text.strip() else None


def _rows(path: Path) -> list[dict[str, str]]:
    text = inputfile.read_text(path, inputfile.CATALOG_TABLE)
    return list(csv.DictReader(io.StringIO(text, newline="")))


# The top-level keys of each catalog YAML file; refresh.py writes the same.
CATALOG_FILE_KEYS = {
    "gpus.yaml": ("source", "gpus"),
    "regions.yaml": ("source", "regions"),
    "storage_prices.yaml": ("source", "usd_per_gb_month"),
    "meta.yaml": ("snapshot", "sources", "corrections", "refreshed"),
    "commitments.yaml": ("commitments", "hybrid"),
    "platform_prices.yaml": ("eks_control_plane", "instances", "nat_gateway", "interface_endpoint"),
}


def read_catalog_file(path: Path) -> dict[str, Any]:
    """One catalog YAML file by the one reader's rules, its top-level keys checked."""
    doc: dict[str, Any] = inputfile.read_document(path, inputfile.CATALOG)
    inputfile.refuse_unknown_keys(doc, CATALOG_FILE_KEYS[path.name], str(path))
    return doc


_doc = read_catalog_file


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """A missing column or a value of the wrong type in a catalog file: one error naming the file."""
    try:
        yield
    except KeyError as exc:
        raise InputError(f"{path}: missing {exc.args[0]!r}", "restore the file (git checkout) or add the field") from None
    except (ValueError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: {exc}", "restore the file (git checkout) or fix the value") from None


def _read_instance_types(path: Path) -> dict[str, InstanceType]:
    types: dict[str, InstanceType] = {}
    with _reading(path):
        for row in _rows(path):
            types[row["instance_type"]] = InstanceType(
                name=row["instance_type"],
                family=row["family"],
                gpu_model=row["gpu_model"],
                gpu_count=int(row["gpu_count"]),
                gpu_memory_gib=float(row["gpu_memory_gib"]),
                vcpus=int(row["vcpus"]),
                memory_gib=float(row["memory_gib"]),
                network_gbps=float(row["network_gbps"]),
                network_cards=int(row["network_cards"]),
                efa_interfaces=int(row["efa_interfaces"]),
                nvme_count=int(row["nvme_count"]),
                nvme_gb_each=int(row["nvme_gb_each"]),
                interconnect=row["interconnect"],
                gpudirect_rdma=row["gpudirect_rdma"] == "true",
                card_baseline_gbps=float(row["card_baseline_gbps"]),
                card_peak_gbps=float(row["card_peak_gbps"]),
                ena_express=row["ena_express"] == "true",
                cores=_opt_int(row.get("cores") or ""),
                threads_per_core=_opt_int(row.get("threads_per_core") or ""),
            )
    return types


def _read_offerings(path: Path, types: dict[str, InstanceType]) -> None:
    with _reading(path):
        for row in _rows(path):
            it = types.get(row["instance_type"])
            if it is None:  # offerings for a type we do not catalogue (e.g. p6) are skipped
                continue
            it.offerings[row["region"]] = Offering(
                region=row["region"],
                on_demand_usd_per_hour=_opt_float(row["on_demand_usd_per_hour"]),
                spot_usd_per_hour=_opt_float(row["spot_usd_per_hour"]),
                az_ids=tuple(a for a in row["az_ids"].split(";") if a),
            )


def load_catalog(directory: Path | None = None) -> Catalog:
    """Read the catalog files from `directory` (default: the shipped catalog)."""
    if directory is None:
        return _shipped_catalog()
    return _load(directory)


@cache
def _shipped_catalog() -> Catalog:
    return _load(CATALOG_DIR)


def _load(directory: Path) -> Catalog:
    types = _read_instance_types(directory / "instance_types.csv")
    _read_offerings(directory / "offerings.csv", types)
    with _reading(directory / "gpus.yaml"):
        gpus = _gpus(_doc(directory / "gpus.yaml"))
    with _reading(directory / "regions.yaml"):
        regions_doc = _doc(directory / "regions.yaml")
        regions = {
            name: Region(name=name, az_ids=tuple(r["az_ids"]), s3express_az_ids=tuple(r["s3express_az_ids"]))
            for name, r in regions_doc["regions"].items()
        }
    with _reading(directory / "storage_prices.yaml"):
        sp = _doc(directory / "storage_prices.yaml")
        storage = StoragePrices(
            usd_per_gb_month={k: float(v) for k, v in sp["usd_per_gb_month"].items()},
            source=sp["source"],
        )
    meta = _doc(directory / "meta.yaml")
    return Catalog(instance_types=types, gpus=gpus, regions=regions, storage=storage, meta=meta)


def _gpus(gpus_doc: dict[str, Any]) -> dict[str, GpuModel]:
    return {
        name: GpuModel(
            name=name,
            family=g["family"],
            memory_gb=float(g["memory_gb"]),
            memory_bandwidth_gbs=g.get("memory_bandwidth_gbs"),
            fp64_tflops=g.get("fp64_tflops"),
            fp32_tflops=g.get("fp32_tflops"),
            fp16_tensor_tflops=g.get("fp16_tensor_tflops"),
            fp64_tensor_tflops=g.get("fp64_tensor_tflops"),
            mig=bool(g["mig"]),
            mig_profiles=tuple(g.get("mig_profiles") or ()),
            nvlink=g.get("nvlink"),
        )
        for name, g in gpus_doc["gpus"].items()
    }
