"""The Pulumi CLI's project and stack-config rules, ported from its source so they run here.

`pulumi up --stack NAME` loads Pulumi.yaml and stacks/Pulumi.<stack>.yaml and refuses the run,
before the program starts, on what these rules refuse. The CLI cannot be installed on this
machine, so the rules are ported line by line from pulumi/pulumi at commit
1b5949891b3cefcb9974752b24a5ecef0acc86c8 (files read with `git show` in a fetched mirror):

- sdk/go/common/workspace/loaders.go `LoadProjectBytes`: ValidateProject, then
  RewriteConfigPathIntoStackConfigDir, RewriteShorthandConfigValues, then `Project.Validate`.
- sdk/go/common/workspace/project.go `ValidateProject` (name check, then the JSON schema
  sdk/go/common/workspace/project.json, vendored verbatim as cli/vendor/pulumi/project.json),
  `Project.Validate` (default vs value, arrays need `items`, typed defaults must match their
  type, keys of other namespaces may only carry a `value`), `ValidateConfigValue`,
  `InferFullTypeName`, `configKeyIsNamespacedByProject`.
- sdk/go/common/workspace/loaders.go `LoadProjectStackBytes` / `stackConfigNamespacedWithProject`
  / `checkForEmptyConfig`; sdk/go/common/resource/config/key.go `ParseKey`;
  sdk/go/common/resource/config/object.go `unmarshalObject` / `MarshalString` (how a YAML value
  becomes the text the CLI checks: scalars as text, lists and maps as JSON, `secure:` as secret).
- pkg/workspace/config.go `mergeConfig` / `validateStackConfigValues` /
  `validateStackConfigValue` / `missingStackConfigurationKeysError` (required keys, declared
  types including arrays and `items`, secrets). The error texts are the CLI's, word for word.

What the CLI does NOT refuse is not refused here either: a stack key that Pulumi.yaml does not
declare (`gpuforg:nodeCount`, `gpuforge:nodeCont`) passes the CLI untouched and reaches the
program, so `Report.undeclared` lists such keys as findings, not errors (core/config.py
refuses unknown `gpuforge:` keys itself). Provider keys (`aws:region`) are checked by the
provider plugin, not by these rules.

Not ported: ESC environments (`environment:` in a stack file; merged before validation in the
CLI), decryption of `secure:` values (a secret's type can only be checked when it is a string).
The YAML reader follows yaml.v3 (YAML 1.2 core schema: `yes`/`on` are strings, not booleans),
which is the parser the CLI uses (sdk/go/common/encoding/marshal.go).

This module is standalone: it imports nothing from components/ or validate/, and they do not
import it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from gpuforge.common.errors import GpuforgeError

PULUMI_COMMIT = "1b5949891b3cefcb9974752b24a5ecef0acc86c8"

_ARRAY, _INTEGER, _STRING, _BOOLEAN, _OBJECT = "array", "integer", "string", "boolean", "object"


class ConformanceError(Exception):
    """What the CLI would print; `str()` is the CLI's message, `key` the one config key it names."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


# ---------------------------------------------------------------------------------------------
# YAML as yaml.v3 reads it (YAML 1.2 core schema) rather than PyYAML's YAML 1.1.


class _GoYamlLoader(yaml.SafeLoader):
    pass


_DROPPED = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:null",
            "tag:yaml.org,2002:timestamp"}
_GoYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _DROPPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_GoYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_GoYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_GoYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+|0o[0-7]+)$"), list("-+0123456789")
)
_GoYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."),
)


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    text = str(loader.construct_scalar(node))  # type: ignore[arg-type]
    if text.startswith(("0x", "0o")):
        return int(text, 0)
    return int(text, 10)


_GoYamlLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def load_yaml(text: str) -> Any:
    """Parse YAML as the CLI's yaml.v3 would for `any` (YAML 1.2 core scalars)."""
    return yaml.load(text, Loader=_GoYamlLoader)  # a SafeLoader subclass: no arbitrary objects


# ---------------------------------------------------------------------------------------------
# Project (Pulumi.yaml)


@dataclass(frozen=True)
class ItemsType:
    type: str
    items: ItemsType | None = None


@dataclass(frozen=True)
class ConfigType:
    """project.go ProjectConfigType. `default`/`value` are None when absent (Go's nil)."""

    type: str | None = None
    description: str = ""
    items: ItemsType | None = None
    default: Any = None
    value: Any = None
    secret: bool = False


@dataclass(frozen=True)
class Project:
    name: str
    config: dict[str, ConfigType]
    stack_config_dir: str = ""


@lru_cache(maxsize=1)
def project_schema() -> dict[str, Any]:
    return dict(json.loads((Path(__file__).parent / "vendor" / "pulumi" / "project.json").read_text()))


def validate_project(raw: Any) -> None:
    """project.go ValidateProject: `name`, then the project JSON schema."""
    if not isinstance(raw, dict):
        raise ConformanceError(f"expected project to be an object, was '{type(raw).__name__}'")
    if "name" not in raw:
        raise ConformanceError("project is missing a 'name' attribute")
    if not isinstance(raw["name"], str) or raw["name"] == "":
        raise ConformanceError("project is missing a non-empty string 'name' attribute")
    import jsonschema  # the Go CLI uses santhosh-tekuri/jsonschema on the same schema (draft 2020-12)

    validator = jsonschema.Draft202012Validator(project_schema())
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        # The CLI prefixes each cause with its JSON pointer (`#/config/x: ...`); the message
        # text comes from the Python validator, not the Go one, so only the location is verbatim.
        raise ConformanceError(
            "; ".join(f"#/{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in errors)
        )


def _is_primitive(value: Any) -> bool:
    # project.go isPrimitiveValue: string, int, bool (a YAML float is not one of them)
    return isinstance(value, (str, bool, int))


def namespaced_by_project(project_name: str, key: str) -> bool:
    """project.go configKeyIsNamespacedByProject."""
    return ":" not in key or key.startswith(project_name + ":")


def _items(raw: Any) -> ItemsType | None:
    if not isinstance(raw, dict):
        return None
    return ItemsType(type=str(raw.get("type", "")), items=_items(raw.get("items")))


def load_project(path: Path) -> Project:
    """loaders.go LoadProjectBytes for a YAML Pulumi.yaml."""
    try:
        raw = load_yaml(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ConformanceError(f"could not unmarshal '{path}': {exc}") from None
    try:
        validate_project(raw)
    except ConformanceError as exc:
        raise ConformanceError(f"could not validate '{path}': {exc}") from None
    name = raw["name"]
    config = raw.get("config")
    stack_config_dir = raw.get("stackConfigDir")
    # RewriteConfigPathIntoStackConfigDir
    if isinstance(config, str):
        if stack_config_dir is not None:
            raise ConformanceError(
                "Should not use both config and stackConfigDir to define the stack directory. "
                "Use only stackConfigDir instead."
            )
        stack_config_dir, config = config, None
    types: dict[str, ConfigType] = {}
    for raw_key, raw_spec in (config or {}).items():
        key = str(raw_key)
        spec = raw_spec
        if _is_primitive(spec) or isinstance(spec, list):  # RewriteShorthandConfigValues
            spec = {"default": spec} if namespaced_by_project(name, key) else {"value": spec}
        if not isinstance(spec, dict):
            continue
        types[key] = ConfigType(
            type=spec.get("type"),
            description=str(spec.get("description") or ""),
            items=_items(spec.get("items")),
            default=spec.get("default"),
            value=spec.get("value"),
            secret=bool(spec.get("secret", False)),
        )
    project = Project(name=name, config=types, stack_config_dir=str(stack_config_dir or ""))
    try:
        check_project(project)
    except ConformanceError as exc:
        raise ConformanceError(f"could not unmarshal '{path}': {exc}") from None
    return project


def check_project(project: Project) -> None:
    """project.go (*Project).Validate."""
    if not project.name:
        raise ConformanceError("project is missing a 'name' attribute")
    for key, ct in project.config.items():
        if ct.default is not None and ct.value is not None:
            raise ConformanceError(f"project config '{key}' cannot have both a 'default' and 'value' attribute")
        if namespaced_by_project(project.name, key):
            if ct.type == _ARRAY and ct.items is None:
                raise ConformanceError(
                    f"The configuration key '{key}' declares an array "
                    "but does not specify the underlying type via the 'items' attribute"
                )
            if ct.type is not None and ct.default is not None:
                if not validate_config_value(ct.type, ct.items, ct.default):
                    raise ConformanceError(
                        f"The default value specified for configuration key '{key}' is not of the expected type "
                        f"'{full_type_name(ct.type, ct.items)}'"
                    )
        else:
            if ct.type is not None:
                raise ConformanceError(f"Configuration key '{key}' is not namespaced by the project and should not define a type")
            if ct.default is not None:
                raise ConformanceError(
                    f"Configuration key '{key}' is not namespaced by the project and should not define a default value. "
                    "Did you mean to use the 'value' attribute instead of 'default'?"
                )
            if ct.value is None:
                raise ConformanceError(f"Configuration key '{key}' is namespaced and must provide an attribute 'value'")


def full_type_name(type_name: str, items: ItemsType | None) -> str:
    """project.go InferFullTypeName."""
    if items is not None:
        return f"array<{full_type_name(items.type, items.items)}>"
    return type_name


_GO_ATOI = re.compile(r"[+-]?[0-9]+")


def validate_config_value(type_name: str, items: ItemsType | None, value: Any) -> bool:
    """project.go ValidateConfigValue (Go types: bool, int, float64, string, []any, map[string]any)."""
    if type_name == _STRING:
        return isinstance(value, str)
    if type_name == _INTEGER:
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return True
        if isinstance(value, float):  # a whole float is accepted (YAML/JSON numbers)
            return math.isfinite(value) and value == math.trunc(value)
        if isinstance(value, str):  # strconv.Atoi: base 10, optional sign, fits an int64
            return bool(_GO_ATOI.fullmatch(value)) and -(2**63) <= int(value) < 2**63
        return False
    if type_name == _BOOLEAN:
        if isinstance(value, str):
            return value in ("true", "false")
        return isinstance(value, bool)
    if type_name == _OBJECT:
        return isinstance(value, dict)
    if not isinstance(value, list) or items is None:
        return False
    return all(validate_config_value(items.type, items.items, item) for item in value)


# ---------------------------------------------------------------------------------------------
# Stack file (Pulumi.<stack>.yaml) and the merge/validation `pulumi up` runs


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
            if ct.type != _STRING:
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


class CliRefusal(GpuforgeError):
    """A stack the Pulumi CLI would refuse before the program runs: exit 2, the CLI's reason."""


def _hint(message: str, stack: str) -> str:
    if "is missing configuration value" in message:
        return f"set the key(s) in stacks/Pulumi.{stack}.yaml, or give them a `default` in Pulumi.yaml"
    if "must be encrypted as it's secret" in message:
        return "set it with `pulumi config set --secret gpuforge:<key> VALUE`"
    if "must be of type" in message:
        return f"write the value in stacks/Pulumi.{stack}.yaml as the type Pulumi.yaml declares"
    if "could not parse" in message:
        return "write config keys as `<namespace>:<name>`, e.g. gpuforge:nodeCount"
    return "fix Pulumi.yaml (pulumi/pulumi sdk/go/common/workspace/project.json and project.go Validate)"


def require_conformance(project_dir: Path, stack: str, stack_path: Path | None = None) -> Report:
    """check_stack, with a refusal rendered as one `error:` line naming the CLI's reason."""
    try:
        return check_stack(project_dir, stack, stack_path)
    except ConformanceError as exc:
        where = f"{exc.key}: " if exc.key else ""
        raise CliRefusal(
            f"{where}{exc} (the Pulumi CLI's own check: `pulumi up` stops here)", _hint(str(exc), stack)
        ) from None
