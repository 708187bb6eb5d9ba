"""Read a stack's configuration from Pulumi.yaml + stacks/Pulumi.<stack>.yaml, without Pulumi.

The result is what the Pulumi engine hands a program: a flat map of `namespace:key` to strings
(lists and objects JSON-encoded, booleans "true"/"false"), which `parse_stack_config` takes.
Secrets (`{secure: ...}`) are never decrypted here: they become a placeholder and are listed,
so a preview or preflight can say which keys it could not see.

`set_config_value` edits one scalar key in a stack file line by line, so the user's comments,
order and other keys survive (a YAML round trip would drop the comments).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from gpuforge.common import inputfile
from gpuforge.common.errors import InputError
from gpuforge.common.results import atomic_write
from gpuforge.core.catalog import did_you_mean

SECRET_PLACEHOLDER = "[secret]"
# The top-level keys of a Pulumi stack file (workspace.ProjectStack in pulumi/pulumi
# sdk/go/common/workspace/project.go: secretsprovider, encryptedkey, encryptionsalt, config,
# environment). Anything else there is ignored by the CLI: a config key written without
# `config:` above it would silently do nothing.
STACK_FILE_KEYS = frozenset({"secretsprovider", "encryptedkey", "encryptionsalt", "config", "environment"})
# The properties of the Pulumi project schema (cli/vendor/pulumi/project.json).
PROJECT_FILE_KEYS = ("name", "description", "author", "website", "license", "runtime", "main", "config",
                     "stackConfigDir", "backend", "options", "template", "packages", "plugins")  # fmt: skip
_STACK_PREFIX = "Pulumi."
_STACK_SUFFIX = ".yaml"


def _read_yaml(path: Path, kind: inputfile.FileKind) -> Any:
    """The one reader's rules (common/inputfile.py): bounded, UTF-8, valid YAML, a mapping."""
    return inputfile.read_document(path, kind)


def _project(project_dir: Path) -> dict[str, Any]:
    path = project_dir / "Pulumi.yaml"
    if not path.is_file() and not path.is_symlink() and not path.exists():
        raise InputError(f"{path} not found", "run from the gpuforge project directory or pass --project-dir")
    doc = _read_yaml(path, inputfile.PROJECT)
    # The Pulumi project schema allows keys of one's own (additionalProperties: true in
    # cli/vendor/pulumi/project.json), so only a slip of a known key is refused.
    inputfile.refuse_unknown_keys(doc, PROJECT_FILE_KEYS, str(path), open_shape=True)
    if not doc.get("name"):
        raise InputError(f"{path}: no project `name`", "Pulumi.yaml needs `name: gpuforge`")
    return doc


def _stack_dir(project_dir: Path, project: dict[str, Any]) -> Path:
    return project_dir / str(project.get("stackConfigDir") or ".")


def stack_names(project_dir: Path) -> list[str]:
    """Stacks that have a `Pulumi.<stack>.yaml` in the project's stackConfigDir, sorted."""
    directory = _stack_dir(project_dir, _project(project_dir))
    files = directory.glob(f"{_STACK_PREFIX}*{_STACK_SUFFIX}")
    return sorted(p.name[len(_STACK_PREFIX) : -len(_STACK_SUFFIX)] for p in files)


def stack_name(project_dir: Path, value: str) -> str:
    """`--stack` takes a stack name or the path of its file (`stacks/Pulumi.cv-training.yaml`),
    as shell completion of a path gives it; the name is what Pulumi and every command use."""
    if "/" not in value and not value.endswith(_STACK_SUFFIX):
        return value
    path = Path(value)
    name = path.name
    if not (name.startswith(_STACK_PREFIX) and name.endswith(_STACK_SUFFIX)):
        raise InputError(f"--stack {value}: not a stack file name (Pulumi.<stack>.yaml)", "pass the stack name, e.g. cv-training")
    stack = name[len(_STACK_PREFIX) : -len(_STACK_SUFFIX)]
    expected = stack_file(project_dir, stack)
    if path.resolve() != expected.resolve():
        raise InputError(
            f"--stack {value}: not this project's stack file ({expected})",
            f"pass the stack name ({stack}) or the file under {expected.parent}, or --project-dir for another project",
        )
    return stack


def stack_file(project_dir: Path, stack: str) -> Path:
    """The path of the stack's file; InputError naming the known stacks when it is missing."""
    project = _project(project_dir)
    directory = _stack_dir(project_dir, project)
    path = directory / f"{_STACK_PREFIX}{stack}{_STACK_SUFFIX}"
    if path.is_symlink() or path.exists():
        inputfile.check_path(path, inputfile.STACK)  # a directory, a dangling link: said as such
    if not path.is_file():
        known = stack_names(project_dir)
        rel = path.relative_to(project_dir) if path.is_relative_to(project_dir) else path
        raise InputError(
            f"{rel} not found; known stacks: {', '.join(known) or 'none'}{did_you_mean(stack, known)}",
            "pass one of the known stacks to --stack, or create the stack file (`gpuforge stack new`)",
        )
    return path


def _encode(full_key: str, value: Any, path: Path) -> str:
    # The same text forms the Pulumi CLI gives a program (pulumi config get --json).
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    raise InputError(f"{path}: {full_key} has no value", f"give {full_key} a value or remove the line")


def load_stack_config(project_dir: Path, stack: str) -> tuple[dict[str, str], list[str]]:
    """(`ns:key` -> string, secret keys) for `stack`, project defaults first, stack values over them."""
    project_dir = Path(project_dir)
    project = _project(project_dir)
    name = str(project["name"])
    path = stack_file(project_dir, stack)
    config: dict[str, str] = {}
    for key, spec in (project.get("config") or {}).items():
        full = key if ":" in key else f"{name}:{key}"
        if isinstance(spec, dict):
            for field in ("value", "default"):  # Pulumi.yaml may give a value or a typed default
                if field in spec:
                    config[full] = _encode(full, spec[field], project_dir / "Pulumi.yaml")
                    break
        elif spec is not None:
            config[full] = _encode(full, spec, project_dir / "Pulumi.yaml")

    doc = _read_yaml(path, inputfile.STACK)
    stray = [str(k) for k in doc if str(k) not in STACK_FILE_KEYS]
    typo = next((k for k in stray for known in STACK_FILE_KEYS if inputfile.one_slip(k, known)), None)
    if typo is not None:
        inputfile.refuse_unknown_keys({typo: None}, sorted(STACK_FILE_KEYS), str(path))
    if stray:
        raise InputError(
            f"{path}: {', '.join(stray)} {'is' if len(stray) == 1 else 'are'} at the top level, not under `config:`",
            "indent config keys under a `config:` line (Pulumi reads nothing else from the top level)",
        )
    values = doc.get("config") or {}
    if not isinstance(values, dict):
        raise InputError(f"{path}: `config:` is not a mapping", "write it as `config:` followed by `key: value` lines")
    secrets: list[str] = []
    for key, value in values.items():
        full = str(key) if ":" in str(key) else f"{name}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[full] = SECRET_PLACEHOLDER
            secrets.append(full)
        else:
            config[full] = _encode(full, value, path)
    return config, secrets


_KEY_LINE = r"^(?P<indent>[ \t]+){key}:(?P<sep>[ \t]*)(?P<value>[^#\n]*?)(?P<comment>[ \t]+#[^\n]*)?$"


def set_config_value(project_dir: Path, stack: str, full_key: str, value: str) -> Path:
    """Set a scalar `full_key` (e.g. `gpuforge:azId`) in the stack file, keeping every other line.

    Replaces the value on the key's line (keeping a trailing comment), or adds the key as the
    first entry of `config:` when it is not there. Written atomically.
    """
    path = stack_file(Path(project_dir), stack)
    if not re.fullmatch(r"[A-Za-z0-9._-]+", value):
        raise InputError(f"refusing to write {value!r} to {full_key}", "values written this way are plain words")
    text = inputfile.read_text(path, inputfile.STACK)
    lines = text.splitlines(keepends=True)
    pattern = re.compile(_KEY_LINE.format(key=re.escape(full_key)))
    hits = [i for i, line in enumerate(lines) if pattern.match(line.rstrip("\n"))]
    if len(hits) > 1:
        raise InputError(f"{path}: {full_key} appears {len(hits)} times", "remove the duplicates")
    if hits:
        i = hits[0]
        m = pattern.match(lines[i].rstrip("\n"))
        assert m is not None  # matched just above
        ending = "\n" if lines[i].endswith("\n") else ""
        lines[i] = f"{m['indent']}{full_key}: {value}{m['comment'] or ''}{ending}"
    else:
        top = [i for i, line in enumerate(lines) if re.match(r"^config:[ \t]*(#.*)?$", line.rstrip("\n"))]
        if not top:
            raise InputError(f"{path}: no top-level `config:` block", "add `config:` with the stack's keys")
        indent = _child_indent(lines, top[0])
        lines.insert(top[0] + 1, f"{indent}{full_key}: {value}\n")
    new_text = "".join(lines)
    _check_still_valid(path, text, new_text, full_key, value)
    atomic_write(path, new_text)
    return path


def _child_indent(lines: list[str], config_line: int) -> str:
    for line in lines[config_line + 1 :]:
        m = re.match(r"^([ \t]+)\S", line)
        if m and not line.lstrip().startswith("#"):
            return m.group(1)
    return "  "


def _check_still_valid(path: Path, old_text: str, new_text: str, full_key: str, value: str) -> None:
    # A line edit must not change what the file means beyond the one key: prove it by re-parsing.
    try:
        old, new = yaml.safe_load(old_text), yaml.safe_load(new_text)
    except yaml.YAMLError:
        raise InputError(f"{path}: editing {full_key} would break the YAML", "set the key by hand") from None
    expected = dict(old)
    expected["config"] = {**(old.get("config") or {}), full_key: value}
    if not isinstance(new, dict) or _as_text(new) != _as_text(expected):
        raise InputError(f"{path}: could not set {full_key} by a line edit", "set the key by hand")


def _as_text(doc: Any) -> Any:
    # YAML reads `use1-az4` as a string but a value like `123` as an int; compare as the engine would.
    if isinstance(doc, dict):
        return {str(k): _as_text(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_as_text(v) for v in doc]
    return doc if isinstance(doc, (dict, list)) or doc is None else str(doc)
