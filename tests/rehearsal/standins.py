"""Stand-in vendor packages for the rehearsal mirror, built with dpkg-deb (and tar for the EFA
installer, aws-ofi-nccl and nccl-tests).

Each stand-in installs the vendor's tools where the real package puts them and names, in its
`imitates` field (kept in the .deb's Description), the vendor file it imitates. Versions come
from gpuforge.bootstrap/versions.yaml, so a pin change moves the stand-ins with it. What a GPU tool prints
is real captured output (tests/validate/fixtures, replayed by tests/validate/replay/_replay.py),
or, for the bootstrap's own queries of the instance's GPUs (name, driver, persistence mode), a
row per GPU made from the name nvidia-smi prints for the catalog model and the pinned driver:
labelled `derived` on stderr, like the replay's derived fixtures.

The hardware a stand-in reports is the instance's, not the package's: the rehearsal bind-mounts
/run/gpuforge-rehearsal/hardware.json (GPU model and count, EFA devices, replay scenario) into
each node, as EC2 gives each instance its devices. Without it nvidia-smi fails as it does on a
node without a GPU.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from gpuforge.bootstrap.versions import Versions

REPO = Path(__file__).resolve().parents[2]
REPLAY = REPO / "tests" / "validate" / "replay"
FIXTURES = REPO / "tests" / "validate" / "fixtures"
SHARE = "/usr/share/gpuforge-rehearsal"  # where stand-ins keep the replay and its fixtures
HARDWARE = "/run/gpuforge-rehearsal/hardware.json"
DAEMON = "#!/bin/sh\n# stand-in daemon: stays up like the vendor's, does nothing\nexec sleep infinity\n"


@dataclass
class Deb:
    name: str
    version: str
    imitates: str
    files: dict[str, str | bytes] = field(default_factory=dict)  # path -> content; executables under bin/ or sbin/
    depends: str = ""
    postinst: str | None = None
    modes: dict[str, int] = field(default_factory=dict)

    def build(self, out: Path) -> Path:
        work = out / f".build-{self.name}"
        shutil.rmtree(work, ignore_errors=True)
        (work / "DEBIAN").mkdir(parents=True)
        for path, content in self.files.items():
            dest = work / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(content.encode() if isinstance(content, str) else content)
            executable = "/bin/" in path or "/sbin/" in path or path.endswith((".sh", "/nvidia-smi"))
            dest.chmod(self.modes.get(path, 0o755 if executable else 0o644))
        control = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            "Architecture: amd64",
            "Maintainer: gpuforge rehearsal <rehearsal@gpuforge.invalid>",
        ]
        if self.depends:
            control.append(f"Depends: {self.depends}")
        control.append(f"Description: gpuforge rehearsal stand-in for {self.name}\n imitates: {self.imitates}")
        (work / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        if self.postinst:
            script = work / "DEBIAN" / "postinst"
            script.write_text("#!/bin/sh\nset -e\n" + self.postinst)
            script.chmod(0o755)
        deb = out / f"{self.name}_{self.version.split(':')[-1]}_amd64.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(work), str(deb)],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        shutil.rmtree(work)
        return deb


def _replay_files(share: str) -> dict[str, str | bytes]:
    """The validate replay (tests/validate/replay/_replay.py) and its captured fixtures, under a
    directory of the package's own (dpkg refuses two packages owning one file)."""
    files: dict[str, str | bytes] = {f"{share}/replay/_replay.py": (REPLAY / "_replay.py").read_text()}
    for f in FIXTURES.iterdir():
        if f.is_file():
            files[f"{share}/fixtures/{f.name}"] = f.read_bytes()
    return files


def _service(description: str, exec_start: str, after: str = "") -> str:
    return textwrap.dedent(f"""\
        [Unit]
        Description={description} (gpuforge rehearsal stand-in)
        {after}
        [Service]
        ExecStart={exec_start}

        [Install]
        WantedBy=multi-user.target
        """)


def _enable(unit: str) -> str:
    """What a Debian maintainer script does for a unit it ships enabled (deb-systemd-helper)."""
    return (f"if [ -d /run/systemd/system ]; then systemctl daemon-reload; "
            f"systemctl enable {unit} >/dev/null 2>&1 || true; systemctl start {unit} || true; fi\n")  # fmt: skip


# nvidia-persistenced (default --persistence-mode) turns persistence mode on for every GPU and
# keeps its pid in /run/nvidia-persistenced (NVIDIA/nvidia-persistenced README, init/ samples).
PERSISTENCED = ("#!/bin/sh\n# stand-in nvidia-persistenced: its pid file is what nvidia-smi's stand-in reads as 'Enabled'\n"
                "mkdir -p /run/nvidia-persistenced\necho $$ >/run/nvidia-persistenced/nvidia-persistenced.pid\n"
                "exec sleep infinity\n")  # fmt: skip

NVIDIA_SMI = r'''#!/usr/bin/python3
"""Stand-in for nvidia-smi (NVIDIA driver package, /usr/bin/nvidia-smi).

Answers the bootstrap's queries about this instance's GPUs (from the hardware file) with one
derived row per GPU, and everything else from real captured output (the validate replay)."""
import json, os, subprocess, sys
HW = "@HARDWARE@"
DRIVER = "@DRIVER@"
PM_FLAG = "/run/nvidia-standin/persistence"
args = sys.argv[1:]
try:
    hw = json.load(open(HW))
except OSError:
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
          "Make sure that the latest NVIDIA driver is installed and running.")
    sys.exit(9)
enabled = os.path.exists(PM_FLAG) or os.path.exists("/run/nvidia-persistenced/nvidia-persistenced.pid")
fields = {"name": hw["gpu_name"], "driver_version": DRIVER,
          "persistence_mode": "Enabled" if enabled else "Disabled", "count": str(hw["gpu_count"])}
if args[:1] == ["-L"]:
    for i in range(hw["gpu_count"]):
        print(f"GPU {i}: {hw['gpu_name']} (UUID: GPU-00000000-0000-0000-0000-{i:012d})")
    sys.exit(0)
if args[:2] == ["-pm", "1"]:
    os.makedirs(os.path.dirname(PM_FLAG), exist_ok=True)
    open(PM_FLAG, "w").close()
    for i in range(hw["gpu_count"]):
        print(f"Enabled persistence mode for GPU 0000000{i}:00:00.0.")
    sys.exit(0)
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
if query is not None and "--format=csv,noheader" in args and all(q in fields for q in query.split(",")):
    print("# gpuforge rehearsal: derived rows (GPU name per catalog capture, pinned driver), not a live GPU",
          file=sys.stderr)
    for _ in range(hw["gpu_count"]):
        print(", ".join(fields[q] for q in query.split(",")))
    sys.exit(0)
env = dict(os.environ, GPUFORGE_REPLAY_SCENARIO=hw["replay_scenario"], GPUFORGE_REPLAY_FIXTURES="@SHARE@/fixtures")
sys.exit(subprocess.call(["python3", "@SHARE@/replay/_replay.py", "nvidia-smi", *args], env=env))
'''

FI_INFO = r'''#!/usr/bin/python3
"""Stand-in for libfabric's fi_info (EFA installer, /opt/amazon/efa/bin/fi_info).

Replays the captured `fi_info -p efa` of a one-EFA instance (ofiwg/libfabric#5689,
tests/validate/fixtures/fi_info_f12_efa.txt) once per EFA device of this instance (efa_0 ->
efa_N: derived when N > 1), filtered by -t as fi_info filters by endpoint type."""
import json, sys
args = sys.argv[1:]
try:
    n = json.load(open("@HARDWARE@")).get("efa_devices", 0)
except OSError:
    n = 0
want = args[args.index("-t") + 1] if "-t" in args else None
if "-p" in args and args[args.index("-p") + 1] != "efa" or n == 0:
    print("fi_getinfo: -61 (No data available)", file=sys.stderr)
    sys.exit(1)
text = open("@SHARE@/fixtures/fi_info_f12_efa.txt").read()
blocks = ["provider:" + b for b in text.split("provider:")[1:]]
if n > 1:
    print(f"# gpuforge rehearsal: captured one-EFA output repeated for {n} devices (derived)", file=sys.stderr)
for i in range(n):
    for b in blocks:
        if want is None or f"type: {want}\n" in b:
            sys.stdout.write(b.replace("efa_0", f"efa_{i}"))
'''


def _replay_tool(tool: str, share: str) -> str:
    return (f'#!/bin/sh\n# stand-in: real captured {tool} output (tests/validate/replay/_replay.py)\n'
            f'scenario=$(python3 -c \'import json;print(json.load(open("{HARDWARE}"))["replay_scenario"])\' 2>/dev/null)\n'
            f'GPUFORGE_REPLAY_SCENARIO=$scenario GPUFORGE_REPLAY_FIXTURES={share}/fixtures '
            f'exec python3 {share}/replay/_replay.py {tool} "$@"\n')  # fmt: skip


def cuda_repo_debs(v: Versions, cuda_os: str, *, broken_driver: bool = False) -> list[Deb]:
    """NVIDIA's CUDA repository (developer.download.nvidia.com/compute/cuda/repos/<distro>/x86_64)."""
    drv, branch = v.nvidia_driver, v.nvidia_driver.branch
    c = v.cuda.for_os(cuda_os)
    share = f"{SHARE}/nvidia-driver"
    smi = NVIDIA_SMI.replace("@HARDWARE@", HARDWARE).replace("@DRIVER@", drv.version).replace("@SHARE@", share)
    driver_postinst = _enable("nvidia-persistenced.service")
    if broken_driver:
        # What a failed DKMS build of the kernel module looks like to dpkg (nvidia-dkms-<branch> postinst).
        driver_postinst = (f'echo "Error! Bad return status for module build on kernel: $(uname -r) (x86_64)" >&2\n'
                           f'echo "Consult /var/lib/dkms/nvidia/{drv.version}/build/make.log for more information." >&2\n'
                           "exit 10\n")  # fmt: skip
    return [
        Deb(f"cuda-drivers-{branch}", drv.deb_version, "cuda-drivers-<branch> metapackage (NVIDIA CUDA repo)",
            depends=f"nvidia-driver-{branch} (= {drv.deb_version}), libxnvctrl0 (= {drv.deb_version})"),
        Deb(f"nvidia-driver-{branch}", drv.deb_version,
            "nvidia-driver-<branch>: /usr/bin/nvidia-smi, nvidia-persistenced and its unit (NVIDIA CUDA repo)",
            files={"/usr/bin/nvidia-smi": smi, "/usr/bin/nvidia-persistenced": PERSISTENCED,
                   "/lib/systemd/system/nvidia-persistenced.service": _service(
                       "NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced"),
                   **_replay_files(share)},
            postinst=driver_postinst),
        # Pulled in by the driver metapackage; not matched by the bootstrap's driver pin regex (finding 6).
        Deb("libxnvctrl0", drv.deb_version, "libxnvctrl0 (NVIDIA CUDA repo), a dependency of cuda-drivers",
            files={"/usr/lib/x86_64-linux-gnu/libXNVCtrl.so.0": b""}),
        Deb(f"nvidia-fabricmanager-{branch}", drv.deb_version,
            "nvidia-fabricmanager-<branch>: /usr/bin/nv-fabricmanager and nvidia-fabricmanager.service",
            files={"/usr/bin/nv-fabricmanager": (
                       '#!/bin/sh\nif [ "$1" = --version ]; then echo "Fabric Manager version is : '
                       f'{drv.version}"; exit 0; fi\nexec sleep infinity\n'),
                   "/lib/systemd/system/nvidia-fabricmanager.service": _service(
                       "NVIDIA fabric manager service", "/usr/bin/nv-fabricmanager")}),
        Deb(c.package, c.version, f"{c.package}: /usr/local/cuda-{c.cuda}/bin/nvcc and headers (NVIDIA CUDA repo)",
            files={f"/usr/local/cuda-{c.cuda}/bin/nvcc": (
                       "#!/bin/sh\n# stand-in nvcc: --version in the format of nvcc 12.4.1 "
                       "('Cuda compilation tools, release 12.4, V12.4.131')\n"
                       'echo "nvcc: NVIDIA (R) Cuda compiler driver"\n'
                       f'echo "Cuda compilation tools, release {c.cuda}, V{c.version.split("-")[0]}"\n'),
                   f"/usr/local/cuda-{c.cuda}/include/cuda_runtime.h": "/* stand-in */\n"}),
        Deb("libnccl2", c.nccl, "libnccl2 (NVIDIA CUDA repo): /usr/lib/x86_64-linux-gnu/libnccl.so.2",
            files={"/usr/lib/x86_64-linux-gnu/libnccl.so.2": b""}),
        Deb("libnccl-dev", c.nccl, "libnccl-dev (NVIDIA CUDA repo): /usr/include/nccl.h",
            depends=f"libnccl2 (= {c.nccl})", files={"/usr/include/nccl.h": "/* stand-in */\n"}),
        Deb(v.dcgm.package, v.dcgm.version, "datacenter-gpu-manager: dcgmi, nv-hostengine, nvidia-dcgm.service",
            files={"/usr/bin/dcgmi": "#!/bin/sh\necho 'stand-in dcgmi: no GPU to diagnose' >&2\nexit 1\n",
                   "/usr/bin/nv-hostengine": DAEMON,
                   "/lib/systemd/system/nvidia-dcgm.service": _service(
                       "NVIDIA DCGM service", "/usr/bin/nv-hostengine")}),
    ]


NVIDIA_CTK = r'''#!/usr/bin/python3
"""Stand-in for nvidia-ctk (nvidia-container-toolkit-base): `runtime configure --runtime=docker
--config=FILE` adds the nvidia runtime to docker's daemon.json as the real command does."""
import json, os, sys
args = sys.argv[1:]
if args[:2] != ["runtime", "configure"] or "--runtime=docker" not in args:
    print(f"nvidia-ctk stand-in: unsupported {args}", file=sys.stderr)
    sys.exit(1)
path = next((a.split("=", 1)[1] for a in args if a.startswith("--config=")), "/etc/docker/daemon.json")
doc = json.load(open(path)) if os.path.exists(path) else {}
doc.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
os.makedirs(os.path.dirname(path), exist_ok=True)
json.dump(doc, open(path, "w"), indent=4)
print(f"INFO[0000] Wrote updated config to {path}")
'''


def toolkit_debs(v: Versions) -> list[Deb]:
    """NVIDIA's libnvidia-container apt repository (nvidia.github.io/libnvidia-container/stable/deb/amd64)."""
    ver = v.nvidia_container_toolkit.version
    return [
        Deb("nvidia-container-toolkit-base", ver, "nvidia-container-toolkit-base: /usr/bin/nvidia-ctk",
            files={"/usr/bin/nvidia-ctk": NVIDIA_CTK,
                   "/usr/bin/nvidia-container-runtime": "#!/bin/sh\nexit 1\n"}),
        Deb("libnvidia-container1", ver, "libnvidia-container1",
            files={"/usr/lib/x86_64-linux-gnu/libnvidia-container.so.1": b""}),
        Deb("libnvidia-container-tools", ver, "libnvidia-container-tools: nvidia-container-cli",
            depends=f"libnvidia-container1 (= {ver})", files={"/usr/bin/nvidia-container-cli": "#!/bin/sh\nexit 1\n"}),
        Deb("nvidia-container-toolkit", ver, "nvidia-container-toolkit: nvidia-container-runtime-hook",
            depends=f"nvidia-container-toolkit-base (= {ver}), libnvidia-container-tools (= {ver})",
            files={"/usr/bin/nvidia-container-runtime-hook": "#!/bin/sh\nexit 1\n"}),
    ]


DOCKER = r'''#!/usr/bin/python3
"""Stand-in for the docker CLI (Ubuntu's docker.io, /usr/bin/docker). No container runs in the
rehearsal: `info` reports the runtimes configured in /etc/docker/daemon.json (as dockerd
does), `pull` fetches the manifest over the registry v2 API (http; a real mirror is https),
`tag`/`image inspect` keep a local image list, `login`/`logout` record nothing."""
import json, os, sys, urllib.request
STORE = "/var/lib/docker/standin-images.json"
args = [a for a in sys.argv[1:] if a not in ("-q", "--quiet")]
images = json.load(open(STORE)) if os.path.exists(STORE) else {}
def save():
    os.makedirs(os.path.dirname(STORE), exist_ok=True)
    json.dump(images, open(STORE, "w"), indent=1)
def running():
    return os.path.exists("/run/docker.pid")
if not args:
    sys.exit(1)
cmd = args[0]
if cmd == "info":
    if not running():
        print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
              "Is the docker daemon running?", file=sys.stderr)
        sys.exit(1)
    try:
        runtimes = sorted(json.load(open("/etc/docker/daemon.json")).get("runtimes", {}))
    except OSError:
        runtimes = []
    print("Server:\n Runtimes: " + " ".join(["io.containerd.runc.v2", *runtimes, "runc"]) + "\n Default Runtime: runc")
elif cmd == "image" and args[1:2] == ["inspect"]:
    ref = args[2]
    if ref not in images:
        print(f"Error: No such image: {ref}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps([images[ref]]))
elif cmd == "pull":
    ref = args[1]
    host, _, rest = ref.partition("/")
    name, _, tag = rest.rpartition(":")
    url = f"http://{host}/v2/{name}/manifests/{tag}"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.oci.image.index.v1+json"})
    try:
        manifest = urllib.request.urlopen(req, timeout=30).read()
    except Exception as exc:
        print(f"Error response from daemon: Get \"{url}\": {exc}", file=sys.stderr)
        sys.exit(1)
    images[ref] = {"RepoTags": [ref], "Manifest": json.loads(manifest)}
    save()
    print(ref)
elif cmd == "tag":
    src, dst = args[1], args[2]
    if src not in images:
        print(f"Error response from daemon: No such image: {src}", file=sys.stderr)
        sys.exit(1)
    images[dst] = dict(images[src], RepoTags=[dst])
    save()
elif cmd == "run":
    # `--pull never` with an image that is not local fails as docker does; a local image would
    # run, which the rehearsal cannot do (no container runtime): say so.
    image = next((a for a in args[1:] if ":" in a and "/" in a and not a.startswith(("-", "/"))), "")
    if "--pull" in args and args[args.index("--pull") + 1] == "never" and image not in images:
        print(f"docker: Error response from daemon: No such image: {image}.", file=sys.stderr)
        sys.exit(125)
    print(f"docker stand-in: would run {image} (no container runtime in the rehearsal)", file=sys.stderr)
    sys.exit(1)
elif cmd in ("login", "logout"):
    sys.stdin.read() if "--password-stdin" in args else None
    print("Login Succeeded" if cmd == "login" else "Removing login credentials")
else:
    print(f"docker stand-in: {cmd} is not imitated (no containers in the rehearsal)", file=sys.stderr)
    sys.exit(1)
'''


def archive_debs(kernel_release: str) -> list[Deb]:
    """Stand-ins for Ubuntu archive packages the rehearsal cannot take from Debian."""
    return [
        Deb("docker.io", "24.0.7-0ubuntu2~22.04.1",
            "Ubuntu's docker.io: /usr/bin/docker, /usr/sbin/dockerd and docker.service (enabled and started)",
            files={"/usr/bin/docker": DOCKER,
                   "/usr/sbin/dockerd": "#!/bin/sh\necho $$ >/run/docker.pid\nexec sleep infinity\n",
                   "/lib/systemd/system/docker.service": _service(
                       "Docker Application Container Engine", "/usr/sbin/dockerd")},
            postinst=_enable("docker.service")),
        # The node runs the host's kernel: its headers package is a stand-in too.
        Deb(f"linux-headers-{kernel_release}", "1.0", "linux-headers-$(uname -r) (Ubuntu archive)",
            files={f"/usr/src/linux-headers-{kernel_release}/Makefile": "# stand-in\n"}),
    ]


def _tar(members: dict[str, tuple[int, str | bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name, (mode, content) in sorted(members.items()):
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


EFA_INSTALLER = r'''#!/bin/bash
# Stand-in for aws-efa-installer/efa_installer.sh. Imitates the behaviour of AWS's script (read in
# vanderlei-filho/efa-installer efa_installer.sh, a copy of the installer's 2019-2022 script; the
# flow is unchanged in 1.34 per AWS's docs): OS check, apt-get install of its dependencies (no
# wait for the dpkg lock), its bundled .debs installed with apt, /opt/amazon/efa_installed_packages,
# the EFA device test skipped when lspci shows no 1d0f:efa device. Its libraries and tools go to
# /opt/amazon/efa and /opt/amazon/openmpi, and /etc/profile.d/efa.sh (efa-profile) puts them on
# the PATH of login shells only.
# NOT imitated: the kernel module (dkms build against linux-headers of every installed kernel,
# initramfs update, modprobe efa): a container has no kernel of its own.
source ./env.sh
[ "$(id -u)" = 0 ] || { echo "This script must be run as root" >&2; exit 1; }
. /etc/os-release
case "$ID-$VERSION_ID" in
  ubuntu-20.04|ubuntu-22.04|ubuntu-24.04|debian-11|debian-12) ;;
  *) echo "Unsupported operating system." >&2; exit 1 ;;
esac
export DEBIAN_FRONTEND=noninteractive
echo "= Starting Amazon Elastic Fabric Adapter Installation Script ="
echo "= EFA Installer Version: ${EFA_INSTALLER_VERSION} ="
echo "== Installing EFA dependencies =="
if ! apt-get install -y pciutils environment-modules tcl libnl-3-200 libnl-3-dev libnl-route-3-200 libnl-route-3-dev; then
  echo "Error: failed to install third-party dependencies, exiting" >&2; exit 1
fi
echo "rehearsal: EFA kernel module (dkms) not built: a container runs the host's kernel"
echo "== Installing EFA packages =="
debs=(DEBS/*.deb)
if ! apt-get install -y "${debs[@]/#/./}"; then
  echo "Error: failed to install EFA packages, exiting" >&2; exit 1
fi
mkdir -p /opt/amazon
cat <<EOF >/opt/amazon/efa_installed_packages
# EFA installer version: ${EFA_INSTALLER_VERSION}
# Debug packages installed: no
# Packages installed:
$(for d in "${debs[@]}"; do basename "${d%.deb}"; done | tr '\n' ' ')
EOF
if ! lspci -n | grep -q "1d0f:efa"; then
  echo "EFA device not detected, skipping test."
fi
cat <<EOF
===================================================
EFA installation complete.
- Please logout/login to complete the installation.
- Libfabric was installed in /opt/amazon/efa
- Open MPI was installed in /opt/amazon/openmpi
===================================================
EOF
'''


def efa_installer(v: Versions, out: Path) -> bytes:
    """aws-efa-installer-<version>.tar.gz with its bundled stand-in .debs."""
    ver = v.efa_installer.version
    debs = [
        Deb("libfabric-aws", "1.22.0amzn1.0", "libfabric-aws (EFA installer DEBS): /opt/amazon/efa/{bin/fi_info,lib,include}",
            files={"/opt/amazon/efa/bin/fi_info": FI_INFO.replace("@HARDWARE@", HARDWARE)
                   .replace("@SHARE@", f"{SHARE}/libfabric"),
                   "/opt/amazon/efa/lib/libfabric.so.1": b"",
                   "/opt/amazon/efa/include/rdma/fabric.h": "/* stand-in */\n",
                   "/etc/ld.so.conf.d/efa.conf": "/opt/amazon/efa/lib\n",
                   f"{SHARE}/libfabric/fixtures/fi_info_f12_efa.txt": (FIXTURES / "fi_info_f12_efa.txt").read_bytes()}),
        Deb("openmpi40-aws", "4.1.6-3", "openmpi40-aws (EFA installer DEBS): /opt/amazon/openmpi/bin/mpirun",
            files={"/opt/amazon/openmpi/bin/mpirun": _replay_tool("mpirun", f"{SHARE}/openmpi"),
                   "/opt/amazon/openmpi/include/mpi.h": "/* stand-in */\n", **_replay_files(f"{SHARE}/openmpi")}),
        Deb("efa-profile", "1.6", "efa-profile (EFA installer DEBS): /etc/profile.d/efa.sh, login shells only",
            files={"/etc/profile.d/efa.sh": "PATH=/opt/amazon/openmpi/bin/:/opt/amazon/efa/bin/:$PATH\n"}),
        Deb("efa-config", "1.17", "efa-config (EFA installer DEBS): memlock limits",
            files={"/etc/security/limits.d/01_efa.conf": "* soft memlock unlimited\n* hard memlock unlimited\n"}),
    ]
    members: dict[str, tuple[int, str | bytes]] = {
        "aws-efa-installer/efa_installer.sh": (0o755, EFA_INSTALLER),
        "aws-efa-installer/env.sh": (0o644, f"EFA_INSTALLER_VERSION={ver}\n"),
    }
    for deb in debs:
        path = deb.build(out)
        members[f"aws-efa-installer/DEBS/{path.name}"] = (0o644, path.read_bytes())
        path.unlink()
    return _tar(members)


OFI_CONFIGURE = r'''#!/bin/sh
# Stand-in for aws-ofi-nccl's configure (v1.9.1-aws configure.ac): the checks that decide
# whether it builds: libfabric (--with-libfabric), CUDA (--with-cuda) and hwloc (CHECK_PKG_HWLOC,
# which fails without hwloc headers), each by compiling a test program with the real compiler.
prefix=/usr/local libfabric= cuda=
for a in "$@"; do case "$a" in
  --prefix=*) prefix=${a#*=} ;; --with-libfabric=*) libfabric=${a#*=} ;; --with-cuda=*) cuda=${a#*=} ;;
esac; done
check() {  # check WHAT HEADER CFLAGS
  printf 'checking for %s... ' "$1"
  if printf '#include <%s>\nint main(void){return 0;}\n' "$2" | cc $3 -x c -E - >/dev/null 2>&1; then echo yes
  else echo no; echo "configure: error: $1 not found" >&2; exit 1; fi
}
command -v cc >/dev/null || { echo "configure: error: no acceptable C compiler found in \$PATH" >&2; exit 1; }
check libfabric rdma/fabric.h "-I$libfabric/include"
check cuda cuda_runtime.h "-I$cuda/include"
check hwloc hwloc.h ""
printf 'PREFIX=%s\n' "$prefix" >config.status
echo "configure: creating Makefile"
'''
OFI_MAKEFILE = """include config.status
all: src/libnccl-net.so
src/libnccl-net.so: src/plugin.c
\tcc -shared -fPIC -o $@ $<
install: all
\tmkdir -p $(PREFIX)/lib
\tcp src/libnccl-net.so $(PREFIX)/lib/libnccl-net.so
"""


def ofi_tarball(v: Versions) -> bytes:
    top = f"aws-ofi-nccl-{v.aws_ofi_nccl.version}"
    return _tar({
        f"{top}/configure": (0o755, OFI_CONFIGURE),
        f"{top}/Makefile": (0o644, OFI_MAKEFILE),
        f"{top}/src/plugin.c": (0o644, "/* stand-in for the AWS OFI NCCL net plugin */\nint ncclNetPlugin_v8;\n"),
    })


NCCL_TESTS_MAKEFILE = """# Stand-in for nccl-tests' Makefile (src/Makefile): needs nvcc in CUDA_HOME, nccl.h in
# NCCL_HOME and, with MPI=1, mpi.h in MPI_HOME; builds build/*_perf (here: real captured output).
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= /usr
MPI ?= 0
all:
\ttest -x $(CUDA_HOME)/bin/nvcc || { echo "make: $(CUDA_HOME)/bin/nvcc: No such file or directory"; exit 2; }
\ttest -f $(NCCL_HOME)/include/nccl.h || { echo "fatal error: nccl.h: No such file or directory"; exit 2; }
\tif [ "$(MPI)" = 1 ]; then test -f $(MPI_HOME)/include/mpi.h || \\
\t  { echo "fatal error: mpi.h: No such file or directory"; exit 2; }; fi
\tmkdir -p build
\tfor t in all_reduce_perf all_gather_perf; do cp replay.sh build/$$t; sed -i "s/@TOOL@/$$t/" build/$$t; chmod 755 build/$$t; done
"""


def nccl_tests_tarball(v: Versions) -> bytes:
    top = f"nccl-tests-{v.nccl_tests.version.lstrip('v')}"
    replay = _replay_tool("@TOOL@", f"{SHARE}/nvidia-driver")  # nccl-tests runs where the driver is
    return _tar({f"{top}/Makefile": (0o644, NCCL_TESTS_MAKEFILE), f"{top}/replay.sh": (0o755, replay)})


def cloudwatch_agent_deb(v: Versions) -> Deb:
    ver = v.cloudwatch_agent.version
    ctl = ("#!/bin/sh\n# stand-in amazon-cloudwatch-agent-ctl: -a fetch-config ... -s loads the config and starts the agent\n"
           'etc=/opt/aws/amazon-cloudwatch-agent/etc\n'
           'for a in "$@"; do case "$a" in file:*) cp "${a#file:}" "$etc/amazon-cloudwatch-agent.json" ;; esac; done\n'
           "systemctl start amazon-cloudwatch-agent\n")  # fmt: skip
    return Deb("amazon-cloudwatch-agent", ver, "amazon-cloudwatch-agent.deb (AWS S3): /opt/aws/amazon-cloudwatch-agent",
               files={"/opt/aws/amazon-cloudwatch-agent/bin/CWAGENT_VERSION": f"{ver}\n",
                      "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl": ctl,
                      "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent": DAEMON,
                      "/etc/systemd/system/amazon-cloudwatch-agent.service": _service(
                          "Amazon CloudWatch Agent", "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent")},
               postinst="mkdir -p /opt/aws/amazon-cloudwatch-agent/etc\n")


def hardware(gpu_name: str, gpu_count: int, efa_devices: int, scenario: str) -> dict[str, object]:
    return {"gpu_name": gpu_name, "gpu_count": gpu_count, "efa_devices": efa_devices, "replay_scenario": scenario}


def host_kernel() -> str:
    return os.uname().release
