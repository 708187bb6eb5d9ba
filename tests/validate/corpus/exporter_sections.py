"""Cut one command's output out of an nvidia_gpu_exporter capture file, byte for byte.

Used to make the corpus files that SOURCES.md attributes to utkuozdemir/nvidia_gpu_exporter
(internal/captures/*.txt). Its collector (internal/captures/collect.sh, `section()`) writes,
per command: "\\n\\n", a 80-'#' rule, "# <label>", "# $ nvidia-smi <args>", the rule again, then
the command's combined stdout+stderr exactly as printed (redirected to the file, so not a tty),
then "\\n# (exit code: N)\\n" when the command failed. This cuts between those markers and
returns the output unchanged (ANSI codes, tabs, trailing spaces kept) with the exit code.

    python -m tests.validate.corpus.exporter_sections CAPTURE.txt "capabilities :: topo -m" OUT
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

RULE = b"#" * 80 + b"\n"
_RC = re.compile(rb"\n# \(exit code: (\d+)\)\n$")


def sections(data: bytes) -> dict[str, tuple[bytes, int]]:
    out: dict[str, tuple[bytes, int]] = {}
    parts = data.split(b"\n\n" + RULE)
    for part in parts[1:]:
        head, sep, body = part.partition(RULE)
        if not sep:
            continue
        label = head.split(b"\n", 1)[0].removeprefix(b"# ").decode()
        rc = 0
        if m := _RC.search(body):
            rc = int(m.group(1))
            body = body[: m.start()] + b"\n"
        out[label] = (body, rc)
    return out


def main(argv: list[str]) -> int:
    capture, label, dest = argv
    body, rc = sections(Path(capture).read_bytes())[label]
    Path(dest).write_bytes(body)
    print(f"{dest}: {len(body)} bytes, exit code {rc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
