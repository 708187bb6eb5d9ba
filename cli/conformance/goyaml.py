"""YAML as the Pulumi CLI reads it: yaml.v3 (YAML 1.2 core schema), not PyYAML's YAML 1.1.

The CLI parses Pulumi.yaml and stack files with gopkg.in/yaml.v3 (pulumi/pulumi
sdk/go/common/encoding/marshal.go at commit 1b5949891b3cefcb9974752b24a5ecef0acc86c8): `yes`/`on` are strings, not booleans, and
`0o17`/`0x1f` are integers. `load_yaml` gives the same values from PyYAML's SafeLoader by
replacing its implicit resolvers with the YAML 1.2 core ones.
"""

from __future__ import annotations

import re
from typing import Any

import yaml


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
