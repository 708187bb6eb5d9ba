"""Co-located storage: S3 Express One Zone in the candidate AZ IDs, and where the stack's
directory bucket already lives (moving compute means the hot data must follow)."""

from __future__ import annotations

from gpuforge.common.results import CheckResult, Level
from gpuforge.core.bucketnames import ACCOUNT_ID, directory_bucket_name
from gpuforge.preflight.aws import Unavailable
from gpuforge.preflight.context import Context
from gpuforge.preflight.outcome import result, unknown

CHECK_S3EXPRESS = "s3express.availability"
CHECK_BUCKET = "s3express.existing-bucket"


def availability(ctx: Context) -> list[CheckResult]:
    # No AWS API lists the AZs that support directory buckets; the catalog carries the documented
    # list (regions.yaml), so this is reported as info, not as a live pass.
    ids = sorted(ctx.catalog.region(ctx.region).s3express_az_ids)
    ctx.evidence.s3express = set(ids)
    return [result(CHECK_S3EXPRESS, Level.INFO, ids, None,
                   f"S3 Express One Zone in {', '.join(ids) or 'no AZ'} of {ctx.region} per the catalog (AWS "
                   "docs; no API lists them)", targets=tuple(ids))]


def existing_bucket(ctx: Context, chosen: str) -> list[CheckResult]:
    account = ctx.evidence.account
    if account is None or not ACCOUNT_ID.fullmatch(account):
        return [result(CHECK_BUCKET, Level.UNKNOWN, None, None,
                       "the account id is unknown (STS failed), and the directory bucket's name carries it")]
    base = f"{ctx.cfg.bucket_base}-{account}"
    answer = ctx.aws.call("s3", "list_directory_buckets")
    expected = directory_bucket_name(ctx.cfg.bucket_base, account, chosen)
    if isinstance(answer, Unavailable):
        return [unknown(CHECK_BUCKET, answer, expected)]
    prefix, suffix = f"{base}--", "--x-s3"
    found = sorted(b["Name"] for b in answer.get("Buckets", [])
                   if b["Name"].startswith(prefix) and b["Name"].endswith(suffix))
    if not found:
        return [result(CHECK_BUCKET, Level.PASS, [], expected, f"no directory bucket yet; {expected} will be created")]
    if found == [expected]:
        return [result(CHECK_BUCKET, Level.PASS, found, expected, f"{expected} already sits in the chosen AZ")]
    elsewhere = [b for b in found if b != expected]
    return [result(CHECK_BUCKET, Level.WARNING, found, expected,
                   f"directory bucket(s) {', '.join(elsewhere)} sit in another AZ; with {chosen} the stack creates "
                   f"{expected} and the hot data must be copied there (`aws s3 sync`)")]
