"""Pulumi.yaml and every stack file against the Pulumi CLI's own project and stack-config rules.

The rules are ported in cli/conformance/ from pulumi/pulumi at commit
1b5949891b3cefcb9974752b24a5ecef0acc86c8 (pkg/workspace/config.go mergeConfig /
validateStackConfigValue, sdk/go/common/workspace/project.go Validate / ValidateConfigValue and
the schema project.json). The first group of tests replays the CLI's own unit tests
(pkg/workspace/config_project_test.go, same commit) against the port, so the port is checked
against the counterpart's expectations, not ours. The rest apply the port to this project:
Pulumi.yaml, every committed stack, every stack `gpuforge stack new` writes, and the promise that
a Pulumi.yaml default means exactly what leaving the key out means to core/config.py.
These iterate over Pulumi.yaml, so a key another change adds is covered without editing here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import pytest
import yaml

from gpuforge import conformance as pc
from gpuforge.cli import main
from gpuforge.common.errors import ConfigError
from gpuforge.core.config import parse_stack_config
from gpuforge.core.config_schema import RawStackConfig

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
TEAMS = sorted(p.stem for p in (ROOT / "stacks" / "teams").glob("*.yaml"))


def _project(tmp_path: Path, text: str) -> pc.Project:
    path = tmp_path / "Pulumi.yaml"
    path.write_text(text)
    return pc.load_project(path)


def _validate(project: pc.Project, stack_yaml: str, name: str = "dev") -> pc.Report:
    return pc.validate_stack(project, name, pc.load_stack_text(project, stack_yaml))


# --- the CLI's own cases (pkg/workspace/config_project_test.go @ 1b59498) ----------------------


def test_cli_case_stack_value_not_correctly_typed(tmp_path):
    # TestStackConfigErrorsWhenStackValueIsNotCorrectlyTyped
    project = _project(tmp_path, "name: test\nruntime: dotnet\nconfig:\n  values:\n    type: array\n"
                                 "    items:\n      type: string\n    default: [value]\n")
    with pytest.raises(pc.ConformanceError, match=r"^Stack 'dev' with configuration key 'values' must be of type "
                                                  r"'array<string>'$"):
        _validate(project, "config:\n  test:values: someValue\n")


def test_cli_case_integer_type(tmp_path):
    # TestStackConfigIntegerTypeIsCorrectlyValidated
    project = _project(tmp_path, "name: test\nruntime: dotnet\nconfig:\n  importantNumber:\n    type: integer\n")
    _validate(project, "config:\n  test:importantNumber: 20\n")
    with pytest.raises(pc.ConformanceError, match=r"^Stack 'dev' with configuration key 'importantNumber' must be of "
                                                  r"type 'integer'$"):
        _validate(project, "config:\n  test:importantNumber: hello\n")


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (["values"], "Stack 'dev' is missing configuration value 'values'"),
        (["values", "another"], "Stack 'dev' is missing configuration values 'another' and 'values'"),
        (["values", "hello", "world"], "Stack 'dev' is missing configuration values 'hello', 'values' and 'world'"),
    ],
)
def test_cli_case_missing_values(tmp_path, keys, message):
    # TestStackConfigErrorsWhenMissing{,Two,Multiple}StackValueForConfigTypeWithNoDefault
    decl = "".join(f"  {k}:\n    type: array\n    items:\n      type: string\n" for k in keys)
    project = _project(tmp_path, f"name: test\nruntime: dotnet\nconfig:\n{decl}")
    with pytest.raises(pc.ConformanceError) as exc:
        _validate(project, "config:\n  test:other: x\n")
    assert str(exc.value) == message


def test_cli_case_secret(tmp_path):
    # TestStackConfigSecretIsCorrectlyValidated
    project = _project(tmp_path, "name: test\nruntime: dotnet\nconfig:\n  importantNumber:\n    type: integer\n"
                                 "    secret: true\n")
    _validate(project, "config:\n  test:importantNumber:\n    secure: MjA=\n")
    with pytest.raises(pc.ConformanceError, match=r"must be encrypted as it's secret$"):
        _validate(project, "config:\n  test:importantNumber: 20\n")


def test_cli_case_untyped_values_not_validated_and_namespaces(tmp_path):
    # TestUntypedProjectConfigValuesAreNotValidated / TestNamespacedConfigValuesAreInheritedCorrectly
    project = _project(tmp_path, "name: test\nruntime: dotnet\nconfig:\n  instanceSize: t3.micro\n"
                                 "  aws:region:\n    value: us-west-1\n")
    report = _validate(project, "config:\n  test:instanceSize: 9999\n")
    assert pc.program_config(report) == {"test:instanceSize": "9999", "aws:region": "us-west-1"}
    report = _validate(project, "config:\n  instanceSize: t4.large\n")  # bare key: project namespace
    assert pc.program_config(report)["test:instanceSize"] == "t4.large"


def test_stack_with_an_esc_environment_is_not_refused_for_keys_it_may_set(tmp_path):
    # config.go mergeConfig merges the stack's environment before looking for missing keys;
    # environments cannot be opened offline, so the port warns instead of refusing.
    project = _project(tmp_path, "name: test\nruntime: python\nconfig:\n  a:\n    type: string\n")
    report = _validate(project, "environment:\n  - team/prod\nconfig: {}\n")
    assert report.warnings == ["not checked offline (ESC environment may set them): a"]
    with pytest.raises(pc.ConformanceError, match="missing configuration value 'a'"):
        _validate(project, "config: {}\n")


@pytest.mark.parametrize(
    ("config", "message"),
    [  # project.go (*Project).Validate, each branch
        ("  a:\n    type: array\n", "The configuration key 'a' declares an array but does not specify the "
                                    "underlying type via the 'items' attribute"),
        ("  a:\n    type: integer\n    default: many\n",
         "The default value specified for configuration key 'a' is not of the expected type 'integer'"),
        ("  aws:region:\n    type: string\n    value: x\n",
         "Configuration key 'aws:region' is not namespaced by the project and should not define a type"),
        ("  aws:region:\n    default: x\n", "Configuration key 'aws:region' is not namespaced by the project and "
                                             "should not define a default value."),
        ("  a:\n    default: 1\n    value: 2\n", "project config 'a' cannot have both a 'default' and 'value' attribute"),
    ],
)
def test_cli_project_validate(tmp_path, config, message):
    with pytest.raises(pc.ConformanceError) as exc:
        _project(tmp_path, f"name: test\nruntime: python\nconfig:\n{config}")
    assert message in str(exc.value)


def test_cli_project_schema(tmp_path):
    # project.json: a config declaration allows only type/items/description/secret/default/value
    with pytest.raises(pc.ConformanceError, match=r"could not validate .*#/config/a"):
        _project(tmp_path, "name: test\nruntime: python\nconfig:\n  a:\n    type: string\n    defualt: x\n")
    with pytest.raises(pc.ConformanceError, match="project is missing a 'name' attribute"):
        _project(tmp_path, "runtime: python\n")


def test_yaml_is_read_as_yaml_v3_reads_it(tmp_path):
    # The CLI's YAML is gopkg.in/yaml.v3 (YAML 1.2 core): `yes` is a string, so a boolean key refuses it.
    project = _project(tmp_path, "name: test\nruntime: python\nconfig:\n  flag:\n    type: boolean\n    default: false\n")
    _validate(project, "config:\n  test:flag: True\n")
    with pytest.raises(pc.ConformanceError, match="must be of type 'boolean'"):
        _validate(project, "config:\n  test:flag: yes\n")
    assert yaml.safe_load("a: yes")["a"] is True  # what PyYAML (YAML 1.1) would have made of it


# --- this project ----------------------------------------------------------------------------


def test_pulumi_yaml_passes_the_cli_project_rules():
    project = pc.load_project(ROOT / "Pulumi.yaml")
    assert project.name == "gpuforge" and project.stack_config_dir == "stacks"


def test_only_profile_and_az_are_required():
    """A stack with only the keys that have no sensible default passes the CLI."""
    project = pc.load_project(ROOT / "Pulumi.yaml")
    minimal = "config:\n  aws:region: us-east-1\n  gpuforge:profile: cv-training\n  gpuforge:azId: use1-az4\n"
    _validate(project, minimal, "minimal")
    with pytest.raises(pc.ConformanceError, match=r"^Stack 'x' is missing configuration values 'azId' and 'profile'$"):
        _validate(project, "config:\n  aws:region: us-east-1\n", "x")


@pytest.mark.parametrize("stack", STACKS)
def test_committed_stack_passes_the_cli(stack):
    report = pc.check_stack(ROOT, stack)
    assert report.undeclared == [], f"keys the CLI passes on unchecked: {report.undeclared}"
    assert report.warnings == [] and report.unverified == []


@pytest.mark.parametrize("team", TEAMS)
def test_stack_new_output_passes_the_cli(team, tmp_path):
    """What `gpuforge stack new` writes for every team data file and every profile it accepts."""
    from gpuforge.core.profiles import profile_names

    proj = _copy_project(tmp_path)
    written = []
    for prof in profile_names():
        args = ["stack", "new", "--team", team, "--profile", prof, "--project-dir", str(proj), "--force"]
        with pytest.raises(SystemExit) as exc:
            main(args)
        if exc.value.code == 2:  # gpuforge's own refusal (e.g. the team's GPU quota): nothing written
            assert not (proj / "stacks" / f"Pulumi.{team}-{prof}.yaml").exists() or f"{team}-{prof}" in STACKS
            continue
        assert (exc.value.code or 0) == 0, args
        pc.check_stack(proj, f"{team}-{prof}")
        written.append(prof)
    assert written, f"stack new wrote nothing for team {team}"


def test_stack_new_for_a_new_team_without_ssh_passes_the_cli(tmp_path):
    proj = _copy_project(tmp_path)
    (proj / "stacks" / "teams" / "newteam.yaml").write_text(
        "name: newteam\nowner: nt-lead\ncost_center: cc-1\nbudget_usd: 30000\ngpu_quota: 16\nregion: us-east-1\n"
    )
    _run(["stack", "new", "--team", "newteam", "--profile", "cv-training", "--project-dir", str(proj)])
    report = pc.check_stack(proj, "newteam-cv-training")
    assert pc.program_config(report)["gpuforge:sshCidrs"] == "[]"


def _copy_project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, proj / name)
    shutil.copytree(ROOT / "stacks", proj / "stacks")
    return proj


def _run(args: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert (exc.value.code or 0) == 0, args


_TYPE_OF = {str: "string", int: "integer", bool: "boolean", tuple: "array"}


def _pulumi_type(annotation: Any) -> str:
    if get_origin(annotation) in (Union, UnionType):  # X | None
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) is tuple:
        return "array"
    if get_origin(annotation) is Literal:
        return _TYPE_OF[type(get_args(annotation)[0])]
    return _TYPE_OF[annotation]


def test_declared_types_match_the_typed_config():
    project = pc.load_project(ROOT / "Pulumi.yaml")
    for key, field in RawStackConfig.model_fields.items():
        assert project.config[key].type == _pulumi_type(field.annotation), key
        assert not project.config[key].secret or project.config[key].default is None, (
            f"{key}: a secret with a default refuses every stack that leaves it out (config.go validateStackConfigValue)"
        )


def _stack_only(stack: str) -> dict[str, str]:
    project = pc.load_project(ROOT / "Pulumi.yaml")
    text = (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    return {f"{ns}:{k}": v.text for (ns, k), v in pc.load_stack_text(project, text).config.items()}


@pytest.mark.parametrize("stack", STACKS)
def test_every_default_means_what_leaving_the_key_out_means(stack):
    """The CLI hands the program Pulumi.yaml's default for each key a stack leaves out: that
    must resolve to the same StackConfig as the key's absence (core/config.py's default)."""
    project = pc.load_project(ROOT / "Pulumi.yaml")
    own = _stack_only(stack)
    merged = pc.program_config(pc.check_stack(ROOT, stack))
    # the autoscaling keys only count when autoscaling is on (quota dropped: 32 nodes exceed it)
    variants = [own, {k: v for k, v in {**own, "gpuforge:autoscaling": "true"}.items() if k != "gpuforge:gpuQuota"}]
    if own.get("gpuforge:purchaseOption") != "spot":
        variants.append({**own, "gpuforge:purchaseOption": "spot"})
    for base in variants:
        try:
            absent = parse_stack_config(base, stack)
        except ConfigError:
            assert base is not own, "a committed stack must parse"
            continue
        for key, ct in sorted(project.config.items()):
            full = f"gpuforge:{key}"
            if ct.default is None or full in base:
                continue
            given = parse_stack_config({**base, full: pc.default_value(ct.default).text}, stack)
            assert given == absent, f"{full}: Pulumi.yaml default {ct.default!r} differs from leaving it out"
    assert parse_stack_config(merged, stack) == parse_stack_config(own, stack)


# --- gpuforge preview refuses what the CLI refuses ----------------------------------------


@pytest.mark.parametrize(
    ("stack_yaml", "expected"),
    [
        ("config:\n  aws:region: us-east-1\n  gpuforge:profile: cv-training\n",
         "error: Stack 't' is missing configuration value 'azId'"),
        ("config:\n  aws:region: us-east-1\n  gpuforge:profile: cv-training\n  gpuforge:azId: use1-az4\n"
         "  gpuforge:publicIps: yes\n",
         "error: gpuforge:publicIps: Stack 't' with configuration key 'publicIps' must be of type 'boolean'"),
        ("config:\n  aws:region: us-east-1\n  gpuforge:profile: cv-training\n  gpuforge:azId: use1-az4\n"
         "  gpuforge:sshCidrs: 10.0.0.0/8\n",
         "error: gpuforge:sshCidrs: Stack 't' with configuration key 'sshCidrs' must be of type 'array<string>'"),
        ("config:\n  aws:region: us-east-1\n  gpuforge:profile: cv-training\n  gpuforge:azId: use1-az4\n"
         "  gpuforge:budgetEmails: [1, 2]\n",
         "error: gpuforge:budgetEmails: Stack 't' with configuration key 'budgetEmails' must be of type 'array<string>'"),
    ],
    ids=["missing-required", "yaml11-boolean", "scalar-for-array", "numbers-in-string-array"],
)
def test_preview_refuses_what_the_cli_refuses(tmp_path, capsys, stack_yaml, expected):
    proj = _copy_project(tmp_path)
    (proj / "stacks" / "Pulumi.t.yaml").write_text(stack_yaml)
    with pytest.raises(SystemExit) as exc:
        main(["preview", "--stack", "t", "--project-dir", str(proj), "--format", "json"])
    out, err = capsys.readouterr()
    assert exc.value.code == 2, err
    assert out == "" and "Traceback" not in err
    assert sum(line.startswith("error:") for line in err.splitlines()) == 1, err
    assert err.startswith(expected), err
    assert "the Pulumi CLI's own check" in err


def test_preview_refuses_a_pulumi_yaml_the_cli_refuses(tmp_path, capsys):
    proj = _copy_project(tmp_path)
    text = (proj / "Pulumi.yaml").read_text().replace("  nodeCount:\n    type: integer\n    default: -1\n",
                                                      "  nodeCount:\n    type: integer\n    default: all\n")
    assert "default: all" in text
    (proj / "Pulumi.yaml").write_text(text)
    with pytest.raises(SystemExit) as exc:
        main(["preview", "--stack", "cv-training", "--project-dir", str(proj)])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "The default value specified for configuration key 'nodeCount' is not of the expected type 'integer'" in err


def test_program_config_matches_stackfile_loader():
    """gpuforge's own loader (stackfile.py) and the CLI port hand the program the same map."""
    from gpuforge.stackfile import load_stack_config

    for stack in STACKS:
        ours, _ = load_stack_config(ROOT, stack)
        cli = pc.program_config(pc.check_stack(ROOT, stack))
        assert {k: (json.loads(v) if v.startswith("[") else v) for k, v in cli.items()} == {
            k: (json.loads(v) if v.startswith("[") else v) for k, v in ours.items()
        }, stack
