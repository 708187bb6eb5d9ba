"""The Pulumi CLI's stack-config rules (Pulumi.<stack>.yaml and the merge `pulumi up` runs),
ported from pulumi/pulumi at commit 1b5949891b3cefcb9974752b24a5ecef0acc86c8 (files read with `git show` in a fetched mirror):

- sdk/go/common/workspace/loaders.go `LoadProjectStackBytes` / `stackConfigNamespacedWithProject`
  / `checkForEmptyConfig`; sdk/go/common/resource/config/key.go `ParseKey`;
  sdk/go/common/resource/config/object.go `unmarshalObject` / `MarshalString` (how a YAML value
  becomes the text the CLI checks: scalars as text, lists and maps as JSON, `secure:` as secret).
- pkg/workspace/config.go `mergeConfig` / `validateStackConfigValues` /
  `validateStackConfigValue` / `missingStackConfigurationKeysError` (required keys, declared
  types including arrays and `items`, secrets). The error texts are the CLI's, word for word.

A stack key that Pulumi.yaml does not declare passes the CLI untouched, so `Report.undeclared`
lists it as a finding, not an error. Not ported: ESC environments (`environment:` in a stack
file; merged before validation in the CLI), decryption of `secure:` values (a secret's type can
only be checked when it is a string).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuforge.conformance.goyaml import load_yaml
from gpuforge.conformance.project import (
    STRING,
    ConformanceError,
    Project,
    full_type_name,
    load_project,
    validate_config_value,
)


@dataclass(frozen=True)
class Value:
    """config/value.go Value: the text the CLI keeps for a key, and whether it is secret/object."""

    text: str
    secure: bool = False
    object: bool = False


def _go_json(value: Any) -> str:
    # encoding/json as Go marshals the decoded value: whole floats print without ".0".
    def norm(v: Any) -> Any:
        if isinstance(v, float) and math.isfinite(v) and v == math.trunc(v) and abs(v) < 1e21:
            return int(v)
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {str(k): norm(x) for k, x in v.items()}
        return v

    return json.dumps(norm(value), separators=(",", ":"), sort_keys=True)


def _is_secure(v: Any) -> bool:
    return isinstance(v, dict) and len(v) == 1 and isinstance(v.get("secure"), str)


def _contains_secure(v: Any) -> bool:
    if _is_secure(v):
        return True
    if isinstance(v, dict):
        return any(_contains_secure(x) for x in v.values())
    if isinstance(v, list):
        return any(_contains_secure(x) for x in v)
    return False


def to_value(raw: Any) -> Value:
    """object.go unmarshalObject + MarshalString for one stack-file value."""
    if _is_secure(raw):
        return Value(text=raw["secure"], secure=True)
    if raw is None:
        return Value(text="")  # checkForEmptyConfig: "currently treated as an empty string"
    if isinstance(raw, bool):
        return Value(text="true" if raw else "false")
    if isinstance(raw, (int, float)):
        return Value(text=_go_json(raw))
    if isinstance(raw, str):
        return Value(text=raw)
    if isinstance(raw, (list, dict)):
        return Value(text=_go_json(raw), secure=_contains_secure(raw), object=True)
    return Value(text=str(raw))  # e.g. a YAML-tagged timestamp


def parse_key(key: str) -> tuple[str, str]:
    """config/key.go ParseKey: `<namespace>:<name>` or `<namespace>:config:<name>`."""
    parts = key.split(":")
    if len(parts) == 2:
        return parts[0], parts[1]
    if len(parts) == 3 and parts[1] == "config" and parts[0] and parts[2]:
        return parts[0], parts[2]
    raise ConformanceError(
        f"could not parse {key} as a configuration key (configuration keys should be of the form `<namespace>:<name>`)"
    )


@dataclass
class StackFile:
    config: dict[tuple[str, str], Value]
    warnings: list[str] = field(default_factory=list)
    has_environment: bool = False


def load_stack_text(project: Project, text: str) -> StackFile:
    """loaders.go LoadProjectStackBytes: bare keys take the project namespace; nulls warn."""
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConformanceError(f"could not unmarshal the stack file: {exc}") from None
    if raw is None:
        return StackFile(config={})
    if not isinstance(raw, dict):
        raise ConformanceError(f"expected project to be an object, was '{type(raw).__name__}'")
    block = raw.get("config")
    out: dict[tuple[str, str], Value] = {}
    warnings: list[str] = []
    if isinstance(block, dict):
        empty = [str(k) for k, v in block.items() if v is None]
        if empty:
            warnings.append(f"No value for configuration key{'s' if len(empty) > 1 else ''} "
                            + ", ".join(f'"{k}"' for k in empty))
        for key, value in block.items():
            text_key = str(key)
            full = text_key if ":" in text_key else f"{project.name}:{text_key}"
            out[parse_key(full)] = to_value(value)
    elif block is not None:
        raise ConformanceError("config: expected a map of configuration keys")
    return StackFile(config=out, warnings=warnings, has_environment="environment" in raw)


def _project_key(project: Project, key: str) -> tuple[str, str]:
    # config.go parseConfigKey
    return parse_key(key) if ":" in key else (project.name, key)


def _full(project: Project, key: str) -> str:
    ns, name = _project_key(project, key)
    return f"{ns}:{name}"


def _missing_keys_error(missing: list[str], stack: str) -> ConformanceError:
    # config.go missingStackConfigurationKeysError / formatMissingKeys
    if len(missing) == 1:
        return ConformanceError(f"Stack '{stack}' is missing configuration value '{missing[0]}'")
    keys = sorted(missing)
    listed = ", ".join(f"'{k}'" for k in keys[:-1])
    listed = f"{listed} and '{keys[-1]}'" if len(keys) > 2 else f"'{keys[0]}' and '{keys[1]}'"
    return ConformanceError(f"Stack '{stack}' is missing configuration values {listed}")


def default_value(raw: Any) -> Value:
    # config.go createConfigValue: primitives as fmt %v text, everything else as JSON
    if isinstance(raw, bool):
        return Value(text="true" if raw else "false")
    if isinstance(raw, (str, int)):
        return Value(text=str(raw))
    return Value(text=_go_json(raw), object=True)


@dataclass
class Report:
    """The merged config the program would receive, and what the CLI would not look at."""

    config: dict[tuple[str, str], Value]
    warnings: list[str]
    undeclared: list[str]  # project-namespace keys Pulumi.yaml does not declare (the CLI passes them on)
    unverified: list[str]  # typed secrets whose plaintext type cannot be checked without the passphrase


def validate_stack(project: Project, stack_name: str, stack: StackFile) -> Report:
    """config.go ValidateStackConfigAndApplyProjectConfig (mergeConfig with validate=true).

    Raises ConformanceError with the CLI's message on the first refusal, in the CLI's order:
    all missing required keys at once, then per key (sorted) secrecy, then type.
    """
    merged = dict(stack.config)
    missing: list[str] = []
    for key in sorted(project.config):
        ct = project.config[key]
        full = _project_key(project, key)
        found = full in merged
        if not found and ct.value is None and ct.default is None and full[0] == project.name:
            missing.append(key)
            continue
        if not found and (ct.value is not None or ct.default is not None):
            merged[full] = default_value(ct.default if ct.default is not None else ct.value)
    warnings = list(stack.warnings)
    if missing and stack.has_environment:
        # The CLI merges the stack's ESC environments first; they may hold these keys, and they
        # cannot be opened offline. Say so rather than refuse what the CLI might accept.
        warnings.append(f"not checked offline (ESC environment may set them): {', '.join(sorted(missing))}")
    elif missing:
        raise _missing_keys_error(missing, stack_name)

    unverified: list[str] = []
    for key in sorted(project.config):  # validateStackConfigValues
        ct = project.config[key]
        if ct.type is None:
            continue
        if _project_key(project, key) not in merged:  # left to an ESC environment (warned above)
            continue
        value = merged[_project_key(project, key)]
        if ct.secret and not value.secure:
            raise ConformanceError(
                f"Stack '{stack_name}' with configuration key '{key}' must be encrypted as it's secret",
                _full(project, key),
            )
        if value.secure and not value.object:
            # The CLI checks the decrypted text; a string type accepts any text, others need the plaintext.
            if ct.type != STRING:
                unverified.append(key)
            continue
        content: Any = value.text
        if value.object:
            if value.secure:
                unverified.append(key)
                continue
            content = json.loads(value.text)
        if not validate_config_value(ct.type, ct.items, content):
            raise ConformanceError(
                f"Stack '{stack_name}' with configuration key '{key}' must be of type '{full_type_name(ct.type, ct.items)}'",
                _full(project, key),
            )
    declared = {_project_key(project, k) for k in project.config}
    undeclared = sorted(f"{ns}:{name}" for ns, name in stack.config if ns == project.name and (ns, name) not in declared)
    return Report(config=merged, warnings=warnings, undeclared=undeclared, unverified=unverified)


def check_stack(project_dir: Path, stack_name: str, stack_path: Path | None = None) -> Report:
    """Load Pulumi.yaml and the stack's file as `pulumi up --stack NAME` does, and validate.

    `stack_path` defaults to <stackConfigDir>/Pulumi.<stack>.yaml; a missing file is an empty
    stack (loaders.go LoadProjectStack), which the required-key rule then judges.
    """
    project_dir = Path(project_dir)
    project = load_project(project_dir / "Pulumi.yaml")
    path = stack_path or project_dir / (project.stack_config_dir or ".") / f"Pulumi.{stack_name}.yaml"
    text = path.read_text() if path.is_file() else ""
    return validate_stack(project, stack_name, load_stack_text(project, text))


def program_config(report: Report) -> dict[str, str]:
    """`ns:key` -> text, the flat map the engine hands the program (secrets stay ciphertext)."""
    return {f"{ns}:{name}": v.text for (ns, name), v in report.config.items()}
