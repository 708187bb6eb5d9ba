"""The `gpuforge` bootstrap phase, run for real: it installs the base gpuforge into
/opt/gpuforge/venv (under a temp root) from the wheel set the deploy uploads, with this host's
python3 -m venv and pip, over real curl, from a stand-in serving that set:

- as the stack's S3 bucket, path-style, answering only a request whose Authorization header is the
  one botocore's S3SigV4Auth computes for it with the instance role's credentials (session token
  signed), with IMDSv2 in front (token, role, credentials, the identity document's account id);
- as `gpuforge:mirror gpuforge-wheels=` (plain HTTP, the air-gapped site).

The wheel set is this host's interpreter's (py311, tests/SUBSTITUTIONS.md): the locked wheels
from the node-wheel cache (downloaded once), gpuforge's wheel built from this checkout. apt-get
and dpkg-query are the bootstrap sandbox's stand-ins (python3-venv is recorded, not installed).
"""

from __future__ import annotations

import datetime
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gpuforge.bootstrap.nodelock import GPUFORGE_LINE, TARGETS, build_wheel, cache_dir, parse_lock, wheelhouse
from gpuforge.common.version import __version__
from gpuforge.components.compute import node_policy
from gpuforge.core.config import StackConfig
from gpuforge.core.mirror import parse_mirror
from tests.bootstrap.bootstrap_sandbox import SECRETS, Sandbox

pytestmark = pytest.mark.slow

ACCOUNT = "123456789012"
ROLE, KEY, TOKEN = "gpuforge-node-role", "ASIANODEINSTALL", "node-session-token"
T = TARGETS["py311"]  # this host's python3 (tests/SUBSTITUTIONS.md)


@dataclass
class StandIn:
    """IMDSv2 + an S3 bucket (SigV4 checked) + a plain HTTP mirror, all serving one wheel set."""

    files: Path
    bucket: str
    key_prefix: str
    region: str = "us-east-1"
    s3_gets: list[str] = field(default_factory=list)
    mirror_gets: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    tamper: dict[str, bytes] = field(default_factory=dict)  # file name -> bytes served instead

    def start(self) -> StandIn:
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                ok = self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
                self._send(200 if ok else 400, b"imds-token")

            def do_GET(self) -> None:
                p = self.path
                if p.startswith("/latest/"):
                    if self.headers.get("X-aws-ec2-metadata-token") != "imds-token":
                        return self._send(401, b"")
                    creds = {"Code": "Success", "AccessKeyId": KEY, "SecretAccessKey": SECRETS["FAKE_AWS_SECRET"], "Token": TOKEN}
                    md = {
                        "/latest/meta-data/iam/security-credentials/": ROLE.encode(),
                        f"/latest/meta-data/iam/security-credentials/{ROLE}": json.dumps(creds).encode(),
                        "/latest/dynamic/instance-identity/document": json.dumps({"accountId": ACCOUNT}).encode(),
                    }
                    return self._send(200, md[p]) if p in md else self._send(404, b"")
                if p.startswith("/mirror/"):
                    stand_in.mirror_gets.append(p)
                    return self._file(p.removeprefix(f"/mirror/{T.prefix(__version__)}"))
                stand_in.s3_gets.append(p)
                want = stand_in.authorization(f"http://{self.headers['Host']}{p}", dict(self.headers.items()))
                if self.headers.get("Authorization") != want:
                    stand_in.refused.append(p)
                    return self._send(403, b"<Error><Code>SignatureDoesNotMatch</Code></Error>")
                bucket, _, key = p.lstrip("/").partition("/")
                if bucket != stand_in.bucket or not key.startswith(stand_in.key_prefix):
                    return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>")
                return self._file(key.removeprefix(stand_in.key_prefix))

            def _file(self, name: str) -> None:
                path = stand_in.files / name
                if "/" in name or not path.is_file():
                    return self._send(404, b"")
                return self._send(200, stand_in.tamper.get(name, path.read_bytes()))

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def authorization(self, url: str, headers: dict[str, str]) -> str:
        """What botocore's S3 signer sends for this GET with the role's credentials at its X-Amz-Date."""
        low = {k.lower(): v for k, v in headers.items()}
        if "x-amz-date" not in low:
            return "(unsigned)"
        when = datetime.datetime.strptime(low["x-amz-date"], "%Y%m%dT%H%M%SZ")
        req = AWSRequest(method="GET", url=url, headers={"X-Amz-Content-SHA256": low.get("x-amz-content-sha256", "")})
        with mock.patch.object(botocore.auth, "get_current_datetime", return_value=when):
            botocore.auth.S3SigV4Auth(Credentials(KEY, SECRETS["FAKE_AWS_SECRET"], TOKEN), "s3", self.region).add_auth(req)
        return str(req.headers["Authorization"])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def wheel_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The py311 set as the deploy stages it: locked wheels (cached), gpuforge's wheel, lock, gpuforge.txt."""
    out = tmp_path_factory.mktemp("node-wheels")
    cached = cache_dir(T, __version__)
    index = os.environ.get("GPUFORGE_LOCK_INDEX", "https://pypi.org/simple")
    whl = build_wheel(tmp_path_factory.mktemp("wheel"))
    wheelhouse(T, cached, index=index, gpuforge_wheel=whl, cert=os.environ.get("PIP_CERT"))
    for f in cached.iterdir():
        shutil.copyfile(f, out / f.name)
    return out


@dataclass
class Node:
    sb: Sandbox
    stand_in: StandIn

    def run_phase(self) -> subprocess.CompletedProcess[str]:
        env = self.sb.env() | {"GPUFORGE_PHASE": "gpuforge", "GPUFORGE_IMDS": self.stand_in.url,
                               "GPUFORGE_S3_ENDPOINT": self.stand_in.url}  # fmt: skip
        (self.sb.root / "var/lib/gpuforge").mkdir(parents=True, exist_ok=True)
        (self.sb.root / "var/lib/gpuforge/changed").unlink(missing_ok=True)
        (self.sb.root / "var/lib/gpuforge/last-error").unlink(missing_ok=True)
        phase = self.sb.root / "opt/gpuforge/phases/gpuforge.sh"
        return subprocess.run(["bash", str(phase)], env=env, capture_output=True, text=True, timeout=600, check=False)

    @property
    def venv(self) -> Path:
        return self.sb.root / "opt/gpuforge/venv"

    def state(self, name: str) -> str:
        path = self.sb.root / "var/lib/gpuforge" / name
        return path.read_text() if path.exists() else ""


def make_node(tmp_path: Path, cfg: StackConfig, wheel_set: Path) -> Iterator[Node]:
    stand_in = StandIn(wheel_set, f"{cfg.bucket_base}-ckpt-{ACCOUNT}-{cfg.region}-an",
                       f"gpuforge-node/{T.prefix(__version__)}", region=cfg.region).start()  # fmt: skip
    try:
        if cfg.mirror:
            cfg = cfg.model_copy(update={"mirror": parse_mirror([f"gpuforge-wheels={stand_in.url}/mirror/"])})
        sb = Sandbox(tmp_path, cfg, "n1", render_kwargs={"gpuforge_install": True, "node_python": "py311"})
        # Real downloads for this phase: the stand-in is a real server on 127.0.0.1.
        (sb.bin / "curl").unlink()
        (sb.bin / "curl").symlink_to(shutil.which("curl") or "/usr/bin/curl")
        yield Node(sb, stand_in)
    finally:
        stand_in.close()


@pytest.fixture
def node(tmp_path: Path, stack_cfg: dict[str, StackConfig], wheel_set: Path) -> Iterator[Node]:
    yield from make_node(tmp_path, stack_cfg["cv-training"], wheel_set)


@pytest.fixture
def mirror_node(tmp_path: Path, stack_cfg: dict[str, StackConfig], wheel_set: Path) -> Iterator[Node]:
    cfg = stack_cfg["cv-training"].model_copy(update={"mirror": parse_mirror(["gpuforge-wheels=http://placeholder/"])})
    yield from make_node(tmp_path, cfg, wheel_set)


def gpuforge_version(n: Node) -> str:
    p = subprocess.run([str(n.venv / "bin" / "gpuforge"), "--version"], capture_output=True, text=True, timeout=120, check=False)
    return p.stdout.strip()


def test_installs_the_operators_version_from_the_bucket_with_signed_requests_and_a_second_run_downloads_nothing(
    node: Node, wheel_set: Path
) -> None:
    r = node.run_phase()
    assert r.returncode == 0, r.stderr[-3000:]
    assert gpuforge_version(node) == f"gpuforge, version {__version__}"
    # every file of the set came from the bucket, each request signed as the SDK signs it
    expected = {T.lock_name, GPUFORGE_LINE, *(e.wheel for e in parse_lock(T.lock_file.read_text()))}
    expected.add(next(f.name for f in wheel_set.glob("gpuforge-*.whl")))
    assert {p.rsplit("/", 1)[1] for p in node.stand_in.s3_gets} == expected
    assert node.stand_in.refused == []
    assert node.state("observed/gpuforge") == __version__
    assert (node.sb.root / "var/lib/gpuforge/changed").exists()
    # a venv of its own: not the system's site-packages, only the base distributions
    cfg_text = (node.venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg_text
    assert not list((node.venv / "lib").glob("python3*/site-packages/pulumi*"))
    assert ["apt-get", "install", "-y", "-q", "--no-install-recommends", "--allow-downgrades", "python3-venv"] in node.sb.calls()
    # second run (the next boot): same version installed, nothing downloaded, nothing changed
    before = len(node.stand_in.s3_gets)
    r2 = node.run_phase()
    assert r2.returncode == 0, r2.stderr[-2000:]
    assert len(node.stand_in.s3_gets) == before
    assert not (node.sb.root / "var/lib/gpuforge/changed").exists()


def test_a_request_signed_with_other_credentials_is_refused_by_the_stand_in(node: Node) -> None:
    """The stand-in is not vacuous: the same GET signed with another secret does not match."""
    url = f"{node.stand_in.url}/{node.stand_in.bucket}/{node.stand_in.key_prefix}{T.lock_name}"
    req = AWSRequest(method="GET", url=url, headers={"X-Amz-Content-SHA256": hashlib.sha256(b"").hexdigest()})
    botocore.auth.S3SigV4Auth(Credentials(KEY, "another-secret", TOKEN), "s3", "us-east-1").add_auth(req)
    good = node.stand_in.authorization(url, dict(req.headers.items()))
    assert good != req.headers["Authorization"] and good.startswith("AWS4-HMAC-SHA256 Credential=ASIANODEINSTALL/")


def test_installs_from_the_mirror(mirror_node: Node) -> None:
    r = mirror_node.run_phase()
    assert r.returncode == 0, r.stderr[-3000:]
    assert gpuforge_version(mirror_node) == f"gpuforge, version {__version__}"
    assert mirror_node.stand_in.s3_gets == [] and mirror_node.stand_in.mirror_gets


@pytest.mark.parametrize("what", ["wheel", "lock"])
def test_a_tampered_file_is_refused_before_anything_is_installed(mirror_node: Node, wheel_set: Path, what: str) -> None:
    name = next(f.name for f in wheel_set.glob("click-*.whl")) if what == "wheel" else T.lock_name
    data = (wheel_set / name).read_bytes()
    mirror_node.stand_in.tamper[name] = data[:-1] + bytes([data[-1] ^ 1])
    r = mirror_node.run_phase()
    assert r.returncode != 0
    assert "sha256 differs" in mirror_node.state("last-error")
    assert not mirror_node.venv.exists()


def test_the_node_role_reads_the_install_prefix_and_cannot_write_under_it() -> None:
    doc = json.loads(node_policy("arn:aws:s3express:us-east-1:1:bucket/d--x-s3", ["arn:aws:s3:::ckpt"], None, None,
                                 "gpuforge-node/0.1.0/x86_64/py310/"))  # fmt: skip
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    assert by_sid["ReadNodeInstall"] == {"Sid": "ReadNodeInstall", "Effect": "Allow", "Action": ["s3:GetObject"],
                                         "Resource": ["arn:aws:s3:::ckpt/gpuforge-node/0.1.0/x86_64/py310/*"]}  # fmt: skip
    deny = by_sid["NodeInstallReadOnly"]
    assert deny["Effect"] == "Deny" and deny["Resource"] == ["arn:aws:s3:::ckpt/gpuforge-node/*"]
    # every write the read-write statement grants on the bucket's objects is denied under the prefix
    assert set(by_sid["ReadWriteClusterObjects"]["Action"]) - {"s3:GetObject"} <= set(deny["Action"])
