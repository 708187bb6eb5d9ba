"""The `gpuforge` command line: one entry point, a subcommand per job (DESIGN.md).

Subcommands live in `cli/commands/<name>.py` and are imported only when invoked, so
`gpuforge validate` never imports Pulumi and `--help` stays fast.
Exit codes: 0 all good, 1 checks failed, 2 bad input. Errors print as `error: ...` on stderr
with no traceback unless `--debug` is given.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from gpuforge import __version__
from gpuforge.commands.options import PROJECT_DIR_HELP
from gpuforge.common.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_PIPE_CLOSED, GpuforgeError

# name -> (module, one-line help). The module exposes a click command called `command`.
COMMANDS: dict[str, tuple[str, str]] = {
    "preview": ("gpuforge.commands.preview", "Offline preview of a stack: resources, exports and cost."),
    "catalog": ("gpuforge.commands.catalog", "The instance catalog: list, show, suggest, refresh."),
    "bootstrap": ("gpuforge.commands.bootstrap", "Render node bootstrap (EC2 user data) for a stack."),
    "preflight": ("gpuforge.commands.preflight", "Check against the AWS APIs that a stack can be deployed."),
    "validate": ("gpuforge.commands.validate", "Prove a running cluster over SSH: GPUs, links, NCCL."),
    "health-check": ("gpuforge.commands.health", "Slurm HealthCheckProgram: drain a failing node, resume it when healthy."),
    "stack": ("gpuforge.commands.stack", "List the project's stacks; create team stacks from the profiles."),
    "cost": ("gpuforge.commands.cost", "Hourly and monthly cost of a stack from the catalog."),
    "poc": ("gpuforge.commands.poc", "Run the stack's POC workload on a node: images/s, QPS or paths/s, and its cost."),
    "doctor": ("gpuforge.commands.doctor", "Check this machine: Python, Pulumi CLI, AWS, SSH; each with a fix."),
}


# The extras (pyproject.toml [project.optional-dependencies]) by the top-level modules they install.
# The base install (nodes, health check, validate) has none of them; a command that reaches one
# says which extra to install in one `error:` line instead of a traceback.
EXTRA_OF_MODULE = {
    "pulumi": "deploy", "pulumi_aws": "deploy", "pulumi_kubernetes": "deploy", "pulumi_random": "deploy",
    "pulumi_policy": "deploy", "jinja2": "deploy", "kubernetes_validate": "deploy", "jsonschema": "deploy",
    "boto3": "aws", "botocore": "aws", "kubernetes": "kubernetes",
}  # fmt: skip
# Commands that are the deploy side as a whole: whatever extra module they miss, [deploy] brings it
# (it includes aws and kubernetes), so the operator installs once, not module by module.
DEPLOY_COMMANDS = frozenset({"preview", "bootstrap", "preflight", "stack"})


class MissingExtraError(GpuforgeError):
    """A command needs a module that only an extra installs (the base install lacks it)."""

    def __init__(self, command: str | None, module: str) -> None:
        extra = "deploy" if command in DEPLOY_COMMANDS else EXTRA_OF_MODULE[module]
        what = f"gpuforge {command}" if command else "this command"
        super().__init__(f"{what} needs the {extra} extra ({module} is not installed): pip install 'gpuforge[{extra}]'")


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra module `exc` is about, or None when it is not one (a real bug: let it show)."""
    top = (exc.name or "").partition(".")[0]
    return top if top in EXTRA_OF_MODULE else None
class PipeClosed(Exception):
    """The reader of stdout (or stderr) went away: `gpuforge ... | head -1`.

    Not an OSError on purpose: click's own main turns an EPIPE OSError into exit 1, which in
    gpuforge means "checks failed" (issue 22)."""


class LazyGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise PipeClosed from None
            raise

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, (mod, _) in COMMANDS.items() if importlib.util.find_spec(mod) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or importlib.util.find_spec(entry[0]) is None:
            return None
        try:
            command: click.Command = importlib.import_module(entry[0]).command
        except ModuleNotFoundError as exc:
            if (module := missing_extra(exc)) is None:
                raise
            raise MissingExtraError(cmd_name, module) from exc
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Show the one-line help without importing every subcommand.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="gpuforge")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors (the exit code stays the same).")
@click.option("--project-dir", type=click.Path(file_okay=False, path_type=Path), default=None, help=PROJECT_DIR_HELP)
@click.pass_context
def cli(ctx: click.Context, debug: bool, project_dir: Path | None) -> None:
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
    ctx.obj["project_dir"] = project_dir


def main(argv: list[str] | None = None) -> Any:
    """The console script: every failure leaves as `error:` / `fix:` lines and an exit code.

    Click runs with standalone_mode=False so that its own usage errors, its `Aborted!` on
    Ctrl-C and raw OSErrors all pass through the one renderer below (issue 13 item 7).
    --debug adds the traceback but keeps the exit code: 1 means "checks failed", never a crash.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        rv = cli.main(args=args, prog_name="gpuforge", standalone_mode=False)
    except PipeClosed:
        _quiet_exit()
    except SystemExit:  # a command's own exit code (validate's 1): its output must still leave first
        _flush_stdout()
        raise
    except GpuforgeError as exc:
        _fail(exc.render(), exc.exit_code, debug)
    except click.UsageError as exc:
        _fail(render_usage_error(exc), EXIT_BAD_INPUT, debug)
    except click.ClickException as exc:  # BadParameter on a file, and the like
        _fail(f"error: {exc.format_message()}", EXIT_BAD_INPUT, debug)
    except (click.Abort, KeyboardInterrupt):
        # Ctrl-C: whatever was half-done has been cleaned up by the command's own handlers.
        click.echo("\nerror: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except ModuleNotFoundError as exc:  # a command reached for an extra at run time (lazy imports)
        if (module := missing_extra(exc)) is None:
            raise
        _fail(MissingExtraError(_command_of(args), module).render(), EXIT_BAD_INPUT, debug)
    except OSError as exc:  # unreadable file, full disk: a clear line, not a traceback
        if exc.errno == errno.EPIPE:
            _quiet_exit()
        _fail(humanise_os_error(exc), EXIT_BAD_INPUT, debug)
    _flush_stdout()
    sys.exit(rv if isinstance(rv, int) else 0)


def _command_of(args: list[str]) -> str | None:
    return next((a for a in args if a in COMMANDS), None)


def _flush_stdout() -> None:
    """What is still buffered goes now, while a closed pipe can be handled here rather than in
    the interpreter's flush at exit (which prints `Exception ignored ... BrokenPipeError`)."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        _quiet_exit()


def _quiet_exit() -> None:
    """The reader closed the pipe: exit 141 (128 + SIGPIPE, what `cat` or `grep` report under
    `set -o pipefail`) with no traceback and no message. stdout and stderr are pointed at
    /dev/null first, so the interpreter's own flush at exit has nothing left to fail on."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # a stream without a descriptor (a test's capture)
            pass
    os.close(devnull)
    sys.exit(EXIT_PIPE_CLOSED)


def _fail(text: str, code: int, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    click.echo(text, err=True)
    sys.exit(code)


def render_usage_error(exc: click.UsageError) -> str:
    """Click's usage errors in gpuforge's style: one `error:` line and a `fix:` line."""
    path = exc.ctx.command_path if exc.ctx is not None else "gpuforge"
    return f"error: {exc.format_message()}\n  fix: see `{path} --help`"


def humanise_os_error(exc: OSError) -> str:
    what = exc.filename if exc.filename is not None else ""
    reason = (exc.strerror or str(exc)).lower()
    hint = _OS_HINTS.get(exc.errno or 0, "check the path and try again")
    return f"error: {what}: {reason}\n  fix: {hint}" if what else f"error: {reason}\n  fix: {hint}"


_OS_HINTS = {
    errno.ENOTDIR: "a part of that path is a file, not a directory; choose another path",
    errno.EISDIR: "that path is a directory; give a file path",
    errno.EEXIST: "a file is in the way where a directory is needed; choose another path",
    errno.ENOENT: "check that the path exists",
    errno.EACCES: "check the file's permissions, or choose a path you may write",
    errno.EPERM: "check the file's permissions, or choose a path you may write",
    errno.ENOSPC: "free some disk space, or write somewhere else",
    errno.EROFS: "the file system is read-only; write somewhere else",
}


if __name__ == "__main__":
    main()
