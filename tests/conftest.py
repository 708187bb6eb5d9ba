"""Options for the whole suite. Registered here, at the root, so they work however pytest is
started (`pytest`, `pytest tests/bootstrap`, `make test`)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/bootstrap/golden from the current templates (review the diff before committing)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Support lifecycles (EKS versions, core/kubernetes/settings.py `today`) are judged on
    one fixed day in every test, so results do not change as the calendar moves: the build date."""
    import os

    os.environ.setdefault("GPUFORGE_TODAY", "2026-12-04")
