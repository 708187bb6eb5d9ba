"""Right/total per tool on the parser corpus (tests/validate/corpus): each real capture through
its parser and evaluator, against the verdict its manifest entry states.

    .venv/bin/python bench/parser_corpus.py [--wrong]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.validate.corpus.runner import judge, load_manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wrong", action="store_true", help="list the files judged wrongly")
    args = ap.parse_args(argv)
    per_tool: dict[str, list[bool]] = defaultdict(list)
    unknown: dict[str, int] = defaultdict(int)
    wrong = []
    for entry in load_manifest():
        out = judge(entry)
        per_tool[entry.tool].append(out.right)
        unknown[entry.tool] += any(v == "unknown" for k, v in out.got.items() if k in entry.expect)
        if not out.right:
            wrong.append((entry.file, entry.expect, {k: out.got.get(k) for k in entry.expect}))
    print(f"{'tool':<10} {'right':>5} {'total':>5} {'unknown':>7}")
    for tool in sorted(per_tool):
        results = per_tool[tool]
        print(f"{tool:<10} {sum(results):>5} {len(results):>5} {unknown[tool]:>7}")
    total = [r for rs in per_tool.values() for r in rs]
    print(f"{'all':<10} {sum(total):>5} {len(total):>5} {sum(unknown.values()):>7}")
    if args.wrong:
        for file, want, got in wrong:
            print(f"WRONG {file}: want {want}, got {got}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
