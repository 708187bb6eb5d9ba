"""Co-located object storage: an S3 Express One Zone directory bucket in the nodes' AZ ID (hot
data), and a regional S3 bucket for durable checkpoints (private, encrypted, TLS-only, versioned)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpuforge.core.bucketnames import ACCOUNT_REGIONAL, checkpoint_bucket_name, directory_bucket_name


@dataclass(frozen=True)
class StorageArgs:
    bucket_base: str
    region: str
    az_id: str
    tags: dict[str, str] = field(default_factory=dict)




class ClusterStorage(pulumi.ComponentResource):
    directory_bucket_name: pulumi.Output[str]
    directory_bucket_arn: pulumi.Output[str]
    checkpoint_bucket_name: pulumi.Output[str]
    checkpoint_bucket_arn: pulumi.Output[str]

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuforge:aws:Storage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        # Both bucket names carry the deploying account (core/bucketnames.py).
        account = aws.get_caller_identity_output(opts=pulumi.InvokeOptions(parent=self)).account_id
        express = aws.s3.DirectoryBucket(
            f"{name}-express",
            # the AZ ID in the name is how S3 Express pins the bucket to the nodes' zone
            bucket=account.apply(lambda acct: directory_bucket_name(args.bucket_base, acct, args.az_id)),
            location=aws.s3.DirectoryBucketLocationArgs(name=args.az_id, type="AvailabilityZone"),
            data_redundancy="SingleAvailabilityZone",
            type="Directory",
            force_destroy=False,
            tags=args.tags,  # cost allocation (policy cost-tags); directory buckets take tags like any other
            opts=child,
        )
        # Directory buckets encrypt with SSE-S3 by default; saying so explicitly lets policies
        # (and readers) see it in the graph.
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-express-sse",
            bucket=express.bucket,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="AES256"
                    ),
                    bucket_key_enabled=True,
                )
            ],
            opts=child,
        )

        ckpt = aws.s3.Bucket(
            f"{name}-checkpoints",
            bucket=account.apply(lambda acct: checkpoint_bucket_name(args.bucket_base, acct, args.region)),
            bucket_namespace=ACCOUNT_REGIONAL,
            force_destroy=False,
            tags={**args.tags, "Name": f"{name}-checkpoints"},
            opts=child,
        )
        aws.s3.BucketPublicAccessBlock(
            f"{name}-checkpoints-pab",
            bucket=ckpt.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-checkpoints-ownership",
            bucket=ckpt.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-checkpoints-sse",
            bucket=ckpt.id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="aws:kms"
                    ),
                    bucket_key_enabled=True,
                )
            ],
            opts=child,
        )
        aws.s3.BucketVersioning(
            f"{name}-checkpoints-versioning",
            bucket=ckpt.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
            opts=child,
        )
        aws.s3.BucketPolicy(
            f"{name}-checkpoints-tls-only",
            bucket=ckpt.id,
            policy=ckpt.arn.apply(_tls_only_policy),
            opts=child,
        )

        self.directory_bucket_name = express.bucket
        self.directory_bucket_arn = express.arn
        self.checkpoint_bucket_name = ckpt.bucket
        self.checkpoint_bucket_arn = ckpt.arn
        self.register_outputs(
            {"directoryBucket": self.directory_bucket_name, "checkpointBucket": self.checkpoint_bucket_name}
        )


def _tls_only_policy(bucket_arn: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [bucket_arn, f"{bucket_arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )
