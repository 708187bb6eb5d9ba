"""A stand-in for the EC2 instance metadata service, IMDSv2 only (the launch template requires
tokens), on 169.254.169.254:80 of the rehearsal network. Each node is told apart by its address.

Behaviour as AWS documents it ("Use the Instance Metadata Service to access instance metadata",
IMDSv2): `PUT /latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds` (1-21600) returns a
token; a PUT without the TTL header is 400; a PUT carrying `X-Forwarded-For` is refused (403);
a GET without a valid, unexpired token is 401. Paths served: meta-data/instance-id,
meta-data/tags/instance/<key> (instance_metadata_tags on), meta-data/spot/instance-action (404
until a test sets a notice), meta-data/placement/availability-zone(-id), meta-data/local-ipv4, and the instance role's temporary
credentials (meta-data/iam/security-credentials/ lists the role's name, .../<role> its
AccessKeyId, SecretAccessKey and Token as JSON) when the instance has a role.
"""

from __future__ import annotations

import http.server
import json
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.support.httpserve import serve, stop

ADDRESS = "169.254.169.254"


@dataclass
class InstanceMetadata:
    instance_id: str
    tags: dict[str, str]
    az: str = "us-east-1a"
    az_id: str = "use1-az4"
    local_ipv4: str = ""
    spot_action: dict[str, str] | None = None
    role: str | None = None  # the instance profile's role: its credentials are `credentials`
    credentials: dict[str, str] = field(default_factory=dict)

    def get(self, path: str) -> str | None:
        if self.role and path == "meta-data/iam/security-credentials":
            return self.role
        if self.role and path == f"meta-data/iam/security-credentials/{self.role}":
            return json.dumps({"Code": "Success", "Type": "AWS-HMAC", "LastUpdated": "2026-01-01T00:00:00Z",
                               "Expiration": "2099-01-01T00:00:00Z", **self.credentials})  # fmt: skip
        md = {
            "meta-data/instance-id": self.instance_id,
            "meta-data/placement/availability-zone": self.az,
            "meta-data/placement/availability-zone-id": self.az_id,
            "meta-data/local-ipv4": self.local_ipv4,
            "meta-data/tags/instance": "\n".join(self.tags),
        }
        if path in md:
            return md[path]
        if path.startswith("meta-data/tags/instance/"):
            return self.tags.get(path.rsplit("/", 1)[1])
        if path == "meta-data/spot/instance-action" and self.spot_action:
            return json.dumps(self.spot_action)
        return None


@dataclass
class Imds:
    device: str  # the rehearsal bridge: several rehearsals may each serve 169.254.169.254:80
    address: str = ADDRESS
    port: int = 80
    instances: dict[str, InstanceMetadata] = field(default_factory=dict)  # node address -> metadata
    requests: list[tuple[str, str, str, int]] = field(default_factory=list)  # client, method, path, status
    _tokens: dict[str, tuple[str, float]] = field(default_factory=dict)  # token -> (client, expiry)
    _server: http.server.ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Imds:
        imds = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _send(self, status: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                with imds._lock:
                    imds.requests.append((self.client_address[0], self.command, self.path, status))

            def do_PUT(self) -> None:
                if self.path != "/latest/api/token":
                    return self._send(404)
                if self.headers.get("X-Forwarded-For"):
                    return self._send(403)
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
                if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                    return self._send(400)
                token = secrets.token_urlsafe(32)
                with imds._lock:
                    imds._tokens[token] = (self.client_address[0], time.monotonic() + int(ttl))
                self._send(200, token)

            def do_GET(self) -> None:
                token = self.headers.get("X-aws-ec2-metadata-token", "")
                with imds._lock:
                    owner, expiry = imds._tokens.get(token, ("", 0.0))
                if owner != self.client_address[0] or time.monotonic() > expiry:
                    return self._send(401)
                inst = imds.instances.get(self.client_address[0])
                path = self.path.removeprefix("/latest/").rstrip("/")
                value = inst.get(path) if inst else None
                self._send(200, value) if value is not None else self._send(404)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        device = self.device

        class Server(http.server.ThreadingHTTPServer):
            def server_bind(self) -> None:
                # Bound to the bridge, so concurrent rehearsals (other bridges) do not collide.
                self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
                super().server_bind()

        self._server = serve(Server((self.address, self.port), Handler), "rehearsal-imds")
        return self

    def stop(self) -> None:
        stop(self._server)
        self._server = None
