"""The `gpuforge` command line: one entry point, a subcommand per job (DESIGN.md).

Subcommands live in `gpuforge/commands/<name>.py` and are imported only when invoked, so
`gpuforge validate` never imports Pulumi and `--help` stays fast.
Exit codes: 0 all good, 1 checks failed, 2 bad input. Errors print as `error: ...` on stderr
with no traceback unless `--debug` is given.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import click

from common.errors import EXIT_BAD_INPUT, GpuforgeError
from gpuforge import __version__

# name -> (module, one-line help). The module exposes a click command called `command`.
COMMANDS: dict[str, tuple[str, str]] = {
    "preview": ("gpuforge.commands.preview", "Offline preview of a stack: resources, exports and cost."),
    "catalog": ("gpuforge.commands.catalog", "The instance catalog: list, show, suggest, refresh."),
    "bootstrap": ("gpuforge.commands.bootstrap", "Render node bootstrap (EC2 user data) for a stack."),
    "preflight": ("gpuforge.commands.preflight", "Check against the AWS APIs that a stack can be deployed."),
    "validate": ("gpuforge.commands.validate", "Prove a running cluster over SSH: GPUs, links, NCCL."),
    "stack": ("gpuforge.commands.stack", "Create team stacks from the reference profiles."),
    "cost": ("gpuforge.commands.cost", "Hourly and monthly cost of a stack from the catalog."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, (mod, _) in COMMANDS.items() if importlib.util.find_spec(mod) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or importlib.util.find_spec(entry[0]) is None:
            return None
        command: click.Command = importlib.import_module(entry[0]).command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Show the one-line help without importing every subcommand.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="gpuforge")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """gpuforge: GPU clusters on AWS as code, proven before anyone trains on them.

    \b
    Typical flow:
      gpuforge catalog suggest --profile cv-training   # which AWS shape fits
      gpuforge preview --stack cv-training             # what `pulumi up` would create, offline
      gpuforge preflight --stack cv-training           # can it deploy: quotas, AZ, capacity
      pulumi up --stack cv-training                    # deploy (Pulumi CLI + AWS credentials)
      gpuforge validate --inventory inventory.json     # prove the running cluster
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def main(argv: list[str] | None = None) -> Any:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        return cli.main(args=argv, prog_name="gpuforge", standalone_mode=True)
    except GpuforgeError as exc:
        if debug:
            raise
        click.echo(exc.render(), err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        sys.exit(130)
    except OSError as exc:  # unreadable file, full disk: a clear line, not a traceback
        if debug:
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
