"""Every `--option` a message names exists (issue 22): the validate report once recommended
`--nccl-pairs`, which no command has.

The test collects every `--word` from the messages of the product's Python code (the arguments of
its errors, results, findings and echoes) and from its YAML data (hints, notes), and checks each
against the options of the real click commands.
The options of other tools that gpuforge runs or tells the user to run are listed below with
their tool, so that a new one is a decision, not a silent pass.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click

from tests.cli.conftest import REPO

PRODUCT = ("cli", "common", "core", "validate", "components", "bootstrap", "policy")
TOKEN = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")

# option -> the tool it belongs to (what gpuforge runs, renders or tells the user to run)
FOREIGN = {
    "--bidir": "iperf3", "--parallel": "iperf3", "--json": "iperf3 / pulumi stack output",
    "--container-image": "nvidia-ctk / docker", "--filters": "aws ec2", "--owners": "aws ec2", "--output": "aws",
    "--query": "aws", "--service-code": "aws service-quotas / pricing", "--policy-pack": "pulumi",
    "--secret": "pulumi config set", "--query-gpu": "nvidia-smi", "--mpi": "srun (--mpi=pmix)",
    "--cluster-versions": "aws eks describe-cluster-versions", "--addon-name": "aws eks describe-addon-versions",
    "--kubernetes-version": "aws eks describe-addon-versions",
    "--device": "validate/node_scripts/poc_workloads.py (the node script's own argparse)",
    "--help": "every command", "--version": "gpuforge",
}


def gpuforge_options() -> set[str]:
    from gpuforge.cli import cli

    ctx = click.Context(cli, info_name="gpuforge")
    seen: set[str] = set()

    def walk(cmd: click.Command) -> None:
        for p in cmd.params:
            seen.update(getattr(p, "opts", []), getattr(p, "secondary_opts", []))
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub)

    walk(cli)
    return seen


MESSAGE_CALLS = {"CheckResult", "Finding", "echo", "secho", "print", "fail"}  # besides every *Error(...)


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _message_strings(tree: ast.AST) -> list[str]:
    """The string parts of what is shown to a user: the arguments of an error, a result, a finding
    or an echo (f-strings included), not the argv of a tool gpuforge runs."""
    out: list[str] = []
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and (_callee(call).endswith(("Error", "Unreachable")) or _callee(call) in MESSAGE_CALLS):
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                out += [n.value for n in ast.walk(arg) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return out


def named_options() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for folder in PRODUCT:
        for path in (REPO / folder).rglob("*"):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            texts: list[str] = []
            if path.suffix == ".py":
                texts = _message_strings(ast.parse(path.read_text()))
            elif path.suffix == ".yaml":  # data with notes and hints (node scripts, .sh/.j2, are not messages)
                texts = [path.read_text()]
            for text in texts:
                for token in TOKEN.findall(text):
                    found.setdefault(token, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_option_a_message_names_exists() -> None:
    ours = gpuforge_options()
    missing = {opt: sorted(where) for opt, where in named_options().items() if opt not in ours and opt not in FOREIGN}
    assert not missing, f"options named in messages that no gpuforge command has (and no listed tool): {missing}"


def test_the_foreign_list_names_no_gpuforge_option() -> None:
    """An option listed as another tool's must not shadow one of ours (it would hide a typo)."""
    clash = set(FOREIGN) & gpuforge_options() - {"--help", "--version"}
    assert not clash, clash


def test_the_collector_sees_the_report_note() -> None:
    """The note that once named --nccl-pairs is data (validate/network/tcp_model.yaml): it is read."""
    assert "--checks" in named_options()
    assert Path(REPO / "validate" / "network" / "tcp_model.yaml").is_file()


def test_no_message_points_at_design_md() -> None:
    """DESIGN.md is not in the repository: a fix line naming it sends the user nowhere. (Docstrings
    and comments, which are for whoever reads the code, may still cite it.)"""
    hits = []
    for folder in PRODUCT:
        for path in (REPO / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                          if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                          and node.body and isinstance(node.body[0], ast.Expr)
                          and isinstance(node.body[0].value, ast.Constant)}  # fmt: skip
            hits += [f"{path.relative_to(REPO)}:{n.lineno}" for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str) and "DESIGN.md" in n.value
                     and id(n) not in docstrings]  # fmt: skip
    assert not hits, hits
