"""Options shared by the subcommands, defined once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def find_project_dir(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` (default: cwd) holding Pulumi.yaml, as git
    finds its repository; the start itself when there is none (the command then says so)."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "Pulumi.yaml").is_file():
            return candidate
    return here


def project_dir_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--project-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        callback=lambda _ctx, _param, value: Path(value).resolve() if value else find_project_dir(),
        help="Directory holding Pulumi.yaml (default: the nearest one at or above the current directory).",
    )(fn)
