"""Who is calling: the credentials work and name an account (STS), and may launch the nodes."""

from __future__ import annotations

from gpuforge.common.results import CheckResult, Level
from gpuforge.preflight.aws import Unavailable
from gpuforge.preflight.context import Context
from gpuforge.preflight.outcome import result, unknown

CHECK_CREDENTIALS = "aws.credentials"
CHECK_LAUNCH = "ec2.launch-permission"


def credentials(ctx: Context) -> list[CheckResult]:
    ident = ctx.aws.call("sts", "get_caller_identity")
    if isinstance(ident, Unavailable):
        if ident.kind == "forbidden":  # no identity at all: nothing else can work either
            return [result(CHECK_CREDENTIALS, Level.ERROR, None, "a working identity", ident.describe())]
        return [unknown(CHECK_CREDENTIALS, ident, "a working identity")]
    arn = ident.get("Arn")
    ctx.evidence.account = ident.get("Account")
    return [result(CHECK_CREDENTIALS, Level.PASS, {"account": ident.get("Account"), "arn": arn},
                   "a working identity", f"calling as {arn} in {ctx.region}")]


def launch_permission(ctx: Context, az_id: str, image_id: str | None) -> list[CheckResult]:
    """RunInstances with DryRun: proves permission only. AWS never checks capacity on a dry run."""
    zone = ctx.evidence.zone_names.get(az_id)
    if image_id is None or zone is None:
        missing = "an AMI" if image_id is None else f"the AZ name of {az_id}"
        return [result(CHECK_LAUNCH, Level.UNKNOWN, None, "DryRunOperation",
                       f"dry run skipped: {missing} is unknown (see the checks above)", targets=(az_id,))]
    answer = ctx.aws.call(
        "ec2", "run_instances", DryRun=True, ImageId=image_id, InstanceType=ctx.instance.name,
        MinCount=ctx.cfg.node_count, MaxCount=ctx.cfg.node_count, Placement={"AvailabilityZone": zone},
    )
    if isinstance(answer, Unavailable):
        if answer.code == "DryRunOperation":
            return [result(CHECK_LAUNCH, Level.PASS, "DryRunOperation", "DryRunOperation",
                           f"may launch {ctx.cfg.node_count} × {ctx.instance.name} in {az_id} (permission only; "
                           "a dry run does not reserve or test capacity)", targets=(az_id,))]
        if answer.kind == "forbidden":
            return [result(CHECK_LAUNCH, Level.ERROR, answer.code, "DryRunOperation",
                           f"{answer.describe()}; `pulumi up` would fail: grant ec2:RunInstances", targets=(az_id,))]
        if answer.kind == "error":
            return [
                result(CHECK_LAUNCH, Level.ERROR, answer.code, "DryRunOperation", answer.describe(), targets=(az_id,))
            ]
        return [unknown(CHECK_LAUNCH, answer, "DryRunOperation", targets=(az_id,))]
    # A dry run that launched nothing but did not say DryRunOperation is not a proof of anything.
    return [result(CHECK_LAUNCH, Level.UNKNOWN, "no DryRunOperation", "DryRunOperation",
                   "the endpoint ignored DryRun", targets=(az_id,))]
