"""The inventory validate reads (DESIGN.md): which nodes, how to reach them, what to expect.

Accepted shapes, from a file or stdin (`-`), YAML or JSON:
- the inventory itself: `{"profile", "expect", "ssh": {...}, "nodes": [{"name", "host", ...}]}`;
- `pulumi stack output --json inventory` (the same object; Pulumi may also print it as a JSON
  string when the program exported a serialized value);
- `pulumi stack output --json` (all outputs), where the inventory sits under `inventory`.
Every problem is an InputError naming the file and the key, never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuforge.common.errors import InputError
from gpuforge.common.inputfile import (
    INVENTORY,
    MAX_EXPANDED_NODES,
    expanded_size,
    read_text,
    refuse_unknown_keys,
    type_name,
)

# The ssh defaults mirror OpenSSH's so that an inventory written by hand behaves like `ssh`.
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Expect(_Strict):
    """The node's own expectations; each stated one takes precedence over the profile's."""

    gpus_per_node: int | None = Field(default=None, ge=0)
    gpu_model: str | None = None
    gpu_memory_gib: float | None = Field(default=None, gt=0)
    interconnect: Literal["none", "pcie", "nvlink", "nvswitch"] | None = None
    efa_interfaces: int | None = Field(default=None, ge=0)
    link_gbps: float | None = Field(default=None, gt=0)
    nccl_busbw_gbps: float | None = Field(default=None, gt=0)
    mtu: int | None = Field(default=None, ge=576, le=65536)
    ping_p99_ms: float | None = Field(default=None, gt=0)
    # How the nodes were placed (AWS per-flow TCP limits depend on it: validate/network/tcp_model.yaml)
    placement_group: Literal["cluster", "none"] | None = None
    ena_express: bool | None = None

    def stated(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class JumpHost(_Strict):
    host: str = Field(min_length=1)
    user: str | None = None
    port: int = Field(default=22, ge=1, le=65535)


class SshConfig(_Strict):
    user: str = "root"
    key_file: str | None = None  # None: the transport refuses to guess; key auth is required
    known_hosts: str = DEFAULT_KNOWN_HOSTS
    port: int = Field(default=22, ge=1, le=65535)
    jump_host: JumpHost | None = None

    @field_validator("jump_host", mode="before")
    @classmethod
    def _jump_from_string(cls, value: Any) -> Any:
        # `user@host:port` is how people write a jump host (ssh -J); accept it as well as a mapping.
        if isinstance(value, str):
            user, _, rest = value.rpartition("@")
            host, sep, port = rest.partition(":")
            out: dict[str, Any] = {"host": host}
            if user:
                out["user"] = user
            if sep:
                out["port"] = port
            return out
        return value

    def key_path(self) -> Path | None:
        return Path(self.key_file).expanduser() if self.key_file else None

    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts).expanduser()


# What `pulumi stack output --json inventory` puts on a node besides Node's fields
# (components/cluster.py `_inventory`): known facts, kept as extras.
EXPORTED_NODE_FACTS = ("instance_id", "public_ip", "availability_zone", "az_id")


class Node(BaseModel):
    """One node. The shape is open: keys of the user's own (rack, role ...) are kept as extras,
    but a key one slip from a known one (`hots`, `instace_type`) is refused as a typo (README)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    name: str = Field(min_length=1)
    host: str = Field(min_length=1)
    instance_type: str | None = None
    private_ip: str | None = None
    # per-node SSH overrides of `ssh.port` / `ssh.user` (a node behind a NAT port, another login)
    port: int | None = Field(default=None, ge=1, le=65535)
    user: str | None = Field(default=None, min_length=1)

    @property
    def data_address(self) -> str:
        """Where other nodes send traffic: the private address when known (AWS), else host."""
        return self.private_ip or self.host

    def extras(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Inventory(_Strict):
    profile: str | None = None
    # The stack that exported it (components/cluster.py `_inventory`): the real export carries it,
    # so `pulumi stack output --json inventory` must load as it is.
    stack: str | None = None
    expect: Expect | None = None
    ssh: SshConfig = SshConfig()
    nodes: list[Node] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> Inventory:
        seen: set[str] = set()
        for node in self.nodes:
            if node.name in seen:
                raise ValueError(f"node name {node.name!r} appears twice; names must be unique")
            seen.add(node.name)
        return self

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


def _unwrap(doc: Any) -> Any:
    """Accept the Pulumi output shapes listed in the module docstring."""
    if isinstance(doc, str):  # `pulumi stack output --json` of a serialized (json.dumps) export
        try:
            doc = json.loads(doc)
        except json.JSONDecodeError:
            return doc
    if isinstance(doc, dict) and "nodes" not in doc and "inventory" in doc:
        return _unwrap(doc["inventory"])
    return doc


def _check_keys(doc: dict[str, Any], source: str) -> None:
    """Unknown keys with a did-you-mean; nodes are an open shape (see Node)."""
    refuse_unknown_keys(doc, Inventory.model_fields, source)
    for section, model in (("ssh", SshConfig), ("expect", Expect)):
        if isinstance(doc.get(section), dict):
            refuse_unknown_keys(doc[section], model.model_fields, source, f"{section}.")
    nodes = doc.get("nodes")
    for i, node in enumerate(nodes if isinstance(nodes, list) else []):
        if isinstance(node, dict):
            name = node.get("name", i)
            refuse_unknown_keys(node, [*Node.model_fields, *EXPORTED_NODE_FACTS], source, f"nodes[{name}].",
                                open_shape=True)  # fmt: skip


def parse_inventory(text: str, source: str) -> Inventory:
    """Text (YAML or JSON; JSON is YAML) -> Inventory, with errors that name `source` and the key."""
    if not text.strip():
        raise InputError(f"{source}: the inventory is empty", INVENTORY.example)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{source}: not valid YAML/JSON{where}", "write the inventory as YAML or JSON") from None
    if expanded_size(doc) > MAX_EXPANDED_NODES:  # YAML aliases that stand for millions of values
        raise InputError(f"{source}: its YAML aliases expand to more than {MAX_EXPANDED_NODES:,} values",
                         "write the inventory without nested anchors")  # fmt: skip
    doc = _unwrap(doc)
    if not isinstance(doc, dict):
        raise InputError(
            f"{source}: the inventory must be a mapping with `nodes`, not {type_name(doc)}",
            "pass the file of `pulumi stack output --json inventory`, or write {profile, ssh, nodes: [...]}",
        )
    if doc.get("nodes") == [] and doc.get("stack"):
        # EKS node groups and Auto Scaling groups launch their instances after `pulumi up`, so the
        # stack's export cannot list them (components/cluster.py); EC2 can.
        stack = doc["stack"]
        raise InputError(
            f"{source}: nodes: the inventory of stack {stack!r} lists no nodes (its GPU nodes come from an "
            "EKS node group or an Auto Scaling group, launched after deploy)",
            f"find the running nodes in EC2 instead: gpuforge validate --discover {stack}",
        )
    _check_keys(doc, source)
    try:
        return Inventory.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        hint = _hint(err)
        raise InputError(f"{source}: {key}: {err['msg']}{more}", hint) from None


def _hint(err: Any) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "add the key; every node needs `name` and `host`, and `nodes` needs at least one node"
    if kind == "extra_forbidden":
        allowed = "profile, stack, expect, ssh, nodes; ssh: user, key_file, known_hosts, port, jump_host"
        return f"remove or rename the key (allowed: {allowed})"
    return "fix the value (the inventory's keys: README.md, Inventory files)"


def load_inventory(path: str, flag: str = "--inventory") -> Inventory:
    """Read the inventory from a file, or from stdin when `path` is `-` (common.inputfile rules)."""
    text = read_text(path, INVENTORY, flag)
    return parse_inventory(text, "<stdin>" if path == "-" else f"{flag} {path}")
