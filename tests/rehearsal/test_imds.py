"""The IMDS stand-in answers as AWS documents IMDSv2 with tokens required (the launch template
sets http_tokens=required): what the bootstrap's imds() and the spot watcher meet in the rehearsal."""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.rehearsal.imds import Imds, InstanceMetadata

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (SO_BINDTODEVICE)")


@pytest.fixture
def imds() -> Iterator[Imds]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Imds("lo", address="127.0.0.1", port=port)
    server.instances["127.0.0.1"] = InstanceMetadata("i-0abc", {"Name": "node-7"})
    server.start()
    yield server
    server.stop()


def _call(imds: Imds, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{imds.port}{path}", method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_tokens_are_required_and_bounded(imds: Imds) -> None:
    assert _call(imds, "GET", "/latest/meta-data/instance-id", {})[0] == 401  # IMDSv1 refused
    assert _call(imds, "PUT", "/latest/api/token", {})[0] == 400  # no TTL header
    assert _call(imds, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "21601"})[0] == 400
    ttl = {"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    assert _call(imds, "PUT", "/latest/api/token", {**ttl, "X-Forwarded-For": "10.0.0.1"})[0] == 403
    code, token = _call(imds, "PUT", "/latest/api/token", ttl)
    assert code == 200 and token
    auth = {"X-aws-ec2-metadata-token": token}
    assert _call(imds, "GET", "/latest/meta-data/tags/instance/Name", auth) == (200, "node-7")
    assert _call(imds, "GET", "/latest/meta-data/instance-id", auth) == (200, "i-0abc")
    assert _call(imds, "GET", "/latest/meta-data/instance-id", {"X-aws-ec2-metadata-token": "forged"})[0] == 401


def test_spot_notice_appears_on_demand(imds: Imds) -> None:
    _, token = _call(imds, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    auth = {"X-aws-ec2-metadata-token": token}
    assert _call(imds, "GET", "/latest/meta-data/spot/instance-action", auth)[0] == 404
    imds.instances["127.0.0.1"].spot_action = {"action": "stop", "time": "2026-01-01T00:02:00Z"}
    code, body = _call(imds, "GET", "/latest/meta-data/spot/instance-action", auth)
    assert code == 200 and '"action": "stop"' in body
