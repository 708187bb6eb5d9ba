"""A moto server on 127.0.0.1 for tests of code that calls AWS (preflight, catalog refresh).

Use it from a conftest by importing the fixtures (pytest accepts `pytest_plugins` only in the
rootdir conftest, and mixing both ways makes pytest warn that the module cannot be rewritten):

    from tests.support.moto_server import aws_env, moto_auth, moto_server

    __all__ = ["aws_env", "moto_auth", "moto_server"]

Fixtures:

- `moto_server`: the endpoint URL (`http://127.0.0.1:PORT`) of one in-process
  `ThreadedMotoServer`, started once per session. In-process on purpose: a test can then patch
  a moto backend (`unittest.mock.patch.object(EC2Backend, ...)`) and the server answers with
  the patch, which is how quotas and InsufficientInstanceCapacity are injected
  (research/moto-coverage.md §4).
- `aws_env`: `moto_server` with a clean state (`/moto-api/reset` before the test) and the
  environment pointing boto3 at it: `AWS_ENDPOINT_URL`, dummy credentials, `us-east-1`, no
  profile or config files, so a developer's real credentials can never be used. Yields the URL.
- `moto_auth`: a callable `enforce(after_requests: float)` that turns on moto's IAM enforcement
  after that many more requests (`0` = now); enforcement is switched off again after the test.

Nothing here leaves loopback: the server binds 127.0.0.1 on a port the OS picks.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable, Iterator

import pytest

_DUMMY_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    # moto's CreateSession reply has no credentials; plain SigV4 works (moto-coverage.md §1).
    "AWS_S3_DISABLE_EXPRESS_SESSION_AUTH": "true",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_RETRY_MODE": "standard",
}
# Variables through which a developer's own AWS setup could leak into a test.
_CLEARED_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ROLE_ARN",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")


def _post(url: str, body: bytes = b"", content_type: str = "text/plain") -> None:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()


def reset(endpoint: str) -> None:
    """Wipe every backend of the server (buckets, instances, IAM users...)."""
    _post(f"{endpoint}/moto-api/reset")


def set_auth_enforcement(endpoint: str, after_requests: float) -> None:
    """IAM enforcement after `after_requests` more requests; `inf` turns it off.

    The body must be text/plain holding the number; a form body gives HTTP 500 (moto-coverage.md §4).
    """
    _post(f"{endpoint}/moto-api/reset-auth", str(after_requests).encode())


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    # Imported here: moto pulls in Flask and every backend; tests that never ask for AWS skip that.
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # port 0: the OS picks a free one
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws_env(moto_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> str:
    # Reset before, not after: a test that failed half-way still leaves the next one a clean server.
    reset(moto_server)
    set_auth_enforcement(moto_server, float("inf"))
    for key in _CLEARED_ENV:
        monkeypatch.delenv(key, raising=False)
    for key in [k for k in os.environ if k.startswith("AWS_ENDPOINT_URL_")]:
        monkeypatch.delenv(key)  # a per-service endpoint would win over AWS_ENDPOINT_URL
    empty = tmp_path_factory.mktemp("aws-config")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    for key, value in _DUMMY_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    return moto_server


@pytest.fixture
def moto_auth(aws_env: str) -> Iterator[Callable[[float], None]]:
    def enforce(after_requests: float = 0) -> None:
        set_auth_enforcement(aws_env, after_requests)

    try:
        yield enforce
    finally:
        set_auth_enforcement(aws_env, float("inf"))
