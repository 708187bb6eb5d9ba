"""`gpuforge preflight`: can this stack deploy, and in which AZ ID (DESIGN.md exit codes)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from common.errors import EXIT_CHECKS_FAILED
from gpuforge.commands.options import project_dir_option


@click.command(name="preflight")
@click.option("--stack", required=True, help="Stack name (stacks/Pulumi.<stack>.yaml).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--junit", "junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@click.option("--pin-az", is_flag=True, help="Write the chosen AZ ID into the stack file (gpuforge:azId).")
@click.option("--probe-capacity", is_flag=True,
              help="Create and at once cancel a targeted capacity reservation to prove capacity (billed briefly).")
@click.option("--strict", is_flag=True, help="Fail (exit 1) on unknown results too, not only on errors.")
@project_dir_option
def command(
    stack: str, fmt: str, junit: Path | None, pin_az: bool, probe_capacity: bool, strict: bool, project_dir: Path
) -> None:
    """Prove a stack can deploy before `pulumi up`, and pick the AZ ID where it fits.

    Uses your normal AWS credentials and region (AWS_PROFILE, AWS_REGION; AWS_ENDPOINT_URL for
    emulators). Checks the account, the instance type's offerings per AZ ID and its facts
    against the catalog, vCPU quotas (on-demand or spot) with headroom, capacity reservations,
    S3 Express per AZ ID, the AMI, network and key pair the stack names, and spot prices for
    spot stacks; then ranks the region's AZ IDs and says why. Calls the account may not make,
    or that the endpoint does not serve, are `unknown` with the reason.

    \b
    Exit: 0 deployable, 1 something blocks it (or an unknown, with --strict), 2 bad input.
    \b
    Examples:
      gpuforge preflight --stack cv-training
      gpuforge preflight --stack risk-sim --format json --junit preflight.xml
      gpuforge preflight --stack cv-training --pin-az   # write the chosen AZ ID to the stack file
    """
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
