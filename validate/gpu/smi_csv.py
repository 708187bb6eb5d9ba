"""Parser for `nvidia-smi --query-gpu=... --format=csv` output, keyed by the header.

We keep the header (no `noheader`) on purpose: it names every column and its unit
(`memory.total [MiB]`), so a driver that drops, renames or reorders a field is caught as a
layout error instead of shifting values into the wrong column (validation-anchors.md §2.4:
"The output of NVSMI is not guaranteed to be backwards compatible").
`[N/A]`, `N/A` and `[Not Supported]` become None, never 0 (§7.3).
"""

from __future__ import annotations

import re

from validate.checks import ParseError

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
