"""One offline-preview recorder for tests that write stack configs on the fly (aws/, policy/).

It runs the real program (Pulumi.yaml + __main__.py copied into a scratch project) under the
offline engine, caching each recorded graph per (stack, config) for the session.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.preview import PreviewResult, run_preview

ROOT = Path(__file__).resolve().parents[2]


def preview_recorder(tmp_path_factory: pytest.TempPathFactory) -> Callable[[dict[str, Any], str], PreviewResult]:
    """A `run(config, stack)` that records the real program for a full `ns:key` config dict."""
    cache: dict[str, PreviewResult] = {}
    proj = tmp_path_factory.mktemp("proj")
    shutil.copy(ROOT / "Pulumi.yaml", proj / "Pulumi.yaml")
    shutil.copy(ROOT / "__main__.py", proj / "__main__.py")
    (proj / "stacks").mkdir()

    def run(config: dict[str, Any], stack: str) -> PreviewResult:
        key = yaml.safe_dump({"stack": stack, **config}, sort_keys=True)
        if key not in cache:
            (proj / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
            cache[key] = run_preview(proj, stack)
        return cache[key]

    return run
