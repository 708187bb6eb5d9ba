"""`gpuforge bootstrap render`: write a stack's EC2 user data and every script in it, for inspection."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import click

from gpuforge.bootstrap.render import USER_DATA_FILE
from gpuforge.commands.options import complete_stacks, project_dir_option
from gpuforge.common.errors import InputError
from gpuforge.common.results import atomic_write, fold_targets
from gpuforge.core.bucketnames import ACCOUNT_ID
from gpuforge.core.catalog import did_you_mean
from gpuforge.core.config import node_names, parse_stack_config
from gpuforge.stackfile import load_stack_config, stack_name


@click.group("bootstrap")
def command() -> None:
    """Node bootstrap (EC2 user data): driver, CUDA, fabric manager, EFA, containers, NGC."""


@command.command("render")
@click.option("--stack", "-s", required=True, shell_complete=complete_stacks,
              help="Stack name (stacks/Pulumi.<stack>.yaml), or that file's path.")
@click.option("--node", "node", default=None, help="Node name; default: the launch template's generic node.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output directory.")
@click.option("--account-id", default=None, metavar="ACCOUNT",
              help="AWS account id (12 digits); spot stacks only: it names the checkpoint bucket.")  # fmt: skip
@project_dir_option
def render(stack: str, node: str | None, out: Path, account_id: str | None, project_dir: Path) -> None:
    """Render the user data of one node (or the launch template's) into OUT.

    OUT/user-data.yaml is the cloud-config; OUT/user-data.b64 is what the launch template
    carries (base64 of the bytes EC2 receives: gzip when the plain text would exceed 16 KB);
    the scripts land under OUT at their paths on the node (opt/gpuforge/..., etc/...).

    \b
    Example:
      gpuforge bootstrap render --stack risk-sim --out out/risk-sim
      gpuforge bootstrap render --stack risk-sim --node risk-sim-node01 --out out/risk-sim-node01
      gpuforge bootstrap render --stack vision-cv-training --account-id 123456789012 --out out/v
      gpuforge bootstrap render --stack vision-slurm --node vision-slurm-head --out out/head   # Slurm head
    """
    stack = stack_name(project_dir, stack)
    raw, _secrets = load_stack_config(project_dir.resolve(), stack)
    cfg = parse_stack_config(raw, stack)
    from gpuforge.components.userdata import stack_user_data  # imports pulumi: only when rendering

    if cfg.fleet.purchase_option == "spot" and not (account_id and ACCOUNT_ID.fullmatch(account_id)):
        raise InputError(
            f"--account-id: {'not given' if account_id is None else repr(account_id) + ' is not 12 digits'}, but {stack} "
            "is a spot stack whose checkpoint bucket name carries the account id",
            "pass --account-id $(aws sts get-caller-identity --query Account --output text)",
        )
    names = node_names(stack, cfg.node_count)
    head = cfg.slurm.head_name if cfg.slurm else None  # gpuforge:scheduler slurm: the head node renders too
    if node is not None and node not in names and node != head:
        raise InputError(
            f"--node: {stack} has no node {node!r}{did_you_mean(node, names)}; its nodes: {fold_targets(names)}"
            + (f" and {head}" if head else ""),
            "pass one of its nodes, or leave --node out for the launch template's generic node",
        )
    # What the stack's nodes boot: with the spot watcher and the CloudWatch agent where they apply.
    if node is not None and node == head:
        from gpuforge.bootstrap.slurm_head import render_head_user_data

        rendered = render_head_user_data(cfg)
    else:
        rendered = stack_user_data(cfg, node, account_id=account_id)
    files = {**rendered.files, "user-data.b64": rendered.user_data_base64 + "\n"}
    write_render(out, files)
    plain = len(rendered.files[USER_DATA_FILE].encode())
    how = "gzip" if rendered.compressed else "plain"
    click.echo(
        f"{stack} {node or '(launch template)'}: user data {len(rendered.user_data)} bytes ({how}; "
        f"{plain} plain), {len(rendered.files)} files in {out}"
    )
    phases = rendered.plan.phases if rendered.plan else ()
    click.echo("phases: " + " -> ".join(p.name for p in phases))


def write_render(out: Path, files: dict[str, str]) -> None:
    """OUT holds exactly this render: written into a fresh sibling directory, then swapped in.

    Writing file by file into a used directory left the last render's files beside the new
    ones (issue 13 item 6). A directory that is not empty and is no earlier render (no
    user-data.yaml) is refused rather than replaced: it may hold the user's own files.
    """
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory", "pass a directory path")
    if out.is_dir() and any(out.iterdir()) and not (out / USER_DATA_FILE).is_file():
        raise InputError(f"--out {out}: not empty and not an earlier render", "pass an empty or new directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.new-"))
    try:
        for rel, text in files.items():
            atomic_write(fresh / rel, text)
        fresh.chmod(0o755)
        if out.is_dir():
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
            out.replace(old / out.name)  # two renames: a moment without OUT, never a mixed OUT
            fresh.replace(out)
            shutil.rmtree(old)
        else:
            fresh.replace(out)
    finally:
        if fresh.exists():
            shutil.rmtree(fresh)
