"""Stack config dicts for tests: a valid base, with overrides."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def base_config(**over: object) -> dict:
    cfg: dict = {
        "aws:region": "us-east-1",
        "gpuforge:profile": "cv-training",
        "gpuforge:azId": "use1-az4",
        "gpuforge:sshCidrs": ["10.0.0.0/8"],
        # The guardrail policies (policy/) want an owner, a team and a budget on every stack.
        "gpuforge:team": "platform",
        "gpuforge:owner": "platform-team",
        "gpuforge:budgetUsd": 25000,
    }
    return with_overrides(cfg, over)


def with_overrides(cfg: dict, over: dict) -> dict:
    """`cfg` with `over` applied: bare keys are `gpuforge:` keys, None removes a key."""
    cfg = dict(cfg)
    for key, value in over.items():
        full = key if ":" in key else f"gpuforge:{key}"
        if value is None:
            cfg.pop(full, None)
        else:
            cfg[full] = value
    return cfg
