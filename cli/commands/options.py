"""Options shared by the subcommands, defined once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

PROJECT_DIR_HELP = "Directory holding Pulumi.yaml (default: the nearest one at or above the current directory)."


def find_project_dir(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` (default: cwd) holding Pulumi.yaml, as git
    finds its repository; the start itself when there is none (the command then says so)."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "Pulumi.yaml").is_file():
            return candidate
    return here


def project_dir_from_args(args: list[str]) -> Path | None:
    """The project directory a command line names (`--project-dir D` or `--project-dir=D`, before
    or after the subcommand), else the nearest one holding Pulumi.yaml; None when there is none.

    Read before click parses, because the project's own packages must be importable first.
    """
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--project-dir" and i + 1 < len(args):
            return Path(args[i + 1]).resolve()
        if arg.startswith("--project-dir="):
            return Path(arg.split("=", 1)[1]).resolve()
    found = find_project_dir()
    return found if (found / "Pulumi.yaml").is_file() else None


def _resolve(ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path:
    if value is not None:
        return Path(value).resolve()
    # `gpuforge --project-dir D preview ...`: the group stored it; a subcommand's own wins.
    root = ctx.find_root()
    given = (root.obj or {}).get("project_dir") if root is not ctx else None
    return Path(given).resolve() if given else find_project_dir()


def project_dir_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--project-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        callback=_resolve,
        help=PROJECT_DIR_HELP,
    )(fn)


# ---- shell completion (click's shell_complete; see README "Shell completion")


def _project_for_completion(ctx: click.Context) -> Path:
    given = ctx.params.get("project_dir") or (ctx.find_root().params or {}).get("project_dir")
    return Path(given).resolve() if given else find_project_dir()


def complete_stacks(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    """Stack names of the project (stacks/Pulumi.<stack>.yaml)."""
    from gpuforge.stackfile import stack_names

    try:
        names = stack_names(_project_for_completion(ctx))
    except Exception:  # noqa: BLE001 - completion must never print a traceback into the shell
        return []
    return [n for n in names if n.startswith(incomplete)]


def complete_profiles(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    from gpuforge.core.profiles import profile_names

    return [n for n in profile_names() if n.startswith(incomplete)]


def complete_instance_types(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    from gpuforge.core.catalog import load_catalog

    return [n for n in load_catalog().instance_types if n.startswith(incomplete)]


def complete_teams(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    directory = _project_for_completion(ctx) / "stacks" / "teams"
    return sorted(p.stem for p in directory.glob(f"{incomplete}*.yaml"))
