"""The package mirror on the rehearsal network: what a site's internal mirror serves, laid out as
`gpuforge:mirror` expects (core/mirror.py), served over HTTP with an access log.

- `ubuntu/`: the Ubuntu archive's stand-in, a Debian-layout archive (suites bookworm,
  -updates, -security, -backports: what cloud-init's Debian sources template names) holding the
  real Debian packages the node installs (tests/rehearsal/root.py MIRROR_PACKAGES) and the
  stand-ins for Ubuntu packages Debian lacks (docker.io, linux-headers of the running kernel).
- `cuda/<distro>/x86_64/`, `libnvidia-container/stable/deb/amd64/`: flat repositories as
  NVIDIA publishes them, with their signing keys (`3bf863cc.pub`, `gpgkey`).
- `efa/`, `aws-ofi-nccl/`, `nccl-tests/`, `cloudwatch-agent/`: the tarballs and the agent .deb
  (+ detached signature) at the vendors' paths.
- `v2/`: a registry (v2 API, manifests only) for the images the bootstrap pulls.

Signing: every repository is signed (InRelease + Release.gpg) with one rehearsal key made per
run. The node trusts it for the archive as an Ubuntu AMI trusts Ubuntu's key (trusted.gpg.d),
and for NVIDIA's repositories and the CloudWatch agent through the bootstrap's own path: it
fetches the key, checks its fingerprint against the pin and uses it with signed-by. The
rehearsal renders the user data with that fingerprint in place of the vendors' (and the stand-in
tarballs' digests in place of the vendors'): the checks run for real, against a key and digests
we hold. No `[trusted=yes]` anywhere.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from gpuforge.bootstrap.nodelock import TARGETS, build_wheel, cache_dir, wheelhouse
from gpuforge.bootstrap.plan import DISTRO
from gpuforge.bootstrap.versions import SlurmForOs, Versions
from gpuforge.common.version import __version__
from gpuforge.core.mirror import GPUFORGE_WHEELS, URL_UPSTREAMS
from tests.rehearsal import standins
from tests.rehearsal.enroot import enroot_caps_deb, enroot_deb
from tests.rehearsal.root import RootImage
from tests.support.httpserve import serve, stop

NODE_PYTHON = "py311"  # the root's python3 (Debian 12): the node install's lock for it
# Pyxis v0.20.0 as released: `git archive --prefix=pyxis-0.20.0/ v0.20.0 | gzip -n9` of NVIDIA/pyxis
# (tag commit 424563865a491f2d8f3c396a095d18db81f1fb07), the source the pyxis phase builds
# against the node's libslurm-dev. Not GitHub's own archive bytes (its digest differs; versions.yaml
# pins none), so the rehearsal pins this file's sha256 and the phase checks it.
PYXIS_SOURCE = Path(__file__).parent / "vendor" / "pyxis-0.20.0.tar.gz"
# The Slurm a Debian 12 node installs (bookworm-security), in place of Ubuntu 24.04's 23.11.4, and
# without slurm-wlm-nvml-plugin (not in Debian's main): gres.conf lists the device files.
DEBIAN_SLURM = SlurmForOs(version="22.05.8", nvml_plugin=False, pmix_package="libpmix-dev")
SUITES = ("bookworm", "bookworm-updates", "bookworm-security", "bookworm-backports")
IMAGE_MANIFEST = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}\n'


def _sh(*args: str, cwd: Path | None = None, input: bytes | None = None, timeout: float = 120) -> bytes:
    return subprocess.run(args, check=True, capture_output=True, cwd=cwd, input=input, timeout=timeout).stdout


@dataclass
class SigningKey:
    home: Path
    fingerprint: str = ""

    def create(self) -> SigningKey:
        self.home.mkdir(mode=0o700, parents=True)
        self._gpg("--passphrase", "", "--quick-gen-key", "gpuforge rehearsal <rehearsal@gpuforge.invalid>",
                  "ed25519", "sign", "never")  # fmt: skip
        cols = self._gpg("--with-colons", "--list-keys").decode()
        self.fingerprint = next(line.split(":")[9] for line in cols.splitlines() if line.startswith("fpr:"))
        return self

    def _gpg(self, *args: str, input: bytes | None = None) -> bytes:
        return _sh("gpg", "--homedir", str(self.home), "--batch", "--yes", "--pinentry-mode", "loopback", *args, input=input)

    def armored(self) -> bytes:
        return self._gpg("--armor", "--export", self.fingerprint)

    def binary(self) -> bytes:
        return self._gpg("--export", self.fingerprint)

    def sign_release(self, directory: Path) -> None:
        release = directory / "Release"
        self._gpg("--clearsign", "-o", str(directory / "InRelease"), str(release))
        self._gpg("--armor", "--detach-sign", "-o", str(directory / "Release.gpg"), str(release))

    def detach_sign(self, path: Path) -> None:
        self._gpg("--detach-sign", "-o", f"{path}.sig", str(path))


@dataclass
class MirrorTree:
    """Builds the mirror's files under `root` for these versions; `pins` are what the rehearsal
    renders the user data with (the same versions, our key fingerprint and tarball digests)."""

    root: Path
    versions: Versions
    image: RootImage
    key: SigningKey  # NVIDIA's repositories and the CloudWatch agent
    archive_key: SigningKey  # the Ubuntu archive's stand-in
    cuda_os: str = "ubuntu-22.04"
    slurm_debs: Path | None = None  # a Slurm stack's packages (root.py ensure_slurm_debs), pyxis and enroot
    pins: Versions | None = None

    def build(self) -> MirrorTree:
        v = self.versions
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / ".debs"
        tmp.mkdir()
        self._archive(tmp)
        distro = DISTRO[self.cuda_os]
        vos = v.for_os(self.cuda_os)  # the driver branch this base image gets (os_overrides)
        self._flat(self._path("cuda", v.cuda_repo.url.format(distro=distro)),
                   standins.cuda_repo_debs(vos, self.cuda_os), key_file=v.cuda_repo.key_file)  # fmt: skip
        # A repository whose driver package fails to install (DKMS build error), for the failure rehearsal.
        self._flat(self.root / "cuda-broken" / distro / "x86_64",
                   standins.cuda_repo_debs(vos, self.cuda_os, broken_driver=True), key_file=v.cuda_repo.key_file)  # fmt: skip
        ctk = self._path("nvidia-container-toolkit", v.nvidia_container_toolkit.repo)
        self._flat(ctk, standins.toolkit_debs(v))
        (self._path("nvidia-container-toolkit", v.nvidia_container_toolkit.key_url)).write_bytes(self.key.armored())
        efa = self._put("efa-installer", v.efa_installer.resolved_url, standins.efa_installer(v, tmp))
        ofi = self._put("aws-ofi-nccl", v.aws_ofi_nccl.resolved_url, standins.ofi_tarball(v))
        self._put("nccl-tests", v.nccl_tests.resolved_url, standins.nccl_tests_tarball(v))
        agent = self._path("cloudwatch-agent", v.cloudwatch_agent.resolved_url)
        agent.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(standins.cloudwatch_agent_deb(v).build(tmp), agent)
        self.key.detach_sign(agent)
        self._put("cloudwatch-agent", v.cloudwatch_agent.key_url, self.key.armored())
        for ref in [v.aws_cli_image.image, *v.ngc_images]:
            host, _, rest = ref.partition("/")
            name, _, tag = rest.rpartition(":")
            prefix = {"nvcr.io": "nvcr", "public.ecr.aws": "ecr-public"}[host]
            path = self.root / "v2" / prefix / name / "manifests" / tag
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(IMAGE_MANIFEST)
        self._node_wheels(tmp)
        slurm: dict[str, object] = {}
        if self.slurm_debs is not None:
            pyxis = self._put("pyxis", v.pyxis.resolved_url, PYXIS_SOURCE.read_bytes())
            enroot = {}
            for pin, deb in ((v.enroot, enroot_deb(v)), (v.enroot_caps, enroot_caps_deb(v))):
                data = deb.build(tmp).read_bytes()
                self._put("enroot", pin.resolved_url, data)
                enroot[pin is v.enroot] = hashlib.sha256(data).hexdigest()
            slurm = {
                "slurm": v.slurm.model_copy(update={"ubuntu_2204": DEBIAN_SLURM, "ubuntu_2404": DEBIAN_SLURM}),
                "pyxis": v.pyxis.model_copy(update={"sha256": hashlib.sha256(pyxis).hexdigest()}),
                "enroot": v.enroot.model_copy(update={"sha256": enroot[True]}),
                "enroot_caps": v.enroot_caps.model_copy(update={"sha256": enroot[False]}),
            }
        shutil.rmtree(tmp)
        fpr = self.key.fingerprint
        self.pins = v.model_copy(update={**slurm,
            "cuda_repo": v.cuda_repo.model_copy(update={"key_fingerprint": fpr}),
            "nvidia_container_toolkit": v.nvidia_container_toolkit.model_copy(update={"key_fingerprint": fpr}),
            "cloudwatch_agent": v.cloudwatch_agent.model_copy(update={"key_fingerprint": fpr}),
            "efa_installer": v.efa_installer.model_copy(update={"sha256": hashlib.sha256(efa).hexdigest()}),
            "aws_ofi_nccl": v.aws_ofi_nccl.model_copy(update={"sha512": hashlib.sha512(ofi).hexdigest()}),
        })  # fmt: skip
        return self

    def _node_wheels(self, tmp: Path) -> None:
        """`gpuforge-wheels/<version>/x86_64/py311/`: the set the deploy uploads to the stack's bucket,
        for the root's python3 (Debian 12: 3.11, the py311 lock; tests/SUBSTITUTIONS.md): the locked
        wheels (pip downloads them once into the node-wheel cache) and gpuforge's wheel built from this
        checkout, so the node installs the operator's version."""
        t = TARGETS[NODE_PYTHON]
        cached = wheelhouse(t, cache_dir(t, __version__), index=os.environ.get("GPUFORGE_LOCK_INDEX", "https://pypi.org/simple"),
                            gpuforge_wheel=build_wheel(tmp / "gpuforge-wheel"), cert=os.environ.get("PIP_CERT"))  # fmt: skip
        shutil.copytree(cached, self.root / GPUFORGE_WHEELS / t.prefix(__version__))

    def entries(self, base_url: str, registry: str, *, cuda: str = "cuda") -> list[str]:
        """The stack's `gpuforge:mirror` entries for this mirror served at `base_url`."""
        return [
            f"ubuntu={base_url}/ubuntu/",
            f"{GPUFORGE_WHEELS}={base_url}/{GPUFORGE_WHEELS}/",
            f"cuda={base_url}/{cuda}/",
            *(f"{name}={base_url}/{name}/" for name in URL_UPSTREAMS if name != "cuda"),
            f"nvcr.io={registry}/nvcr",
            f"public.ecr.aws={registry}/ecr-public",
        ]

    # -- layout

    def _path(self, name: str, upstream_url: str) -> Path:
        """Where the file of `upstream_url` lives on the mirror (as core/mirror.py maps it)."""
        return self.root / name / upstream_url[len(URL_UPSTREAMS[name]):]

    def _put(self, name: str, upstream_url: str, data: bytes) -> bytes:
        path = self._path(name, upstream_url)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return data

    def _flat(self, directory: Path, debs: list[standins.Deb], key_file: str | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for deb in debs:
            deb.build(directory)
        (directory / "Packages").write_bytes(_sh("apt-ftparchive", "packages", ".", cwd=directory))
        (directory / "Release").write_bytes(_sh("apt-ftparchive", "release", ".", cwd=directory))
        self.key.sign_release(directory)
        if key_file:
            (directory / key_file).write_bytes(self.key.armored())

    def _archive(self, tmp: Path) -> None:
        top = self.root / "ubuntu"
        pool = top / "pool" / "main"
        pool.mkdir(parents=True)
        for path in [*self.image.debs.glob("*.deb"), *(self.slurm_debs.glob("*.deb") if self.slurm_debs else ())]:
            shutil.copy(path, pool)
        for deb in standins.archive_debs(self.image.kernel_release):
            deb.build(pool)
        packages = _sh("apt-ftparchive", "packages", "pool", cwd=top)
        for suite in SUITES:
            d = top / "dists" / suite
            (d / "main" / "binary-amd64").mkdir(parents=True)
            (d / "main" / "source").mkdir(parents=True)
            (d / "main" / "binary-amd64" / "Packages").write_bytes(packages if suite == "bookworm" else b"")
            (d / "main" / "source" / "Sources").write_bytes(b"")
            release = _sh(
                "apt-ftparchive", "-o", f"APT::FTPArchive::Release::Suite={suite}",
                "-o", f"APT::FTPArchive::Release::Codename={suite}",
                "-o", "APT::FTPArchive::Release::Components=main",
                "-o", "APT::FTPArchive::Release::Architectures=amd64 source",
                "release", f"dists/{suite}", cwd=top,
            )  # fmt: skip
            (d / "Release").write_bytes(release)
            self.archive_key.sign_release(d)


@dataclass
class Access:
    client: str
    method: str
    path: str
    status: int


@dataclass
class MirrorServer:
    """Serves `root` on (address, port) with an access log the tests read."""

    root: Path
    address: str
    port: int = 8080
    log: list[Access] = field(default_factory=list)
    _server: http.server.ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def start(self) -> MirrorServer:
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a: object, **kw: object) -> None:
                super().__init__(*a, directory=str(outer.root), **kw)  # type: ignore[arg-type]

            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                with outer._lock:
                    outer.log.append(Access(self.client_address[0], self.command, self.path, int(code)))

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = serve(http.server.ThreadingHTTPServer((self.address, self.port), Handler), "rehearsal-mirror")
        return self

    def stop(self) -> None:
        stop(self._server)
        self._server = None

    def downloads(self, client: str | None = None) -> list[Access]:
        """Successful GETs of files (not directory probes), optionally from one node."""
        with self._lock:
            return [a for a in self.log if a.method == "GET" and a.status == 200 and (client is None or a.client == client)]
