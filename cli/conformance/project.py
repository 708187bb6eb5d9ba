"""The Pulumi CLI's project rules (Pulumi.yaml), ported from pulumi/pulumi at commit
1b5949891b3cefcb9974752b24a5ecef0acc86c8 (files read with `git show` in a fetched mirror):

- sdk/go/common/workspace/loaders.go `LoadProjectBytes`: ValidateProject, then
  RewriteConfigPathIntoStackConfigDir, RewriteShorthandConfigValues, then `Project.Validate`.
- sdk/go/common/workspace/project.go `ValidateProject` (name check, then the JSON schema
  sdk/go/common/workspace/project.json, vendored verbatim as cli/vendor/pulumi/project.json),
  `Project.Validate` (default vs value, arrays need `items`, typed defaults must match their
  type, keys of other namespaces may only carry a `value`), `ValidateConfigValue`,
  `InferFullTypeName`, `configKeyIsNamespacedByProject`.

The error texts are the CLI's, word for word.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from gpuforge.conformance.goyaml import load_yaml

PULUMI_COMMIT = "1b5949891b3cefcb9974752b24a5ecef0acc86c8"
VENDOR = Path(__file__).resolve().parents[1] / "vendor" / "pulumi"  # cli/vendor/pulumi (SOURCES.md)

ARRAY, INTEGER, STRING, BOOLEAN, OBJECT = "array", "integer", "string", "boolean", "object"


class ConformanceError(Exception):
    """What the CLI would print; `str()` is the CLI's message, `key` the one config key it names."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


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
    return dict(json.loads((VENDOR / "project.json").read_text()))


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
            if ct.type == ARRAY and ct.items is None:
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
    if type_name == STRING:
        return isinstance(value, str)
    if type_name == INTEGER:
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return True
        if isinstance(value, float):  # a whole float is accepted (YAML/JSON numbers)
            return math.isfinite(value) and value == math.trunc(value)
        if isinstance(value, str):  # strconv.Atoi: base 10, optional sign, fits an int64
            return bool(_GO_ATOI.fullmatch(value)) and -(2**63) <= int(value) < 2**63
        return False
    if type_name == BOOLEAN:
        if isinstance(value, str):
            return value in ("true", "false")
        return isinstance(value, bool)
    if type_name == OBJECT:
        return isinstance(value, dict)
    if not isinstance(value, list) or items is None:
        return False
    return all(validate_config_value(items.type, items.items, item) for item in value)
