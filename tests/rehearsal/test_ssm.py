"""The SSM stand-in answers the bootstrap's own `ssm_get` (lib.sh.j2, rendered for a Slurm stack)
with the credentials the IMDS stand-in hands that instance's role, and only for parameters the
role's policy lists; a request signed with other credentials is refused as AWS refuses it."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.bootstrap.render import render_user_data
from tests.rehearsal.imds import Imds, InstanceMetadata
from tests.slurm.conftest import slurm_stack
from tests.support.ssm import Ssm

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the IMDS stand-in binds to a device)")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def stand_ins() -> Iterator[tuple[Imds, Ssm]]:
    ssm = Ssm("127.0.0.1", port=_port())
    head = ssm.role("cv-training-head", {"/gpuforge/cv-training/slurm/munge-key", "/gpuforge/cv-training/slurm/db-password"})
    ssm.parameters["/gpuforge/cv-training/slurm/munge-key"] = ("SecureString", "bXVuZ2U=")
    ssm.parameters["/gpuforge/cv-training/slurm/db-password"] = ("SecureString", "s3cret")
    ssm.parameters["/gpuforge/cv-training/slurm/hosts/0"] = ("String", "10.0.0.1 cv-training-head")
    imds = Imds("lo", address="127.0.0.1", port=_port())
    imds.instances["127.0.0.1"] = InstanceMetadata("i-0abc", {"Name": "cv-training-head"}, role=head.name,
                                                   credentials=head.imds_credentials())  # fmt: skip
    ssm.start()
    imds.start()
    yield imds, ssm
    imds.stop()
    ssm.stop()


def _ssm_get(tmp_path: Path, imds: Imds, ssm: Ssm, name: str) -> subprocess.CompletedProcess[str]:
    lib = render_user_data(slurm_stack("cv-training"), "cv-training-head").files["opt/gpuforge/lib.sh"]
    (tmp_path / "lib.sh").write_text(lib)
    (tmp_path / "var/lib/gpuforge").mkdir(parents=True)
    env = {"PATH": os.environ["PATH"], "GPUFORGE_ROOT": str(tmp_path), "GPUFORGE_IMDS": f"http://127.0.0.1:{imds.port}",
           "GPUFORGE_SSM_ENDPOINT": ssm.url}  # fmt: skip
    return subprocess.run(["bash", "-c", f'. {tmp_path}/lib.sh; ssm_get "$1"', "-", name],
                          env=env, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def test_ssm_get_reads_what_the_role_may_read(tmp_path: Path, stand_ins: tuple[Imds, Ssm]) -> None:
    imds, ssm = stand_ins
    r = _ssm_get(tmp_path, imds, ssm, "/gpuforge/cv-training/slurm/db-password")
    assert (r.returncode, r.stdout) == (0, "s3cret\n"), r.stderr
    assert ssm.requests[-1] == ("127.0.0.1", "cv-training-head", "/gpuforge/cv-training/slurm/db-password", 200)


def test_a_parameter_outside_the_roles_policy_is_refused(tmp_path: Path, stand_ins: tuple[Imds, Ssm]) -> None:
    imds, ssm = stand_ins
    r = _ssm_get(tmp_path, imds, ssm, "/gpuforge/cv-training/slurm/hosts/0")
    assert r.returncode != 0 and r.stdout == ""
    assert ssm.requests[-1][3] == 400 and ssm.requests[-1][1] == "cv-training-head"


def test_a_request_signed_with_other_credentials_is_refused(tmp_path: Path, stand_ins: tuple[Imds, Ssm]) -> None:
    imds, ssm = stand_ins
    imds.instances["127.0.0.1"].credentials = {**imds.instances["127.0.0.1"].credentials, "SecretAccessKey": "wrong"}
    r = _ssm_get(tmp_path, imds, ssm, "/gpuforge/cv-training/slurm/db-password")
    assert r.returncode != 0 and r.stdout == ""
    assert ssm.requests[-1] == ("127.0.0.1", "", "/gpuforge/cv-training/slurm/db-password", 400)
