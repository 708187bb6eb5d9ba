"""Small constructors for preflight results, so every check words `unknown` the same way."""

from __future__ import annotations

from typing import Any

from gpuforge.common.results import CheckResult, Level
from gpuforge.preflight.aws import Unavailable


def result(
    check: str, level: Level, observed: Any, expected: Any, message: str, *, targets: tuple[str, ...] = ()
) -> CheckResult:
    return CheckResult(check=check, level=level, targets=targets, observed=observed, expected=expected, message=message)


def unknown(check: str, why: Unavailable, expected: Any, targets: tuple[str, ...] = ()) -> CheckResult:
    hint = {
        "forbidden": f"; allow {why.api} for these credentials to check this",
        "not-served": "; the endpoint (an emulator?) has no such API",
        "throttled": "; retry later",
    }.get(why.kind, "")
    return result(check, Level.UNKNOWN, None, expected, f"{why.describe()}{hint}", targets=targets)
