"""The NGC key fetch from SSM, against a stand-in SSM endpoint that accepts a request only when
botocore's own SigV4 signer (the AWS SDK for Python: botocore.auth.SigV4Auth), given the same
instance-role credentials and time, produces the same Authorization header. That is the check
AWS makes; with instance-role (temporary) credentials botocore signs X-Amz-Security-Token, so a
request that sends the token unsigned, or not at all, is refused here.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gpuforge.core.config import StackConfig
from tests.bootstrap.bootstrap_sandbox import SECRETS, Sandbox
from tests.support.ssm import Role, Ssm

ROLE_KEY = "ASIAFAKE"  # what the fake IMDS (tests/bootstrap/fakes/fake) hands out
ROLE_TOKEN = "fake-session-token"


@pytest.fixture
def ssm() -> Iterator[Ssm]:
    """The shared SSM stand-in (tests/support/ssm.py) on a free port of 127.0.0.1, knowing the
    fake IMDS's role and the NGC key parameter that role may read."""
    s = Ssm("127.0.0.1", port=0)
    s.roles["node"] = Role("node", {"/gpuforge/ngc"}, ROLE_KEY, SECRETS["FAKE_AWS_SECRET"], ROLE_TOKEN)
    s.parameters["/gpuforge/ngc"] = ("SecureString", SECRETS["FAKE_NGC_KEY"])
    s.start()
    try:
        yield s
    finally:
        s.stop()


def _ngc(cfg: StackConfig) -> StackConfig:
    return cfg.model_copy(update={"ngc_api_key_parameter": "/gpuforge/ngc"})


def test_ngc_key_request_is_signed_as_the_sdk_signs_it(
    stack_cfg: dict[str, StackConfig], tmp_path: Path, ssm: Ssm
) -> None:
    sb = Sandbox(tmp_path, _ngc(stack_cfg["nlp-inference"]), "n1", env_overrides={"GPUFORGE_SSM_ENDPOINT": ssm.url})
    r = sb.run()
    assert r.returncode == 0, sb.log()[-2000:]
    # one request, answered: the stand-in answers only what botocore's signer signs the same way
    assert ssm.requests == [("127.0.0.1", "node", "/gpuforge/ngc", 200)]
    got = ssm.headers[0]
    assert got["x-amz-security-token"] == ROLE_TOKEN
    assert "x-amz-security-token" in got["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    # The key reached docker on stdin, and docker was logged out after the pull.
    docker = [c[1] for c in sb.calls() if c[0] == "docker"]
    assert docker.index("login") < docker.index("pull") < docker.index("logout")
    assert (sb.state / "docker-password").exists() is False, "logout removed the stored credential"
    seen = (sb.state / "calls.log").read_text() + sb.log() + r.stdout + r.stderr
    seen += (sb.root / "var/lib/gpuforge/bootstrap-status.json").read_text()
    for secret in SECRETS.values():
        assert secret not in seen, "no secret on a command line, in the log or in the status file"


def test_the_stand_in_refuses_a_token_sent_unsigned(ssm: Ssm) -> None:
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


def test_ngc_key_refused_by_ssm_fails_the_phase(stack_cfg: dict[str, StackConfig], tmp_path: Path, ssm: Ssm) -> None:
    cfg = _ngc(stack_cfg["nlp-inference"]).model_copy(update={"region": "eu-west-1"})  # signed for another region
    sb = Sandbox(tmp_path, cfg, "n1", env_overrides={"GPUFORGE_SSM_ENDPOINT": ssm.url})
    assert sb.run().returncode != 0
    assert "cannot read SSM parameter /gpuforge/ngc" in sb.status()["error"]["message"]
    # refused for its signature (eu-west-1's scope), not for the role or the parameter
    assert ssm.requests == [("127.0.0.1", "", "/gpuforge/ngc", 400)]
    assert "/eu-west-1/ssm/aws4_request" in ssm.headers[0]["authorization"]
