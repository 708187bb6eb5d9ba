"""A stand-in for AWS Systems Manager Parameter Store (GetParameter only): what the bootstrap's
`ssm_get` (bootstrap/templates/lib.sh.j2) reads, reached through GPUFORGE_SSM_ENDPOINT, the
endpoint override the product honours. The first-boot rehearsal serves it on its network, the
bootstrap sandbox (tests/bootstrap/test_ngc_sigv4.py) on 127.0.0.1.

A request is answered only when botocore's own SigV4 signer (botocore.auth.SigV4Auth), given the
role credentials that the IMDS stand-in handed that instance and the request's X-Amz-Date,
computes the same Authorization header, and only for a parameter the role's policy lists (in the
rehearsal: the head's role reads the database password,
the GPU nodes' role does not, components/slurmhead.py parameter_policy). Errors are AWS's JSON
error bodies with status 400 (ParameterNotFound, InvalidSignatureException, AccessDeniedException).
"""

from __future__ import annotations

import datetime
import http.server
import json
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support.httpserve import serve, stop


@dataclass
class Role:
    name: str
    readable: set[str]  # parameter names this role's policy allows ssm:GetParameter on
    access_key: str = field(default_factory=lambda: "ASIA" + secrets.token_hex(8).upper())
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(30))
    token: str = field(default_factory=lambda: secrets.token_urlsafe(48))

    def imds_credentials(self) -> dict[str, str]:
        return {"AccessKeyId": self.access_key, "SecretAccessKey": self.secret_key, "Token": self.token}


def expected_authorization(url: str, headers: dict[str, str], body: bytes, region: str, role: Role) -> str:
    when = datetime.datetime.strptime(headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
    req = AWSRequest(method="POST", url=url, data=body,
                     headers={"Content-Type": headers["content-type"], "X-Amz-Target": headers["x-amz-target"]})  # fmt: skip
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=when):
        botocore.auth.SigV4Auth(Credentials(role.access_key, role.secret_key, role.token), "ssm", region).add_auth(req)
    return str(req.headers["Authorization"])


@dataclass
class Ssm:
    address: str
    port: int = 8081  # 0: any free port (url is right once started)
    region: str = "us-east-1"
    parameters: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (Type, Value)
    roles: dict[str, Role] = field(default_factory=dict)
    requests: list[tuple[str, str, str, int]] = field(default_factory=list)  # client, role, name, status
    headers: list[dict[str, str]] = field(default_factory=list)  # each request's headers, lower-case names
    _server: http.server.ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/"

    def role(self, name: str, readable: set[str]) -> Role:
        self.roles[name] = Role(name, readable)
        return self.roles[name]

    def answer(self, client: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any], str, str]:
        auth = headers.get("authorization", "")
        key = auth.partition("Credential=")[2].partition("/")[0]
        role = next((r for r in self.roles.values() if r.access_key == key), None)
        try:
            name = str(json.loads(body)["Name"])
        except (ValueError, KeyError, TypeError):
            return 400, {"__type": "ValidationException", "message": "no Name"}, "", ""
        if headers.get("x-amz-target") != "AmazonSSM.GetParameter":
            return 400, {"__type": "UnknownOperationException"}, "", name
        if role is None or auth != expected_authorization(f"http://{headers['host']}{path}", headers, body, self.region, role):
            return 400, {"__type": "InvalidSignatureException", "message": "signature does not match"}, "", name
        if name not in role.readable:
            denied = f"{role.name} is not authorized to perform ssm:GetParameter on {name}"
            return 400, {"__type": "AccessDeniedException", "message": denied}, role.name, name
        if name not in self.parameters:
            return 400, {"__type": "ParameterNotFound"}, role.name, name
        kind, value = self.parameters[name]
        return 200, {"Parameter": {"Name": name, "Type": kind, "Value": value, "Version": 1}}, role.name, name

    def start(self) -> Ssm:
        ssm = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                code, out, role, name = ssm.answer(self.client_address[0], self.path, headers, body)
                with ssm._lock:
                    ssm.requests.append((self.client_address[0], role, name, code))
                    ssm.headers.append(headers)
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._server = serve(http.server.ThreadingHTTPServer((self.address, self.port), Handler), "stand-in-ssm")
        self.port = int(self._server.server_address[1])
        return self

    def stop(self) -> None:
        stop(self._server)
        self._server = None
