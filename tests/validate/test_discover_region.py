"""`validate --discover` and `doctor` find the AWS region as the AWS CLI does, and an EC2
endpoint that does not answer is exit 1 with progress while waiting, not a silent 21 s and then
exit 2 "bad input" (issue 22)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gpuforge.common.awsconfig import aws_region
from tests.cli.conftest import closed_port

__all__ = ["closed_port"]


@pytest.fixture
def aws_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "config"
    config.write_text("[default]\nregion = ap-south-1\n[profile other]\nregion = sa-east-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    return config


def test_region_in_the_aws_cli_order(aws_files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("boto3")
    assert aws_region()[0] == "ap-south-1"
    monkeypatch.setenv("AWS_PROFILE", "other")
    assert aws_region()[0] == "sa-east-1"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    assert aws_region() == ("us-west-2", "AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")  # botocore alone ignores this one
    assert aws_region() == ("eu-west-1", "AWS_REGION")
    assert aws_region("us-east-2") == ("us-east-2", "--region")


def test_unreachable_endpoint_is_exit_1_with_progress(
    aws_files: Path, closed_port: int, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("boto3")
    from gpuforge.cli import main

    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--discover", "cv-training"])
    err = capsys.readouterr().err
    assert ex.value.code == 1, err  # a check that could not be made, as in preflight; not "bad input"
    assert "discover: ec2:DescribeInstances in eu-west-1" in err, err  # progress, in AWS_REGION's region
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "did not answer" in lines[0] and "in eu-west-1" in lines[0], err
    assert "Traceback" not in err


def test_a_long_wait_is_said_while_it_lasts(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuforge.validate import discover

    monkeypatch.setattr(discover, "HEARTBEAT_S", 0.05)
    heard: list[str] = []
    lock = threading.Lock()

    def progress(line: str) -> None:
        with lock:
            heard.append(line)

    with discover._waiting(progress, "ec2:DescribeInstances"):
        time.sleep(0.3)
    assert heard[0] == "discover: ec2:DescribeInstances ..."
    assert any(line.startswith("discover: still waiting for ec2:DescribeInstances") for line in heard), heard
