"""`gpuforge:mirror`: every download of the bootstrap goes to the stack's mirror when one is set,
with the same pins and digests; bad entries are refused with the key and the fix."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.bootstrap.versions import load_versions
from gpuforge.cli import main
from gpuforge.common.errors import ConfigError
from gpuforge.components.userdata import stack_user_data
from gpuforge.core.config import parse_stack_config
from gpuforge.core.mirror import REGISTRIES, URL_UPSTREAMS, parse_mirror
from gpuforge.stackfile import load_stack_config
from tests.bootstrap.conftest import PROJECT
from tests.components.stackcfg import base_config

MIRROR = [
    "ubuntu=http://mirror.internal/ubuntu",
    "cuda=http://mirror.internal/cuda/",
    "nvidia-container-toolkit=http://mirror.internal/libnvidia-container/",
    "efa-installer=http://mirror.internal/efa/",
    "aws-ofi-nccl=http://mirror.internal/ofi/",
    "nccl-tests=http://mirror.internal/nccl-tests/",
    "cloudwatch-agent=http://mirror.internal/cwagent/",
    "nvcr.io=registry.internal:5000/nvcr",
    "public.ecr.aws=registry.internal:5000/ecr-public",
]


def _pinned_urls() -> list[str]:
    v = load_versions()
    return [
        v.cuda_repo.url,
        v.nccl_tests.resolved_url,
        v.efa_installer.resolved_url,
        v.aws_ofi_nccl.resolved_url,
        v.nvidia_container_toolkit.repo,
        v.nvidia_container_toolkit.key_url,
        v.cloudwatch_agent.resolved_url,
        v.cloudwatch_agent.key_url,
    ]


def test_every_pinned_url_and_image_has_a_mirror_upstream() -> None:
    """A pin added to versions.yaml from a new site must get a mirror name, or it bypasses the mirror."""
    v = load_versions()
    for url in _pinned_urls():
        assert any(url.startswith(base) for base in URL_UPSTREAMS.values()), url
    for image in [v.aws_cli_image.image, *v.ngc_images]:
        assert image.split("/", 1)[0] in REGISTRIES, image


def _files(stack: str, mirror: list[str] | None) -> dict[str, str]:
    raw: dict[str, Any] = dict(load_stack_config(PROJECT, stack)[0])
    if mirror is not None:
        raw["gpuforge:mirror"] = mirror
    cfg = parse_stack_config(raw, stack)
    rendered = stack_user_data(cfg, f"{stack}-1")
    data = rendered.user_data
    text = (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode()
    assert text == rendered.files["user-data.yaml"]
    return rendered.files


def test_mirror_rewrites_every_download_and_keeps_the_digests() -> None:
    v = load_versions()
    plain = "\n".join(_files("cv-training", None).values())
    files = _files("cv-training", MIRROR)
    text = "\n".join(files.values())
    for url in _pinned_urls():
        host = url.split("/")[2]
        assert host in plain, f"{host} is not downloaded without a mirror: the test no longer covers it"
        assert host not in text, f"{host} is still downloaded with a mirror set"
    efa = files["opt/gpuforge/phases/efa.sh"]
    assert f"http://mirror.internal/efa/aws-efa-installer-{v.efa_installer.version}.tar.gz" in efa
    assert v.efa_installer.sha256 and v.efa_installer.sha256 in efa
    assert v.aws_ofi_nccl.sha512 and v.aws_ofi_nccl.sha512 in efa
    assert f"http://mirror.internal/ofi/v{v.aws_ofi_nccl.version}/aws-ofi-nccl-{v.aws_ofi_nccl.version}.tar.gz" in efa
    assert "http://mirror.internal/cuda/ubuntu2204/x86_64/" in files["opt/gpuforge/phases/driver.sh"]
    # key fingerprints stay pinned: the mirror cannot swap the signing keys
    assert v.cuda_repo.key_fingerprint in files["opt/gpuforge/phases/driver.sh"]
    assert v.nvidia_container_toolkit.key_fingerprint in files["opt/gpuforge/phases/containers.sh"]


def test_mirror_sets_cloud_init_apt_and_pulls_images_from_the_registry_mirror() -> None:
    files = _files("cv-training", MIRROR)
    doc = yaml.safe_load(files["user-data.yaml"])
    want = [{"arches": ["default"], "uri": "http://mirror.internal/ubuntu/"}]
    assert doc["apt"] == {"primary": want, "security": want}
    ngc = files["opt/gpuforge/phases/ngc.sh"]
    assert "docker pull -q registry.internal:5000/nvcr/nvidia/pytorch:24.08-py3" in ngc
    assert "docker tag registry.internal:5000/nvcr/nvidia/pytorch:24.08-py3 \"$img\"" in ngc
    assert "apt" not in yaml.safe_load(_files("cv-training", None)["user-data.yaml"])


def test_no_mirror_leaves_the_user_data_as_before() -> None:
    files = _files("risk-sim", None)
    assert "mirror.internal" not in "\n".join(files.values())
    assert "https://efa-installer.amazonaws.com/" in files["opt/gpuforge/phases/efa.sh"]


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("efa_installer=http://m/efa/", ["unknown upstream 'efa_installer'", "did you mean 'efa-installer'"]),
        ("cuda", ["not NAME=LOCATION"]),
        ("cuda=ftp://m/cuda/", ["not an http(s) URL"]),
        ("nvcr.io=https://registry.internal/nvcr", ["not a registry location"]),
    ],
)
def test_bad_entries_name_the_key_and_the_fix(entry: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_stack_config(base_config(mirror=[entry]), "cv-training")
    assert exc.value.key == "gpuforge:mirror"
    for word in words:
        assert word in exc.value.message
    assert exc.value.hint


def test_an_upstream_given_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="cuda is given twice"):
        parse_stack_config(base_config(mirror=["cuda=http://a/", "cuda=http://b/"]), "cv-training")


def test_stack_file_mirror_as_the_cli_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the real stack-file loader (the value arrives as Pulumi passes arrays): bad input
    is one `error:` line and exit 2, good input renders mirrored URLs."""
    root = PROJECT
    proj = tmp_path / "proj"
    (proj / "stacks").mkdir(parents=True)
    (proj / "Pulumi.yaml").write_text((root / "Pulumi.yaml").read_text())
    stack = yaml.safe_load((root / "stacks/Pulumi.risk-sim.yaml").read_text())
    stack["config"]["gpuforge:mirror"] = ["efa-installr=http://mirror.internal/efa/"]
    (proj / "stacks/Pulumi.risk-sim.yaml").write_text(yaml.safe_dump(stack))
    with pytest.raises(SystemExit) as exc:
        main(["bootstrap", "render", "-s", "risk-sim", "--out", str(tmp_path / "o"), "--project-dir", str(proj)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: gpuforge:mirror: unknown upstream 'efa-installr'") and "Traceback" not in err
    stack["config"]["gpuforge:mirror"] = ["efa-installer=http://mirror.internal/efa"]
    (proj / "stacks/Pulumi.risk-sim.yaml").write_text(yaml.safe_dump(stack))
    with pytest.raises(SystemExit) as exc:
        main(["bootstrap", "render", "-s", "risk-sim", "--out", str(tmp_path / "o"), "--project-dir", str(proj)])
    assert exc.value.code == 0
    assert "http://mirror.internal/efa/aws-efa-installer-" in (tmp_path / "o/opt/gpuforge/phases/efa.sh").read_text()


def test_mirror_url_keeps_the_upstream_layout() -> None:
    m = parse_mirror(["aws-ofi-nccl=http://m:8080/ofi"])
    assert m.url("https://github.com/aws/aws-ofi-nccl/releases/download/v1/x.tar.gz") == "http://m:8080/ofi/v1/x.tar.gz"
    assert m.url("https://efa-installer.amazonaws.com/x.tar.gz") == "https://efa-installer.amazonaws.com/x.tar.gz"
    assert m.image("nvcr.io/nvidia/pytorch:24.08-py3") is None
