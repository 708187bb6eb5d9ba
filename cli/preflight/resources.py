"""Resources the stack refers to but does not create: the AMI, an existing VPC/subnet, the key
pair and the SSM parameter with the NGC key. Each must exist in the region before `pulumi up`."""

from __future__ import annotations

from gpuforge.common.results import CheckResult, Level
from gpuforge.components.ami import ami_filter
from gpuforge.preflight.aws import Unavailable
from gpuforge.preflight.context import Context
from gpuforge.preflight.outcome import result, unknown

CHECK_AMI = "ec2.ami"
CHECK_NETWORK = "ec2.network"
CHECK_KEY = "ec2.key-pair"
CHECK_SSM = "ssm.ngc-parameter"
_NOT_FOUND = ("NotFound", "Malformed", "ParameterNotFound")


def _missing(why: Unavailable) -> bool:
    return why.kind == "error" and any(s in (why.code or "") for s in _NOT_FOUND)


def ami(ctx: Context) -> tuple[list[CheckResult], str | None]:
    """The AMI check, and the image id for the launch dry run (None when unknown)."""
    cfg = ctx.cfg
    if cfg.ami_id:
        answer = ctx.aws.call("ec2", "describe_images", ImageIds=[cfg.ami_id])
        if isinstance(answer, Unavailable):
            if _missing(answer):
                return [result(CHECK_AMI, Level.ERROR, None, cfg.ami_id,
                               f"gpuforge:amiId {cfg.ami_id} does not exist in {ctx.region} ({answer.code})")], None
            return [unknown(CHECK_AMI, answer, cfg.ami_id)], None
        images = answer.get("Images", [])
        if not images:
            return [result(CHECK_AMI, Level.ERROR, None, cfg.ami_id,
                           f"gpuforge:amiId {cfg.ami_id} does not exist in {ctx.region}")], None
        img = images[0]
        if img.get("Architecture") != "x86_64" or img.get("State") != "available":
            return [result(CHECK_AMI, Level.ERROR, {"architecture": img.get("Architecture"), "state": img.get("State")},
                           {"architecture": "x86_64", "state": "available"},
                           f"{cfg.ami_id} cannot boot {ctx.instance.name} (x86_64, available)")], None
        return [result(CHECK_AMI, Level.PASS, cfg.ami_id, cfg.ami_id, f"{cfg.ami_id} ({img.get('Name')}) is usable")], \
            cfg.ami_id
    f = ami_filter(cfg.os, cfg.driver_preinstalled)
    answer = ctx.aws.call(
        "ec2", "describe_images", Owners=[f.owner],
        Filters=[{"Name": "name", "Values": [f.name_pattern]}, {"Name": "architecture", "Values": ["x86_64"]},
                 {"Name": "virtualization-type", "Values": ["hvm"]}],
    )
    expected = f"{f.description} ({f.owner}, {f.name_pattern})"
    if isinstance(answer, Unavailable):
        return [unknown(CHECK_AMI, answer, expected)], None
    images = sorted(answer.get("Images", []), key=lambda i: i.get("CreationDate", ""), reverse=True)
    if not images:
        return [result(CHECK_AMI, Level.ERROR, None, expected,
                       f"no image matches {expected} in {ctx.region}; set gpuforge:amiId")], None
    newest = images[0]["ImageId"]
    return [result(CHECK_AMI, Level.PASS, newest, expected, f"the lookup finds {newest} ({images[0].get('Name')})")], \
        newest


def network(ctx: Context) -> list[CheckResult]:
    cfg = ctx.cfg
    if not cfg.subnet_id:
        return [result(CHECK_NETWORK, Level.INFO, None, None,
                       "no existing network configured: the stack creates a VPC and a subnet in the chosen AZ")]
    answer = ctx.aws.call("ec2", "describe_subnets", SubnetIds=[cfg.subnet_id])
    expected = {"vpc": cfg.vpc_id, "subnet": cfg.subnet_id}
    if isinstance(answer, Unavailable):
        if _missing(answer):
            return [result(CHECK_NETWORK, Level.ERROR, None, expected,
                           f"gpuforge:subnetId {cfg.subnet_id} does not exist in {ctx.region}")]
        return [unknown(CHECK_NETWORK, answer, expected)]
    subnets = answer.get("Subnets", [])
    if not subnets:
        return [result(CHECK_NETWORK, Level.ERROR, None, expected, f"gpuforge:subnetId {cfg.subnet_id} not found")]
    sn = subnets[0]
    observed = {"vpc": sn.get("VpcId"), "subnet": sn.get("SubnetId"), "az_id": sn.get("AvailabilityZoneId")}
    if sn.get("VpcId") != cfg.vpc_id:
        return [result(CHECK_NETWORK, Level.ERROR, observed, expected,
                       f"gpuforge:subnetId {cfg.subnet_id} belongs to {sn.get('VpcId')}, not gpuforge:vpcId {cfg.vpc_id}")]
    ctx.evidence.subnet_az = sn.get("AvailabilityZoneId")  # the AZ ranking must stay in the subnet's AZ
    return [result(CHECK_NETWORK, Level.PASS, observed, expected,
                   f"subnet {cfg.subnet_id} of {cfg.vpc_id} is in {sn.get('AvailabilityZoneId')}; the stack stays there",
                   targets=(str(sn.get("AvailabilityZoneId")),))]


def key_pair(ctx: Context) -> list[CheckResult]:
    name = ctx.cfg.key_name
    if not name:
        return [result(CHECK_KEY, Level.INFO, None, None, "no gpuforge:keyName: reach nodes through SSM, not SSH keys")]
    answer = ctx.aws.call("ec2", "describe_key_pairs", KeyNames=[name])
    if isinstance(answer, Unavailable):
        if _missing(answer):
            return [result(CHECK_KEY, Level.ERROR, None, name,
                           f"key pair {name!r} does not exist in {ctx.region}; import it (aws ec2 import-key-pair) "
                           "or fix gpuforge:keyName")]
        return [unknown(CHECK_KEY, answer, name)]
    return [result(CHECK_KEY, Level.PASS, name, name, f"key pair {name!r} exists in {ctx.region}")]


def ngc_parameter(ctx: Context) -> list[CheckResult]:
    name = ctx.cfg.ngc_api_key_parameter
    if not name:
        return [result(CHECK_SSM, Level.INFO, None, None, "no gpuforge:ngcApiKeyParameter: public NGC images only")]
    # describe_parameters reads metadata only: preflight never needs to decrypt the key.
    answer = ctx.aws.call("ssm", "describe_parameters",
                          ParameterFilters=[{"Key": "Name", "Option": "Equals", "Values": [name]}])
    if isinstance(answer, Unavailable):
        return [unknown(CHECK_SSM, answer, name)]
    params = answer.get("Parameters", [])
    if not params:
        return [result(CHECK_SSM, Level.ERROR, None, name,
                       f"SSM parameter {name} does not exist in {ctx.region}; create it as a SecureString")]
    kind = params[0].get("Type")
    if kind != "SecureString":
        return [result(CHECK_SSM, Level.WARNING, kind, "SecureString",
                       f"SSM parameter {name} is a {kind}; store the NGC key as a SecureString")]
    return [result(CHECK_SSM, Level.PASS, kind, "SecureString", f"SSM parameter {name} exists (SecureString)")]
