"""Rendering: golden files, EC2's 16 KB limit, cloud-init schema, shellcheck, and profile differences."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuforge.bootstrap.render import EC2_USER_DATA_LIMIT, USER_DATA_FILE, BootstrapError, render_user_data
from gpuforge.bootstrap.versions import VersionsError, load_versions
from gpuforge.components.userdata import stack_user_data
from gpuforge.core.config import StackConfig
from gpuforge.core.profiles import Sharing
from tests.support.golden import check_golden

GOLDEN = Path(__file__).resolve().parent / "golden"
STACKS = ("cv-training", "nlp-inference", "risk-sim")
NODE = "{stack}-node01"  # components.cluster.node_names' first node


def _phases(cfg: StackConfig, node: str | None = None) -> list[str]:
    r = render_user_data(cfg, node)
    assert r.plan is not None
    return [p.name for p in r.plan.phases]


def _with(cfg: StackConfig, **update: object) -> StackConfig:
    return cfg.model_copy(update=update)


def _spot(cfg: StackConfig) -> StackConfig:
    return _with(cfg, fleet=cfg.fleet.model_copy(update={"purchase_option": "spot"}))


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_files_match_golden(stack: str, stack_cfg: dict[str, StackConfig], update_golden: bool) -> None:
    for node, sub in ((NODE.format(stack=stack), "node"), (None, "launch-template")):
        files = stack_user_data(stack_cfg[stack], node).files  # what the stack's nodes boot
        check_golden(GOLDEN / stack / sub, files, f"{stack}/{sub}", "tests/bootstrap", update_golden)


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("os_name", ["ubuntu-22.04", "ubuntu-24.04"])
def test_user_data_fits_ec2_and_is_what_cloud_init_reads(stack: str, os_name: str, stack_cfg: dict[str, StackConfig]) -> None:
    cfg = _with(stack_cfg[stack], os=os_name)
    for node in (NODE.format(stack=stack), None):
        r = stack_user_data(cfg, node)
        assert len(r.user_data) <= EC2_USER_DATA_LIMIT
        text = r.files[USER_DATA_FILE]
        unpacked = gzip.decompress(r.user_data).decode() if r.compressed else r.user_data.decode()
        assert unpacked == text, "the bytes EC2 gets must be the cloud-config we show"
        assert text.startswith("#cloud-config\n")
        doc = yaml.safe_load(text)
        assert doc["runcmd"] == [["/opt/gpuforge/bin/gpuforge-bootstrap"]]
        written = {f["path"].lstrip("/"): f["content"] for f in doc["write_files"]}
        assert written == {k: v for k, v in r.files.items() if k != USER_DATA_FILE}
        assert stack_user_data(cfg, node).user_data == r.user_data, "rendering must be deterministic"


def test_24_04_gets_its_own_cuda_row(stack_cfg: dict[str, StackConfig]) -> None:
    v = load_versions()
    files = render_user_data(_with(stack_cfg["cv-training"], os="ubuntu-24.04"), None).files
    cuda = files["opt/gpuforge/phases/cuda.sh"]
    row = v.cuda.for_os("ubuntu-24.04")
    assert f"{row.package}={row.version}" in cuda and f"libnccl2={row.nccl}" in cuda
    assert "repos/ubuntu2404/x86_64/" in files["opt/gpuforge/phases/driver.sh"]
    # ... and its own driver and EFA installer (versions.yaml os_overrides), also in what validate expects.
    noble = v.for_os("ubuntu-24.04")
    assert f"cuda-drivers-580={noble.nvidia_driver.deb_version}" in files["opt/gpuforge/phases/driver.sh"]
    assert f"aws-efa-installer-{noble.efa_installer.version}.tar.gz" in files["opt/gpuforge/phases/efa.sh"]
    expected = json.loads(files["etc/gpuforge/expected.json"])["versions"]
    assert (expected["driver"], expected["efa_installer"]) == (noble.nvidia_driver.version, noble.efa_installer.version)


def test_oversized_user_data_is_refused_naming_the_size(stack_cfg: dict[str, StackConfig]) -> None:
    # 40,000 hex digits of hash output (about 20 KB gzipped) cannot fit even compressed.
    noise = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(625))
    with pytest.raises(BootstrapError, match=r"is \d+ bytes gzipped \(\d+ plain\); EC2 allows 16384"):
        render_user_data(stack_cfg["cv-training"], "n1", checkpoint_command=f"echo {noise}")


@pytest.mark.skipif(shutil.which("cloud-init") is None, reason="cloud-init not installed (scripts/setup.sh adds it)")
@pytest.mark.parametrize("stack", STACKS)
def test_user_data_passes_cloud_init_schema(stack: str, stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    f = tmp_path / "user-data.yaml"
    f.write_text(stack_user_data(_spot(stack_cfg[stack]), None, account_id="123456789012").files[USER_DATA_FILE])
    cmd = ["cloud-init", "schema", "--config-file", str(f)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Valid" in out.stdout


def _write_tree(files: dict[str, str], root: Path) -> list[Path]:
    scripts = []
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        if rel.endswith(".sh") or "/bin/" in rel:
            scripts.append(p)
    return scripts


@pytest.mark.parametrize("stack", STACKS)
def test_scripts_are_valid_bash_and_pass_shellcheck(stack: str, stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    files = stack_user_data(_spot(stack_cfg[stack]), None, account_id="123456789012").files  # every optional phase on
    assert {"opt/gpuforge/phases/cloudwatch-agent.sh", "opt/gpuforge/phases/spot-watcher.sh"} <= set(files)
    scripts = _write_tree(files, tmp_path)
    assert len(scripts) >= 10
    for s in scripts:
        out = subprocess.run(["bash", "-n", str(s)], capture_output=True, text=True, timeout=30, check=False)
        assert out.returncode == 0, f"{s.relative_to(tmp_path)}: {out.stderr}"
        assert "set -Eeuo pipefail" in files["opt/gpuforge/lib.sh"]
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (scripts/setup.sh adds it)")
    out = subprocess.run(
        ["shellcheck", "-x", "-P", "SCRIPTDIR", "-S", "style", "-f", "gcc", *map(str, scripts)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_no_secret_reaches_the_rendered_text(stack_cfg: dict[str, StackConfig]) -> None:
    cfg = _with(stack_cfg["cv-training"], ngc_api_key_parameter="/gpuforge/ngc-api-key")
    r = render_user_data(cfg, None)
    text = "\n".join(r.files.values())
    assert "/gpuforge/ngc-api-key" in r.files["opt/gpuforge/phases/ngc.sh"], "the parameter's name is rendered"
    # Only the name travels: the key is fetched at boot with the instance role.
    for needle in ("nvapi-", "AKIA", "ASIA", "aws_secret_access_key", "password="):
        assert needle not in text
    assert "--password-stdin" in r.files["opt/gpuforge/phases/ngc.sh"]


def test_profiles_differ_as_they_should(stack_cfg: dict[str, StackConfig]) -> None:
    cv, nlp, risk = (_phases(stack_cfg[s]) for s in STACKS)
    assert "fabric-manager" in cv and "fabric-manager" not in nlp and "fabric-manager" not in risk
    assert "efa" in cv and "efa" in risk and "efa" not in nlp
    assert "data-volume" in risk and "data-volume" not in cv and "data-volume" not in nlp
    assert "mig" not in cv + nlp + risk, "no profile asks for MIG"
    assert cv[0] == "base" and cv[-1] == "self-check"
    cv_files = render_user_data(stack_cfg["cv-training"], None).files
    assert "[ \"$nefa\" -eq 4 ]" in cv_files["opt/gpuforge/phases/self-check.sh"], "p4de: 4 EFA interfaces"
    assert "FI_EFA_USE_DEVICE_RDMA=1" in cv_files["opt/gpuforge/phases/efa.sh"], "p4de has GPUDirect RDMA"
    risk_files = render_user_data(stack_cfg["risk-sim"], None).files
    assert "[ \"$nefa\" -eq 1 ]" in risk_files["opt/gpuforge/phases/self-check.sh"]
    assert "FI_EFA_USE_DEVICE_RDMA" not in risk_files["opt/gpuforge/phases/efa.sh"], "p3dn has no GPUDirect RDMA"
    nlp_text = "\n".join(render_user_data(stack_cfg["nlp-inference"], None).files.values())
    assert "fabricmanager" not in nlp_text and "nvidia-smi -mig" not in nlp_text and "efa_installer" not in nlp_text


def test_mig_layout_only_when_the_gpu_has_it(stack_cfg: dict[str, StackConfig]) -> None:
    cv = stack_cfg["cv-training"]
    mig_profile = cv.profile.model_copy(update={"sharing": Sharing(mode="mig", mig_layout=("3g.40gb", "3g.40gb"))})
    r = render_user_data(_with(cv, profile=mig_profile), None)
    assert r.plan is not None and "mig" in [p.name for p in r.plan.phases]
    assert "-cgi 3g.40gb,3g.40gb -C" in r.files["opt/gpuforge/phases/mig.sh"]
    nlp = stack_cfg["nlp-inference"]
    t4_mig = nlp.profile.model_copy(update={"sharing": Sharing(mode="mig", mig_layout=("1g.10gb",))})
    with pytest.raises(BootstrapError, match="does not fit T4"):
        render_user_data(_with(nlp, profile=t4_mig), None)


def test_bad_inputs_are_refused_clearly(stack_cfg: dict[str, StackConfig]) -> None:
    cv = stack_cfg["cv-training"]
    with pytest.raises(BootstrapError, match=r"not pinned in bootstrap/versions\.yaml"):
        img = cv.profile.model_copy(
            update={"bootstrap": cv.profile.bootstrap.model_copy(update={"container_image": "nvcr.io/x:latest"})}
        )
        render_user_data(_with(cv, profile=img), None)
    with pytest.raises(BootstrapError, match="not a valid hostname"):
        render_user_data(cv, "Node_1")
    with pytest.raises(BootstrapError, match="not an EBS volume id"):
        render_user_data(stack_cfg["risk-sim"], None, data_volume_id="0abc")


def test_preinstalled_driver_verifies_instead_of_installing(stack_cfg: dict[str, StackConfig]) -> None:
    r = render_user_data(_with(stack_cfg["cv-training"], driver_preinstalled=True), None)
    driver = r.files["opt/gpuforge/phases/driver.sh"]
    assert "cuda-drivers-" not in driver and "nvidia-smi -L" in driver
    assert "apt_install nvidia-fabricmanager" not in r.files["opt/gpuforge/phases/fabric-manager.sh"]
    assert '[ "$fm" = "$drv" ]' in r.files["opt/gpuforge/phases/fabric-manager.sh"], "still verified"
    assert r.plan is not None
    versions = r.plan.expected(load_versions())["versions"]
    assert "driver" not in versions and "fabric_manager" not in versions


def test_versions_manifest_errors_name_the_entry(tmp_path: Path) -> None:
    src = yaml.safe_load((Path(__file__).resolve().parents[2] / "bootstrap/versions.yaml").read_text())
    del src["efa_installer"]["source"]
    bad = tmp_path / "versions.yaml"
    bad.write_text(yaml.safe_dump(src))
    with pytest.raises(VersionsError, match=r"efa_installer\.source: Field required"):
        load_versions(bad)
    v = load_versions()
    assert v.efa_installer.sha256 and v.aws_ofi_nccl.sha512, "downloads that run as root carry digests"


def test_node_scripts_carry_no_full_line_comments_but_keep_what_runs() -> None:
    """Comments stay in the templates; on the node they would cost user data (EC2: 16 KB gzipped).
    The shebang, shellcheck directives, the pointer to the template, line-end comments and a '#'
    that is not at the start of a line (${#a[@]}, a URL fragment) stay."""
    from gpuforge.bootstrap.render import strip_shell_comments

    script = (
        "#!/bin/bash\n"
        "# Rendered from bootstrap/templates/x.j2 -- edit the template, not this output.\n"
        "# why this phase exists\n"
        "  # an indented why\n"
        "#\n"
        "# shellcheck disable=SC2016 # literal\n"
        'n=${#a[@]}  # count\n'
        "curl https://h/p#frag\n"
    )
    assert strip_shell_comments(script) == (
        "#!/bin/bash\n"
        "# Rendered from bootstrap/templates/x.j2 -- edit the template, not this output.\n"
        "# shellcheck disable=SC2016 # literal\n"
        'n=${#a[@]}  # count\n'
        "curl https://h/p#frag\n"
    )
