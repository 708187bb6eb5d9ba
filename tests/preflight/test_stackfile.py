"""cli/stackfile.py: stack config as the engine would hand it over, and the --pin-az line edit."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuforge.common.errors import InputError
from gpuforge.core.config import parse_stack_config
from gpuforge.stackfile import SECRET_PLACEHOLDER, load_stack_config, set_config_value, stack_names

REPO = Path(__file__).resolve().parents[2]


def write_stack(project: Path, name: str, text: str) -> Path:
    path = project / "stacks" / f"Pulumi.{name}.yaml"
    path.write_text(text)
    return path


def test_shipped_stacks_load_and_parse() -> None:
    names = stack_names(REPO)
    assert {"cv-training", "nlp-inference", "risk-sim"} <= set(names)
    for name in ("cv-training", "nlp-inference", "risk-sim"):
        raw, secrets = load_stack_config(REPO, name)
        assert secrets == []
        cfg = parse_stack_config(raw, name)
        assert cfg.stack == name
        assert cfg.ssh_cidrs == ("10.0.0.0/8",)


def test_encodings_and_project_defaults(project: Path) -> None:
    write_stack(
        project,
        "enc",
        "config:\n  aws:region: us-west-2\n  gpuforge:nodeCount: 3\n  publicIps: false\n"
        "  gpuforge:sshCidrs:\n    - 10.0.0.0/8\n    - 192.168.0.0/16\n"
        "  gpuforge:ngcApiKeyParameter:\n    secure: v1:abcdef\n",
    )
    raw, secrets = load_stack_config(project, "enc")
    assert raw["aws:region"] == "us-west-2"
    assert raw["gpuforge:nodeCount"] == "3"
    assert raw["gpuforge:publicIps"] == "false"  # bare key -> project namespace; bool as text
    assert raw["gpuforge:sshCidrs"] == '["10.0.0.0/8", "192.168.0.0/16"]'
    assert raw["gpuforge:ngcApiKeyParameter"] == SECRET_PLACEHOLDER
    assert secrets == ["gpuforge:ngcApiKeyParameter"]
    assert raw["gpuforge:sshUser"] == "ubuntu"  # Pulumi.yaml default
    # Every optional key has a default in Pulumi.yaml (the CLI requires keys without one); ""
    # is read as unset by core/config.py (tests/components/test_pulumi_conformance.py)
    assert raw["gpuforge:keyName"] == ""


def test_missing_stack_names_known_ones(project: Path) -> None:
    with pytest.raises(InputError) as exc:
        load_stack_config(project, "cv-trainig")
    text = exc.value.render()
    assert "stacks/Pulumi.cv-trainig.yaml not found" in text
    assert "known stacks: cv-training, nlp-inference, risk-sim" in text
    assert "did you mean 'cv-training'" in text


def test_bad_yaml_names_file_and_line(project: Path) -> None:
    write_stack(project, "bad", "config:\n  aws:region: [us-east-1\n")
    with pytest.raises(InputError, match=r"Pulumi\.bad\.yaml: not valid YAML \(line \d+\)"):
        load_stack_config(project, "bad")


def test_non_utf8_stack_file_names_file(project: Path) -> None:
    # `gpuforge stack list` read every stack file and died with a UnicodeDecodeError traceback.
    (project / "stacks" / "Pulumi.bin.yaml").write_bytes(b"\xff\xfeconfig: {}\n")
    with pytest.raises(InputError, match=r"Pulumi\.bin\.yaml: not UTF-8 text"):
        load_stack_config(project, "bin")


def test_null_value_is_refused(project: Path) -> None:
    write_stack(project, "null", "config:\n  gpuforge:keyName:\n")
    with pytest.raises(InputError, match="gpuforge:keyName has no value"):
        load_stack_config(project, "null")


def test_missing_project_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"Pulumi\.yaml not found"):
        stack_names(tmp_path)


def test_set_value_keeps_comments_and_other_keys(project: Path) -> None:
    path = project / "stacks" / "Pulumi.cv-training.yaml"
    before = path.read_text()
    set_config_value(project, "cv-training", "gpuforge:azId", "use1-az6")
    after = path.read_text()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert changed == [("  gpuforge:azId: use1-az4", "  gpuforge:azId: use1-az6")]
    raw, _ = load_stack_config(project, "cv-training")
    assert raw["gpuforge:azId"] == "use1-az6"


def test_set_value_keeps_trailing_comment(project: Path) -> None:
    head = "# head\nconfig:\n  aws:region: us-east-1  # region\n"
    path = write_stack(project, "c", head + "  gpuforge:azId: use1-az1  # old\n")
    set_config_value(project, "c", "gpuforge:azId", "use1-az4")
    assert path.read_text() == head + "  gpuforge:azId: use1-az4  # old\n"


def test_set_value_adds_missing_key(project: Path) -> None:
    path = write_stack(project, "n", "config:\n    aws:region: us-east-1\n")
    set_config_value(project, "n", "gpuforge:azId", "use1-az4")
    assert path.read_text() == "config:\n    gpuforge:azId: use1-az4\n    aws:region: us-east-1\n"


def test_set_value_refuses_flow_style_and_leaves_file(project: Path) -> None:
    text = "config: {aws:region: us-east-1, gpuforge:azId: use1-az1}\n"
    path = write_stack(project, "flow", text)
    with pytest.raises(InputError):
        set_config_value(project, "flow", "gpuforge:azId", "use1-az4")
    assert path.read_text() == text
