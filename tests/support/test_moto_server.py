"""The moto fixtures themselves: reachable on loopback, reset between tests, env isolated."""

from __future__ import annotations

import os
from collections.abc import Callable

import boto3
import pytest
from botocore.exceptions import ClientError


def test_endpoint_is_loopback(aws_env: str) -> None:
    assert aws_env.startswith("http://127.0.0.1:")
    assert os.environ["AWS_ENDPOINT_URL"] == aws_env
    assert "AWS_PROFILE" not in os.environ


def test_boto3_reaches_moto_without_endpoint_argument(aws_env: str) -> None:
    ident = boto3.client("sts").get_caller_identity()
    assert ident["Account"] == "123456789012"  # moto's fixed account: proves the call hit moto


def test_state_written_here_is_gone_in_next_test_part1(aws_env: str) -> None:
    boto3.client("s3").create_bucket(Bucket="reset-probe")
    assert [b["Name"] for b in boto3.client("s3").list_buckets()["Buckets"]] == ["reset-probe"]


def test_state_written_here_is_gone_in_next_test_part2(aws_env: str) -> None:
    assert boto3.client("s3").list_buckets()["Buckets"] == []


def test_auth_enforcement_denies_unknown_credentials(moto_auth: Callable[[float], None]) -> None:
    moto_auth(0)
    with pytest.raises(ClientError) as exc:
        boto3.client("ec2").describe_availability_zones()
    # moto rejects the dummy `testing` key: it is no IAM user of the account.
    assert exc.value.response["Error"]["Code"] in {"AuthFailure", "InvalidClientTokenId"}
