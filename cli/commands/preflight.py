"""`gpuforge preflight`: can this stack deploy, and in which AZ ID (DESIGN.md exit codes)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gpuforge.commands.options import complete_stacks, project_dir_option
from gpuforge.common.errors import EXIT_CHECKS_FAILED
from gpuforge.common.table import emit, format_option
from gpuforge.stackfile import stack_name


@click.command(name="preflight")
@click.option("--stack", required=True, shell_complete=complete_stacks,
              help="Stack name (stacks/Pulumi.<stack>.yaml), or that file's path.")
@format_option
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

    Every AWS call is bounded (5 s connect, 10 s read, 2 attempts unless AWS_MAX_ATTEMPTS) and
    every check by 30 s in all; an endpoint that does not answer is asked once.

    \b
    Exit: 0 deployable, 1 something blocks it or the account, offerings or quota could not be
    established (any unknown, with --strict), 2 bad input, 130 interrupted.
    \b
    Examples:
      gpuforge preflight --stack cv-training
      gpuforge preflight --stack risk-sim --format json --junit preflight.xml
      gpuforge preflight --stack cv-training --pin-az   # write the chosen AZ ID to the stack file
    """
    from gpuforge.preflight.runner import run_preflight  # imported here: boto3 loads only when run

    stack = stack_name(project_dir, stack)
    if junit is not None:  # before the AWS calls: an unwritable path must not fail a finished run
        from gpuforge.common.inputfile import check_output_file

        check_output_file(junit, "--junit")
    # Progress on stderr, one line per step, so a slow endpoint is visible and stdout stays the report.
    report = run_preflight(project_dir, stack, pin_az=pin_az, probe_capacity=probe_capacity,
                           progress=lambda line: click.echo(line, err=True))
    if junit is not None:
        report.write_junit(junit)
    if fmt == "json":
        click.echo(report.to_json())
    else:
        az = report.context["az"]
        emit(report.rows(title=f"preflight {stack} ({report.context['region']})"), fmt)
        line = f"AZ: {az['why']}" + (" [pinned]" if az["pinned"] else "")
        click.echo(line if fmt == "table" else f"# {line}")
    # Unknowns do not block by default: a missing permission is not a missing capacity.
    sys.exit(EXIT_CHECKS_FAILED if report.failed(unknown_fails=strict) else 0)
