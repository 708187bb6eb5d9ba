"""The NGC key fetch from SSM, against a stand-in SSM endpoint that accepts a request only when
botocore's own SigV4 signer (the AWS SDK for Python: botocore.auth.SigV4Auth), given the same
instance-role credentials and time, produces the same Authorization header. That is the check
AWS makes; with instance-role (temporary) credentials botocore signs X-Amz-Security-Token, so a
request that sends the token unsigned, or not at all, is refused here.
"""

from __future__ import annotations

import datetime
import http.server
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gpuforge.core.config import StackConfig
from tests.bootstrap.bootstrap_sandbox import SECRETS, Sandbox

ROLE_KEY = "ASIAFAKE"  # what the fake IMDS (tests/bootstrap/fakes/fake) hands out
ROLE_TOKEN = "fake-session-token"


def botocore_authorization(url: str, headers: dict[str, str], body: bytes, region: str) -> str:
    """The Authorization header botocore computes for this request at its X-Amz-Date."""
    when = datetime.datetime.strptime(headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
    req = AWSRequest(
        method="POST", url=url, data=body,
        headers={"Content-Type": headers["content-type"], "X-Amz-Target": headers["x-amz-target"]},
    )  # fmt: skip
    creds = Credentials(ROLE_KEY, SECRETS["FAKE_AWS_SECRET"], ROLE_TOKEN)
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=when):
        botocore.auth.SigV4Auth(creds, "ssm", region).add_auth(req)
    return str(req.headers["Authorization"])


class SsmStandIn:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                url = f"http://{headers['host']}{self.path}"
                want = botocore_authorization(url, headers, body, "us-east-1")
                stand_in.requests.append({"headers": headers, "body": body, "expected_auth": want})
                if headers.get("authorization") == want and json.loads(body)["Name"] == "/gpuforge/ngc":
                    param = {"Name": "/gpuforge/ngc", "Type": "SecureString", "Value": SECRETS["FAKE_NGC_KEY"]}
                    out: dict[str, Any] = {"Parameter": param}
                    code = 200
                else:
                    out, code = {"__type": "InvalidSignatureException", "message": "signature does not match"}, 400
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def ssm() -> Iterator[SsmStandIn]:
    s = SsmStandIn()
    try:
        yield s
    finally:
        s.close()


def _ngc(cfg: StackConfig) -> StackConfig:
    return cfg.model_copy(update={"ngc_api_key_parameter": "/gpuforge/ngc"})


def test_ngc_key_request_is_signed_as_the_sdk_signs_it(
    stack_cfg: dict[str, StackConfig], tmp_path: Path, ssm: SsmStandIn
) -> None:
    sb = Sandbox(tmp_path, _ngc(stack_cfg["nlp-inference"]), "n1", env_overrides={"GPUFORGE_SSM_ENDPOINT": ssm.url})
    r = sb.run()
    assert r.returncode == 0, sb.log()[-2000:]
    assert len(ssm.requests) == 1
    got = ssm.requests[0]["headers"]
    assert got["x-amz-security-token"] == ROLE_TOKEN
    assert "x-amz-security-token" in got["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    assert got["authorization"] == ssm.requests[0]["expected_auth"]
    # The key reached docker on stdin, and docker was logged out after the pull.
    docker = [c[1] for c in sb.calls() if c[0] == "docker"]
    assert docker.index("login") < docker.index("pull") < docker.index("logout")
    assert (sb.state / "docker-password").exists() is False, "logout removed the stored credential"
    seen = (sb.state / "calls.log").read_text() + sb.log() + r.stdout + r.stderr
    seen += (sb.root / "var/lib/gpuforge/bootstrap-status.json").read_text()
    for secret in SECRETS.values():
        assert secret not in seen, "no secret on a command line, in the log or in the status file"


def test_the_stand_in_refuses_a_token_sent_unsigned(ssm: SsmStandIn) -> None:
    """The request shape of curl 7.81's --aws-sigv4 (Ubuntu 22.04): signed with key and secret over
    host;x-amz-date only, the token header added unsigned. The stand-in, like botocore, wants the
    token signed, so it refuses; the signed form of the same request is accepted."""
    body = json.dumps({"Name": "/gpuforge/ngc", "WithDecryption": True}).encode()
    base = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "AmazonSSM.GetParameter"}

    def send(creds: Credentials, extra: dict[str, str]) -> int:
        req = AWSRequest(method="POST", url=ssm.url, data=body, headers=dict(base))
        botocore.auth.SigV4Auth(creds, "ssm", "us-east-1").add_auth(req)
        headers = {**dict(req.headers.items()), **extra}
        try:
            with urllib.request.urlopen(urllib.request.Request(ssm.url, data=body, headers=headers), timeout=30) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    unsigned = send(Credentials(ROLE_KEY, SECRETS["FAKE_AWS_SECRET"]), {"X-Amz-Security-Token": ROLE_TOKEN})
    signed = send(Credentials(ROLE_KEY, SECRETS["FAKE_AWS_SECRET"], ROLE_TOKEN), {})
    assert (unsigned, signed) == (400, 200)


def test_ngc_key_refused_by_ssm_fails_the_phase(stack_cfg: dict[str, StackConfig], tmp_path: Path, ssm: SsmStandIn) -> None:
    cfg = _ngc(stack_cfg["nlp-inference"]).model_copy(update={"region": "eu-west-1"})  # signed for another region
    sb = Sandbox(tmp_path, cfg, "n1", env_overrides={"GPUFORGE_SSM_ENDPOINT": ssm.url})
    assert sb.run().returncode != 0
    assert "cannot read SSM parameter /gpuforge/ngc" in sb.status()["error"]["message"]
    assert ssm.requests and ssm.requests[0]["headers"]["authorization"] != ssm.requests[0]["expected_auth"]
