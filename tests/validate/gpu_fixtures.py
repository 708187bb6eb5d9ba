"""Real captured fixtures (see fixtures/SOURCES.md) and the broken variants made from them."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def truncate(text: str, keep_lines: int) -> str:
    """The first `keep_lines` lines, as when a command is killed mid-output."""
    return "".join(text.splitlines(keepends=True)[:keep_lines])


def drop_csv_column(text: str, index: int) -> str:
    """A --query-gpu CSV with one column removed from the data rows only (a layout mismatch)."""
    lines = text.splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(", ")
        out.append(", ".join(cells[:index] + cells[index + 1 :]))
    return "\n".join(out) + "\n"


def with_smi_header(body: str, bus_ids: list[str]) -> str:
    """`nvidia-smi -q` text: one `GPU <bus id>` block per bus id, each with `body` under it.

    The captured excerpt (F10b) has no GPU line; this adds the line nvidia-smi prints above
    each GPU block (format as in every -q capture: `GPU 00000000:94:00.0`). Bus ids are ours.
    """
    head = f"Attached GPUs                             : {len(bus_ids)}\n"
    return head + "".join(f"GPU {b}\n{body}" for b in bus_ids)


# An 8-GPU --query-gpu answer is not in the captures (SOURCES.md). This one is assembled in F8's
# format (header with units, ", " separated) from field values that do appear in real output:
# the A100-SXM4-80GB name and UUID style (F5), driver 535.104.12 (F9), VBIOS 92.00.45.00.05 and
# 81920 MiB (A100 80GB nvidia-smi -q captures quoted in the research search).
INVENTORY_HEADER = (
    "index, name, uuid, serial, pci.bus_id, memory.total [MiB], driver_version, vbios_version, persistence_mode"
)


def a100_inventory(n: int = 8, **changes: dict[int, str]) -> str:
    rows = []
    for i in range(n):
        row = {
            "index": str(i),
            "name": "NVIDIA A100-SXM4-80GB",
            "uuid": f"GPU-370ec676-e407-3115-836a-8ebcb3c4f6{i:02d}",
            "serial": f"13246211144{i:02d}",
            "bus": f"00000000:{0x10 + 0x10 * i:02X}:1C.0",
            "mem": "81920 MiB",
            "driver": "535.104.12",
            "vbios": "92.00.45.00.05",
            "pm": "Enabled",
        }
        for key, per_gpu in changes.items():
            if i in per_gpu:
                row[key] = per_gpu[i]
        rows.append(", ".join(row.values()))
    return INVENTORY_HEADER + "\n" + "\n".join(rows) + "\n"
