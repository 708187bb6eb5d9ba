"""The network acceptance figures from defaults.yaml, loaded once, each with its source."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

_FILE = Path(__file__).with_name("defaults.yaml")


@dataclass(frozen=True)
class Figure:
    value: float
    source: str


@cache
def figures() -> dict[str, Figure]:
    doc = yaml.safe_load(_FILE.read_text())
    return {k: Figure(float(v["value"]), str(v["source"]).strip()) for k, v in doc.items()}


def figure(name: str) -> Figure:
    return figures()[name]
