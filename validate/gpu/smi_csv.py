"""Parser for `nvidia-smi --query-gpu=... --format=csv` output, keyed by the header.

We keep the header (no `noheader`) on purpose: it names every column and its unit
(`memory.total [MiB]`), so a driver that drops, renames or reorders a field is caught as a
layout error instead of shifting values into the wrong column (validation-anchors.md §2.4:
"The output of NVSMI is not guaranteed to be backwards compatible").
`[N/A]`, `N/A` and `[Not Supported]` become None, never 0 (§7.3).
"""

from __future__ import annotations

import re

from gpuforge.validate.checks import ParseError

_UNAVAILABLE = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", ""}
# Field names are mostly lower case, but not all: pci.baseClass, fabric.cliqueId,
# vgpu_driver_capability.heterogenous_multivGPU (driver 590, fixtures/smi_csv_h100_590_exporter_capture.txt).
_HEADER_UNIT = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)(?: \[(?P<unit>[^\]]+)\])?$")


def parse_query_csv(stdout: str, required: tuple[str, ...] = ()) -> list[dict[str, str | None]]:
    """Rows as {field: value or None}; units named in the header are stripped from the values.

    Raises ParseError when there is no header, a row has the wrong number of columns, or a
    `required` field is missing from the header.
    """
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise ParseError("no output")
    fields: list[str] = []
    units: list[str | None] = []
    for col in (c.strip() for c in lines[0].split(",")):
        m = _HEADER_UNIT.match(col)
        if not m:
            raise ParseError(f"first line is not a --query-gpu header: {lines[0][:80]!r}")
        fields.append(m["name"])
        units.append(m["unit"])
    missing = [f for f in required if f not in fields]
    if missing:
        raise ParseError(f"header lacks {missing} (got {fields})")
    rows = []
    for n, line in enumerate(lines[1:], start=2):
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            raise ParseError(f"line {n} has {len(cells)} columns, header has {len(fields)}: {line[:80]!r}")
        row: dict[str, str | None] = {}
        for field, unit, cell in zip(fields, units, cells, strict=True):
            row[field] = _value(cell, unit)
        rows.append(row)
    return rows


# --- `--format=csv,noheader`: no layout, so only cells whose shape names them are read ---------
# Published captures are often noheader (akash-network/provider-configs#81/#91/#95,
# enkore/i3pystatus#776: tests/validate/corpus/smi_csv/). Without the header the layout is
# unknown, so a cell is only given a meaning its shape proves: a GPU name, a GPU/MIG UUID or a PCI
# bus id. Every other cell must still look like a --query-gpu value (number with an optional unit,
# hex, [N/A], P-state, Enabled/Disabled, a timestamp, a version) or the output is not CSV rows.
# a product name ("NVIDIA H100 80GB HBM3", "Tesla P100-PCIE-16GB", "Quadro RTX 6000"), never a
# sentence such as "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
_NAME = re.compile(r"^(?:NVIDIA|Tesla|Quadro|GeForce|TITAN|GRID) [A-Za-z0-9][A-Za-z0-9 /+()-]{0,60}$")
_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f-]{7,}$")
_BUS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_VALUE = re.compile(
    r"^(?:-?\d+(?:\.\d+)*(?: ?(?:MiB|GiB|KiB|W|MHz|%|C|us|ms))?"  # numbers, versions, units
    r"|0x[0-9A-Fa-f]+|P\d{1,2}|Enabled|Disabled|Default|Exclusive_Process|Prohibited|Active|Not Active"
    r"|\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)$"
)
_TIMESTAMP = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}")


def parse_headerless_rows(stdout: str) -> list[dict[str, str | None]]:
    """Rows of a noheader --query-gpu output: {"name"/"uuid"/"pci.bus_id": value} per row.

    Only columns whose every cell has the shape of a GPU name, UUID or bus id are read; the rest
    stay unknown (a MiB figure could be total, used or free). Raises ParseError unless every line
    is a row of such cells with the same column count and at least one identity column exists
    or every line has two or more cells (so "No devices were found" or a driver error is never a
    GPU row).
    """
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise ParseError("no output")
    table = [[c.strip() for c in ln.split(",")] for ln in lines]
    width = len(table[0])
    for n, cells in enumerate(table, start=1):
        if len(cells) != width:
            raise ParseError(f"line {n} has {len(cells)} columns, line 1 has {width}: {lines[n - 1][:80]!r}")
        for cell in cells:
            if not (cell in _UNAVAILABLE or _NAME.match(cell) or _UUID.match(cell) or _BUS.match(cell)
                    or _VALUE.match(cell)):  # fmt: skip
                raise ParseError(f"line {n} is not a --query-gpu row (no header, {cell!r}): {lines[n - 1][:80]!r}")
    kinds: dict[str, int] = {}
    for field, pattern in (("name", _NAME), ("uuid", _UUID), ("pci.bus_id", _BUS)):
        col = next((i for i in range(width) if all(pattern.match(row[i]) for row in table)), None)
        if col is not None:
            kinds[field] = col
    if not kinds and width < 2:
        raise ParseError(f"no header and no cell that names a GPU: {lines[0][:80]!r}")
    stamps = {i for i in range(width) if all(_TIMESTAMP.match(row[i]) for row in table)}
    if stamps and not ({"uuid", "pci.bus_id"} & kinds.keys()):
        raise ParseError("samples over time (timestamp column) without a GPU UUID or bus id: GPU count unknown")
    return [{field: row[col] for field, col in kinds.items()} for row in table]


def _value(cell: str, unit: str | None) -> str | None:
    if cell in _UNAVAILABLE:
        return None
    if unit and unit != "%" and cell.endswith(f" {unit}"):
        return cell[: -len(unit) - 1].strip()
    if unit == "%" and cell.endswith(" %"):
        return cell[:-2].strip()
    return cell


def as_float(value: str | None) -> float | None:
    """A number, or None for an unavailable value; ParseError for anything else."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise ParseError(f"not a number: {value!r}") from None
