"""Bucket names, without Pulumi: core/config.py checks them before any resource exists."""

from __future__ import annotations

import re

# S3 user guide, "Namespaces for general purpose buckets"
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/gpbucketnamespaces.html) and "General
# purpose bucket naming rules" (bucketnamingrules.html): a bucket created with
# bucket_namespace=account-regional is named <prefix>-<12-digit account id>-<region>-an and only
# that account can create it, so two accounts deploying the same stack never collide (a global
# name like gpuforge-<stack>-checkpoints-<region> is taken by whichever account creates it
# first). Names stay 3-63 characters of lowercase letters, digits and hyphens. Not offered in
# Middle East (Bahrain) and (UAE).
ACCOUNT_REGIONAL = "account-regional"
ACCOUNT_REGIONAL_UNSUPPORTED = frozenset({"me-south-1", "me-central-1"})
ACCOUNT_ID = re.compile(r"[0-9]{12}")


def checkpoint_bucket_name(base: str, account_id: str, region: str) -> str:
    """The checkpoint bucket in the account's regional namespace: <base>-ckpt-<account>-<region>-an."""
    if not ACCOUNT_ID.fullmatch(account_id):
        raise ValueError(f"{account_id!r} is not a 12-digit AWS account id")
    return f"{base}-ckpt-{account_id}-{region}-an"


# S3 user guide, "Directory bucket naming rules"
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/directory-bucket-naming-rules.html): a
# directory bucket is <base-name>--<zone-id>--x-s3, 3-63 characters, and must "be unique within
# the chosen Zone" - across accounts, and directory buckets have no account regional namespace.
# The account id in the base keeps two accounts deploying the same stack in the same AZ apart.
def directory_bucket_name(base: str, account_id: str, az_id: str) -> str:
    """The stack's S3 Express One Zone bucket: <base>-<account>--<azid>--x-s3."""
    if not ACCOUNT_ID.fullmatch(account_id):
        raise ValueError(f"{account_id!r} is not a 12-digit AWS account id")
    return f"{base}-{account_id}--{az_id}--x-s3"


# S3 general purpose bucket naming rules: 3-63 characters; lowercase letters, digits, dots and
# hyphens; start and end with a letter or digit. gpuforge uses no dots (virtual-host TLS).
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
