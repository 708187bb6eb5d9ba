"""The resource policies: each judges one resource's inputs (policy/graph.py reads them).

no-public-ssh (a rule open to 0.0.0.0/0 or ::/0 on tcp/22), encryption-on (EBS volumes, launch
template and root volumes, SNS topics), imdsv2-only (nodes require IMDSv2 tokens), cost-tags
(every taggable resource carries the cost-allocation tags).
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from gpuforge.policy.graph import (
    INSTANCE,
    LAUNCH_TEMPLATE,
    OPEN,
    REQUIRED_TAGS,
    SSH_PORT,
    covers_ssh,
    tag_map,
    taggable,
)

MANDATORY = EnforcementLevel.MANDATORY


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _no_public_ssh(args: ResourceValidationArgs, report: ReportViolation) -> None:
    p = args.props
    cidrs: list[str] = []
    if args.resource_type == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule":
        cidrs = [c for c in (p.get("cidrIpv4"), p.get("cidrIpv6")) if c]
        rules = [{"fromPort": p.get("fromPort"), "toPort": p.get("toPort"), "protocol": p.get("ipProtocol")}]
    elif args.resource_type == "aws:ec2/securityGroup:SecurityGroup":
        rules = p.get("ingress") or []
        for rule in rules:
            if covers_ssh(rule.get("fromPort"), rule.get("toPort"), rule.get("protocol")):
                cidrs += list(rule.get("cidrBlocks") or []) + list(rule.get("ipv6CidrBlocks") or [])
        rules = [{"fromPort": SSH_PORT, "toPort": SSH_PORT, "protocol": "tcp"}] if cidrs else []
    elif args.resource_type == "aws:ec2/securityGroupRule:SecurityGroupRule" and p.get("type") == "ingress":
        cidrs = list(p.get("cidrBlocks") or []) + list(p.get("ipv6CidrBlocks") or [])
        rules = [{"fromPort": p.get("fromPort"), "toPort": p.get("toPort"), "protocol": p.get("protocol")}]
    else:
        return
    if any(covers_ssh(r["fromPort"], r["toPort"], r["protocol"]) for r in rules) and OPEN & set(cidrs):
        report(
            f"{args.name}: SSH (tcp/22) is open to {', '.join(sorted(OPEN & set(cidrs)))}; "
            "list your own CIDRs in gpuforge:sshCidrs, or use SSM Session Manager",
            None,
        )


def _encryption_on(args: ResourceValidationArgs, report: ReportViolation) -> None:
    p = args.props
    if args.resource_type == LAUNCH_TEMPLATE:
        for bdm in p.get("blockDeviceMappings") or []:
            ebs = bdm.get("ebs")
            if ebs is not None and not _true(ebs.get("encrypted")):
                report(f"{args.name}: volume {bdm.get('deviceName')} is not encrypted; set ebs.encrypted=true", None)
    elif args.resource_type == "aws:ebs/volume:Volume" and not _true(p.get("encrypted")):
        report(f"{args.name}: EBS volume is not encrypted; set encrypted=True", None)
    elif args.resource_type == INSTANCE and p.get("rootBlockDevice") and not _true(p["rootBlockDevice"].get("encrypted")):
        report(f"{args.name}: root volume is not encrypted", None)
    elif args.resource_type == "aws:sns/topic:Topic" and not p.get("kmsMasterKeyId"):
        report(f"{args.name}: SNS topic is not encrypted; set kms_master_key_id (a customer-managed key)", None)


def _imdsv2(args: ResourceValidationArgs, report: ReportViolation) -> None:
    p = args.props
    if args.resource_type == LAUNCH_TEMPLATE or (args.resource_type == INSTANCE and not p.get("launchTemplate")):
        if (p.get("metadataOptions") or {}).get("httpTokens") != "required":
            report(f"{args.name}: IMDSv1 is allowed; set metadata_options.http_tokens='required' (IMDSv2 only)", None)


def _tags_present(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not taggable(args.resource_type):
        return
    tags = tag_map(args.props)
    missing = [k for k in REQUIRED_TAGS if not tags.get(k)]
    if missing:
        report(
            f"{args.name} ({args.resource_type}): missing cost-allocation tags {', '.join(missing)}; "
            "set gpuforge:team and gpuforge:owner in the stack file",
            None,
        )


RESOURCE_POLICIES = [
    ResourceValidationPolicy("no-public-ssh", "SSH is never open to the internet", _no_public_ssh, MANDATORY),
    ResourceValidationPolicy("encryption-on", "EBS volumes and SNS topics are encrypted", _encryption_on, MANDATORY),
    ResourceValidationPolicy("imdsv2-only", "Nodes require IMDSv2 tokens", _imdsv2, MANDATORY),
    ResourceValidationPolicy("cost-tags", f"Taggable resources carry {', '.join(REQUIRED_TAGS)}", _tags_present, MANDATORY),
]
