"""The NCCL environment of an EFA node, written twice from one list: as a docker `--env-file`
and as a POSIX shell script for /etc/profile.d.

The two formats disagree on quoting. docker passes everything after the first `=` through
literally (docker/cli opts/file.go parseKeyValueFile @ 06f64c00f7679c4881e891db2c0ccd7d3694f136:
"pass the value through, no trimming"), so quotes would become part of the value; a shell
splits `NCCL_NET=AWS Libfabric` into an assignment for a command named `Libfabric`, leaving
NCCL_NET unset, which is the socket fallback this environment exists to forbid. Hence one list,
rendered per format.
"""

from __future__ import annotations

import re
import shlex

from gpuforge.bootstrap.versions import Versions

_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def nccl_env(v: Versions, *, gpudirect_rdma: bool) -> dict[str, str]:
    """NCCL_NET names the plugin, so a missing plugin fails NCCL init instead of falling back to
    sockets. No LD_LIBRARY_PATH: the host finds the libraries through /etc/ld.so.conf.d, and in
    a container a host value would replace the image's own."""
    env = {"FI_PROVIDER": "efa"}
    if gpudirect_rdma:
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    env["NCCL_NET"] = v.aws_ofi_nccl.net_name
    env["NCCL_SOCKET_IFNAME"] = "^lo,docker"
    for key, value in env.items():
        if not _KEY.fullmatch(key) or "\n" in value or value != value.lstrip():
            raise ValueError(f"NCCL env {key}={value!r} cannot be written as a docker env file")
    return env


def env_file(env: dict[str, str]) -> str:
    """`docker run --env-file` format: KEY=VALUE, the value literal."""
    return "".join(f"{k}={v}\n" for k, v in env.items()).rstrip("\n")


def profile_script(env: dict[str, str]) -> str:
    """Sourced by login shells (sh and bash): every value quoted for the shell."""
    head = "# gpuforge NCCL environment for login shells; the same values as /etc/gpuforge/nccl.env.\n"
    return head + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()).rstrip("\n")
