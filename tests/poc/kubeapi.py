"""A Kubernetes API stand-in on 127.0.0.1 for `gpuforge poc --kubeconfig` (tests/SUBSTITUTIONS.md).

It serves the calls the Job path makes through the real kubernetes client (create ConfigMap and
Job, read the Job's status, list its pod, read the pod's log, delete both) and, like a kubelet
with no container runtime, runs the Job's container command when the Job is created: the
ConfigMap's files are written to a folder that stands for the volume mount, `python` is this
machine's interpreter (with its CPU torch), the container's env is set, and stdout and stderr
together become the pod's log, as `kubectl logs` shows them. The image is not pulled; what was
asked for is kept in `jobs` for the test to check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

NODE = "ip-10-42-3-17.ec2.internal"


@dataclass
class Cluster:
    configmaps: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=dict)  # job -> container exit code
    deleted: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def kubelet(self, name: str) -> None:
        """Run the Job's one container as this machine's process."""
        spec = self.jobs[name]["spec"]["template"]["spec"]
        c = spec["containers"][0]
        with tempfile.TemporaryDirectory() as vol:
            cm = self.configmaps[spec["volumes"][0]["configMap"]["name"]]
            for fname, text in cm["data"].items():
                (Path(vol) / fname).write_text(text)
            mount = c["volumeMounts"][0]["mountPath"]
            cmd = [vol + a[len(mount):] if a.startswith(mount + "/") else a for a in c["command"]]
            if cmd[0] == "python":
                cmd[0] = sys.executable
            env = {e["name"]: e["value"] for e in c.get("env", [])}
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False,
                                  env={"PATH": "/usr/bin:/bin", **env})
        with self.lock:
            self.logs[name] = proc.stderr + proc.stdout
            self.done[name] = proc.returncode


def _handler(cl: Cluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            length = int(self.headers.get("Content-Length") or 0)
            body: dict[str, Any] = json.loads(self.rfile.read(length)) if length else {}
            ok = {"kind": "Status", "apiVersion": "v1", "status": "Success"}
            # /api/v1/namespaces/NS/configmaps[/NAME]
            if parts[:2] == ["api", "v1"] and parts[4:5] == ["configmaps"]:
                if method == "POST":
                    cl.configmaps[body["metadata"]["name"]] = body
                    return self._send(201, body)
                if method == "DELETE":
                    cl.deleted.append(f"configmap/{parts[5]}")
                    return self._send(200, ok)
            if parts[:3] == ["apis", "batch", "v1"] and parts[5:6] == ["jobs"]:
                if method == "POST":
                    name = body["metadata"]["name"]
                    cl.jobs[name] = body
                    threading.Thread(target=cl.kubelet, args=(name,), daemon=True).start()
                    return self._send(201, body)
                name = parts[6]
                if method == "DELETE":
                    cl.deleted.append(f"job/{name}")
                    return self._send(200, ok)
                with cl.lock:
                    rc = cl.done.get(name)
                status = {"active": 1} if rc is None else ({"succeeded": 1} if rc == 0 else {"failed": 1})
                return self._send(200, {**cl.jobs[name], "status": status})
            if parts[:2] == ["api", "v1"] and parts[4:5] == ["pods"]:
                if len(parts) == 5:  # list, by job-name label
                    job = parse_qs(url.query)["labelSelector"][0].split("=", 1)[1]
                    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{job}-abcde", "namespace": parts[3]},
                           "spec": {"nodeName": NODE, "containers": cl.jobs[job]["spec"]["template"]["spec"]["containers"]}}
                    return self._send(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [pod]})
                if parts[-1] == "log":
                    with cl.lock:
                        return self._send(200, cl.logs.get(parts[5].rsplit("-", 1)[0], ""), "text/plain")
            return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                    "code": 404, "message": f"{url.path} not served by the stand-in"})

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler


@contextmanager
def serve(cl: Cluster) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(cl))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
