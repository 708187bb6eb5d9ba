"""`gpuforge preflight`: can this stack deploy, and in which AZ ID (DESIGN.md exit codes)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gpuforge.errors import EXIT_CHECKS_FAILED


@click.command(name="preflight")
@click.option("--stack", required=True, help="Stack name (stacks/Pulumi.<stack>.yaml).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--junit", "junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@click.option("--pin-az", is_flag=True, help="Write the chosen AZ ID into the stack file (gpuforge:azId).")
@click.option("--probe-capacity", is_flag=True,
              help="Create and at once cancel a targeted capacity reservation to prove capacity (billed briefly).")
@click.option("--strict", is_flag=True, help="Fail (exit 1) on unknown results too, not only on errors.")
@click.option("--project-dir", type=click.Path(file_okay=False, exists=True, path_type=Path), default=Path("."),
              show_default=True, help="Directory with Pulumi.yaml.")
def command(
    stack: str, fmt: str, junit: Path | None, pin_az: bool, probe_capacity: bool, strict: bool, project_dir: Path
) -> None:
    """Check quotas, offerings, capacity, storage and referenced resources; rank AZ IDs."""
    from gpuforge.preflight.runner import run_preflight  # imported here: boto3 loads only when run

    report = run_preflight(project_dir, stack, pin_az=pin_az, probe_capacity=probe_capacity)
    if junit is not None:
        report.write_junit(junit)
    if fmt == "json":
        click.echo(report.to_json())
    else:
        from rich.console import Console

        az = report.context["az"]
        Console().print(report.render_table(title=f"preflight {stack} ({report.context['region']})"))
        click.echo(f"AZ: {az['why']}" + (" [pinned]" if az["pinned"] else ""))
    # Unknowns do not block by default: a missing permission is not a missing capacity.
    sys.exit(EXIT_CHECKS_FAILED if report.failed(unknown_fails=strict) else 0)
