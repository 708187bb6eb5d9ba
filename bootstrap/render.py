"""Render EC2 user data for a node of a stack: a #cloud-config that installs the phase runner,
its phases and the status helper (write_files) and runs it (runcmd).

The components call `render_user_data(cfg, node_name)` once per node and once with None for the
launch template. Output is deterministic (same input, same bytes), so previews are stable.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jinja2
import yaml

from gpuforge.bootstrap.ncclenv import env_file, nccl_env, profile_script
from gpuforge.bootstrap.plan import BASE_PACKAGES, CONTAINER_TOOLKIT_PACKAGES, BootstrapError, NodePlan, plan_node
from gpuforge.bootstrap.slurm import render_accounting, render_slurm, render_users
from gpuforge.bootstrap.versions import Versions, load_versions
from gpuforge.core.config import StackConfig
from gpuforge.core.limits import limit
from gpuforge.core.mirror import APT_ARCHIVE, Mirror

__all__ = ["AGENT_CONFIG_FILE", "EC2_USER_DATA_LIMIT", "BootstrapError", "RenderedBootstrap", "render_user_data"]

EC2_USER_DATA_LIMIT = limit("ec2_user_data_bytes").value  # bytes, before base64 (core/aws_limits.yaml)
USER_DATA_FILE = "user-data.yaml"
AGENT_CONFIG_FILE = "etc/gpuforge/cloudwatch-agent.json"  # what the cloudwatch-agent phase loads
SLURMD_DROPIN = "etc/systemd/system/slurmd.service.d/gpuforge.conf"  # the configless node's unit drop-in
_HOSTNAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class RenderedBootstrap:
    user_data: bytes  # what EC2 receives (before base64): the cloud-config, gzipped when it would not fit
    files: dict[str, str] = field(default_factory=dict)  # path on the node (or user-data.yaml) -> text
    plan: NodePlan | None = None

    @property
    def user_data_base64(self) -> str:
        return base64.b64encode(self.user_data).decode()

    @property
    def compressed(self) -> bool:
        return self.user_data[:2] == b"\x1f\x8b"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpuforge.bootstrap", "templates"),
        undefined=jinja2.StrictUndefined,  # a missing variable is an error, not ""
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # shell and YAML, not HTML
        # bash's ${#array[@]} would open a jinja comment with the default "{#".
        comment_start_string="{##",
        comment_end_string="##}",
    )
    env.filters["shq"] = lambda value: shlex.quote(str(value))
    return env


def _mirror_filters(env: jinja2.Environment, mirror: Mirror) -> None:
    """`url | mirror`: where the node downloads it; `image | mirror_image`: the mirror's copy or ''."""
    env.filters["mirror"] = mirror.url
    env.filters["mirror_image"] = lambda ref: mirror.image(ref) or ""


def render_user_data(
    cfg: StackConfig,
    node_name: str | None,
    *,
    data_volume_id: str | None = None,
    checkpoint_command: str | None = None,
    checkpoint_images: Sequence[str] = (),
    cloudwatch_agent: Mapping[str, Any] | None = None,
    versions: Versions | None = None,
    gpuforge_install: bool = True,
    node_python: str | None = None,
) -> RenderedBootstrap:
    """User data for `node_name` (None: the generic node of a launch template, named by its
    Name tag at boot). `data_volume_id` pins which EBS volume is the data volume (default: the
    only non-root EBS volume). `checkpoint_command` turns on the spot interruption watcher;
    `checkpoint_images` (pinned in versions.yaml) are pulled at bootstrap so that the command
    downloads nothing in the 2 minutes it has. `cloudwatch_agent` is the CloudWatch agent config
    (components.monitoring.agent_config: the metrics the idle-GPU alarm reads); None installs no agent."""
    if node_name is not None and not _HOSTNAME.fullmatch(node_name):
        raise BootstrapError(f"node name {node_name!r} is not a valid hostname", "use lowercase letters, digits, '-'")
    v = (versions or load_versions()).for_os(cfg.os)
    plan = plan_node(
        cfg,
        node_name,
        v,
        data_volume_id=data_volume_id,
        checkpoint_command=checkpoint_command,
        checkpoint_images=checkpoint_images,
        cloudwatch_agent=cloudwatch_agent,
        gpuforge_install=gpuforge_install,
        node_python=node_python,
    )
    return render_plan(cfg, plan, v)


def render_plan(cfg: StackConfig, plan: NodePlan, v: Versions) -> RenderedBootstrap:
    """Files and user data for a plan (the GPU nodes' from plan_node; the Slurm head's, bootstrap/slurm_head.py)."""
    files = _render_files(plan, v)
    text = _cloud_config(plan, files)
    raw = text.encode()
    # Plain text when it fits (readable in the EC2 console); gzip otherwise, which cloud-init
    # detects and unpacks. mtime=0 keeps the bytes identical across renders.
    data = raw if len(raw) <= EC2_USER_DATA_LIMIT else gzip.compress(raw, compresslevel=9, mtime=0)
    if len(data) > EC2_USER_DATA_LIMIT:
        raise BootstrapError(
            f"user data for {plan.node_name or 'the launch template'} of stack {cfg.stack} is {len(data)} bytes "
            f"gzipped ({len(raw)} plain); EC2 allows {EC2_USER_DATA_LIMIT}",
            "shorten the bootstrap templates or move a phase into the AMI",
        )
    return RenderedBootstrap(user_data=data, files={USER_DATA_FILE: text, **files}, plan=plan)


def mount_unit(path: str) -> str:
    """The systemd mount unit of `path` (`systemd-escape --path --suffix=mount`, systemd's
    unit_name_path_escape: '/' -> '-', bytes outside [A-Za-z0-9:_.] and a leading '.' -> \\xNN)."""
    name = path.strip("/")
    out = []
    for i, byte in enumerate(name.encode()):
        ch = chr(byte)
        if ch == "/":
            out.append("-")
        elif (ch.isascii() and ch.isalnum()) or (ch in ":_." and not (i == 0 and ch == ".")):
            out.append(ch)
        else:
            out.append(f"\\x{byte:02x}")
    return ("".join(out) or "-") + ".mount"


def _context(plan: NodePlan, v: Versions) -> dict[str, Any]:
    nccl = nccl_env(v, gpudirect_rdma=plan.gpudirect_rdma)
    return {
        "nccl_env_file": env_file(nccl),
        "nccl_env_profile": profile_script(nccl),
        **{k: getattr(plan, k) for k in plan.__dataclass_fields__},
        "efa": plan.efa,
        "scratch": plan.nvme_count > 0,
        "mount_units": [
            mount_unit(m)
            for m in ([plan.scratch_mount] if plan.nvme_count else []) + ([plan.data_volume.mount] if plan.data_volume else [])
        ],
        "node_label": plan.node_name or "the node named by its Name tag",
        "nccl_deb": plan.cuda.nccl,
        "base_packages": BASE_PACKAGES,
        "ctk_packages": CONTAINER_TOOLKIT_PACKAGES,
        "agent_config_file": f"/{AGENT_CONFIG_FILE}",
        "v": v,
        "expected": plan.expected(v),
    }


def _render_files(plan: NodePlan, v: Versions) -> dict[str, str]:
    env = _env()
    _mirror_filters(env, plan.mirror)
    ctx = _context(plan, v)
    files = {
        "opt/gpuforge/lib.sh": env.get_template("lib.sh.j2").render(ctx),
        "opt/gpuforge/bin/gpuforge-bootstrap": env.get_template("runner.sh.j2").render(ctx),
        "etc/gpuforge/expected.json": json.dumps(plan.expected(v), indent=2, sort_keys=True) + "\n",
        "etc/systemd/system/gpuforge-bootstrap.service": env.get_template("gpuforge-bootstrap.service.j2").render(ctx),
    }
    if plan.cloudwatch_agent:
        files[AGENT_CONFIG_FILE] = plan.cloudwatch_agent
    for phase in plan.phases:
        files[f"opt/gpuforge/phases/{phase.name}.sh"] = env.get_template(f"phases/{phase.name}.sh.j2").render(
            ctx, phase=phase
        )
    if plan.slurm is not None and plan.slurm_daemon == "slurmctld":
        # Configless Slurm: only the head carries the files; every slurmd fetches them from
        # slurmctld at start (--conf-server), so GPU nodes' user data stays under EC2's 16 KB.
        files.update(render_slurm(plan.slurm))
        files.update(render_accounting(plan.slurm))
    if plan.slurm is not None:
        files.update(render_users(plan.slurm))
    files.update(dict(plan.extra_files))
    if plan.slurm is not None and plan.slurm_daemon == "slurmd":
        files["opt/gpuforge/bin/gpuforge-health-check"] = env.get_template("gpuforge-health-check.j2").render(ctx)
        files[SLURMD_DROPIN] = env.get_template("slurmd-dropin.conf.j2").render(ctx)
    if plan.checkpoint_command:
        files["opt/gpuforge/bin/gpuforge-spot-watcher"] = env.get_template("spot-watcher.j2").render(ctx)
        files["etc/systemd/system/gpuforge-spot-watcher.service"] = env.get_template(
            "gpuforge-spot-watcher.service.j2"
        ).render(ctx)
    return {path: strip_shell_comments(text) if _is_shell(path) else text for path, text in files.items()}


# A full-line shell comment: not the shebang, not a shellcheck directive (the rendered scripts are
# linted), not the "Rendered from <template>" pointer that tells an operator where to edit.
_SHELL_COMMENT = re.compile(r"^[ \t]*#(?!!)(?![ \t]*shellcheck)(?! Rendered from )")


def _is_shell(path: str) -> bool:
    return path.startswith("opt/gpuforge/") and (path.endswith(".sh") or "/bin/" in path)


def strip_shell_comments(text: str) -> str:
    """The node's scripts without their full-line comments. The comments say why, for whoever reads
    the templates in bootstrap/templates; on the node they cost user data, which EC2 caps at 16 KB
    (gzipped, a Slurm spot node was 16,515 bytes with them, about 11,600 without). Line-end comments
    stay, and so does everything inside quotes or heredocs that is not a whole comment line."""
    return "".join(line for line in text.splitlines(keepends=True) if not _SHELL_COMMENT.match(line))


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks, so the user data reads like the scripts it carries."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def _cloud_config(plan: NodePlan, files: dict[str, str]) -> str:
    def mode(path: str) -> str:
        return "0755" if "/bin/" in path or (path.endswith(".sh") and "/phases/" in path) else "0644"

    doc = {
        # The bootstrap sets the hostname itself (from the inventory name or the Name tag).
        "preserve_hostname": True,
        "write_files": [
            {"path": f"/{path}", "owner": "root:root", "permissions": mode(path), "content": text}
            for path, text in files.items()
        ],
        "runcmd": [["/opt/gpuforge/bin/gpuforge-bootstrap"]],
    }
    if archive := plan.mirror.get(APT_ARCHIVE):
        # cloud-init's apt module rewrites the AMI's sources before runcmd, so every apt call
        # of every phase (and of the EFA installer) goes to the mirror.
        doc["apt"] = {
            "primary": [{"arches": ["default"], "uri": archive}],
            "security": [{"arches": ["default"], "uri": archive}],
        }
    header = (
        "#cloud-config\n"
        f"# gpuforge bootstrap: stack {plan.stack}, profile {plan.profile}, "
        f"node {plan.node_name or '(launch template: name from the Name tag)'}.\n"
        "# Rendered by bootstrap/render.py from bootstrap/templates and bootstrap/versions.yaml; do not edit.\n"
    )
    body: str = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)
    return header + body
