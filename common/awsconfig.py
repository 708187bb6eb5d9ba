"""The AWS region as the AWS CLI finds it (issue 22), for every command that asks AWS itself.

The AWS CLI (v2) takes the region from, in order: `--region`, `AWS_REGION`, `AWS_DEFAULT_REGION`,
then the `region` of the profile (`AWS_PROFILE`, else `default`) in the config file
(`AWS_CONFIG_FILE`, else ~/.aws/config). botocore's own session reads the last three but not
`AWS_REGION` (botocore/configprovider.py: `'region': ('region', 'AWS_DEFAULT_REGION', ...)`),
so `AWS_REGION=eu-west-1 gpuforge ...` was ignored while `doctor`'s own fix told users to set it.

boto3 is imported only when a session is needed: the base install has none.
"""

from __future__ import annotations

import os
from typing import Any


def aws_region(flag: str | None = None, session: Any = None) -> tuple[str | None, str]:
    """(region, where it came from) in the AWS CLI's order; (None, why) when none is set."""
    if flag:
        return flag, "--region"
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(var):
            return os.environ[var], var
    if session is None:
        import boto3

        session = boto3.session.Session()
    region = session.region_name
    if region:
        config = os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config"
        return region, f"profile {session.profile_name} in {config}"
    return None, "none of --region, AWS_REGION, AWS_DEFAULT_REGION or the profile's region is set"
