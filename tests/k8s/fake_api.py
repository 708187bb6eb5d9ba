"""A Kubernetes API stand-in on 127.0.0.1 serving recorded (constructed) responses, so the
validate check runs through the real kubernetes client: kubeconfig loading, HTTP, JSON
deserialisation into V1 objects."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture(name: str) -> Any:
    text = (FIXTURES / name).read_text()
    return json.loads(text) if name.endswith(".json") else text


@dataclass
class Scenario:
    nodes: dict[str, Any]
    plugin_pods: dict[str, Any]
    pod_phases: list[str] = field(default_factory=lambda: ["Pending", "Running", "Succeeded"])
    pod_log: str = ""
    pod_node: str = "ip-10-42-3-17.ec2.internal"
    requests: list[tuple[str, str]] = field(default_factory=list)
    created: list[dict[str, Any]] = field(default_factory=list)


def _handler(sc: Scenario) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

        def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method: str) -> None:
            path = urlparse(self.path).path
            sc.requests.append((method, self.path))
            length = int(self.headers.get("Content-Length") or 0)
            body: dict[str, Any] = json.loads(self.rfile.read(length)) if length else {}
            if method == "GET" and path == "/api/v1/nodes":
                return self._send(200, sc.nodes)
            if method == "GET" and path == "/api/v1/namespaces/nvidia-device-plugin/pods":
                return self._send(200, sc.plugin_pods)
            if method == "POST" and path == "/api/v1/namespaces/nvidia-device-plugin/pods":
                sc.created.append(body)
                return self._send(201, {**body, "status": {"phase": "Pending"}})
            if path.startswith("/api/v1/namespaces/nvidia-device-plugin/pods/"):
                name = path.rsplit("/", 2)[-2] if path.endswith("/log") else path.rsplit("/", 1)[-1]
                if method == "DELETE":
                    return self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
                if path.endswith("/log"):
                    return self._send(200, sc.pod_log, "text/plain")
                phase = sc.pod_phases.pop(0) if len(sc.pod_phases) > 1 else sc.pod_phases[0]
                pod = {**sc.created[-1], "status": {"phase": phase}}
                pod["metadata"] = {**pod["metadata"], "name": name, "namespace": "nvidia-device-plugin"}
                pod["spec"] = {**pod["spec"], "nodeName": sc.pod_node}
                return self._send(200, pod)
            return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                    "code": 404, "message": f"{path} not found"})

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": server}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
        "users": [{"name": "t", "user": {"token": "recorded-test-token"}}],
    }))
    return path


@contextmanager
def serve(sc: Scenario) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(sc))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
