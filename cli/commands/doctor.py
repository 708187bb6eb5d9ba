"""`gpuforge doctor`: is this machine ready to use gpuforge? One line per thing, each a verdict
and a fix. Every probe is bounded (a subprocess timeout, botocore timeouts with one attempt, a
thread joined with a timeout), so a hung agent, CLI or endpoint cannot hang the doctor."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from gpuforge.commands.options import project_dir_option
from gpuforge.common.errors import EXIT_CHECKS_FAILED
from gpuforge.common.table import Column, Rows, emit, format_option

PROBE_TIMEOUT_S = 8.0
MIN_PYTHON = (3, 10)
KEY_FILES = ("id_ed25519", "id_ecdsa", "id_rsa")
_STYLES = {"ok": "green", "warning": "yellow", "error": "bold red", "unknown": "magenta"}


@dataclass(frozen=True)
class Finding:
    what: str
    verdict: str  # ok | warning | error | unknown
    detail: str
    fix: str = ""


def bounded(fn: Callable[[], Any], seconds: float = PROBE_TIMEOUT_S) -> tuple[bool, Any]:
    """(finished, result or exception) of `fn` run in a daemon thread joined for `seconds`."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(fn())
        except Exception as exc:  # noqa: BLE001 - reported as the probe's finding
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return (bool(box), box[0] if box else None)


def python() -> Finding:
    v = sys.version_info
    text = f"Python {v.major}.{v.minor}.{v.micro} ({sys.executable})"
    if (v.major, v.minor) < MIN_PYTHON:
        return Finding("python", "error", text, f"use Python {'.'.join(map(str, MIN_PYTHON))} or newer")
    return Finding("python", "ok", text)


def pulumi_cli() -> Finding:
    path = shutil.which("pulumi")
    if path is None:
        return Finding("pulumi CLI", "warning", "not on PATH (preview, cost and preflight work without it)",
                       "install it for `pulumi up`: https://www.pulumi.com/docs/install/")
    try:
        proc = subprocess.run([path, "version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return Finding("pulumi CLI", "unknown", f"{path}: `pulumi version` did not answer in {PROBE_TIMEOUT_S:g} s",
                       "run `pulumi version` by hand to see what it waits for")
    except OSError as exc:
        return Finding("pulumi CLI", "error", f"{path}: {exc.strerror}", "reinstall the Pulumi CLI")
    version = proc.stdout.strip() or proc.stderr.strip()
    if proc.returncode != 0:
        return Finding("pulumi CLI", "error", f"{path}: `pulumi version` exited {proc.returncode}: {version[:200]}",
                       "reinstall the Pulumi CLI")
    return Finding("pulumi CLI", "ok", f"{version} ({path})")


def aws() -> list[Finding]:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

    from gpuforge.common.awsconfig import aws_region

    session = boto3.session.Session()
    creds = session.get_credentials()
    region, source = aws_region(None, session)  # as the AWS CLI finds it: AWS_REGION first
    out = [
        Finding("AWS region", "ok", f"{region} (from {source})", "") if region else
        Finding("AWS region", "warning", "not set", "set AWS_REGION, or `aws configure set region us-east-1`")
    ]
    if creds is None:
        out.append(Finding("AWS credentials", "warning", "none found (preview and cost need none)",
                           "set AWS_PROFILE, or run `aws configure` / `aws sso login` (preflight needs them)"))
        return out
    method = getattr(creds, "method", "unknown source")
    config = Config(connect_timeout=3, read_timeout=5, retries={"total_max_attempts": 1, "mode": "standard"},
                    region_name=region or "us-east-1")

    def whoami() -> Any:
        return session.client("sts", config=config).get_caller_identity()

    done, answer = bounded(whoami)
    if not done:
        out.append(Finding("AWS credentials", "unknown", f"found ({method}), but STS did not answer in {PROBE_TIMEOUT_S:g} s",
                           "check the network, a proxy, or AWS_ENDPOINT_URL"))
    elif isinstance(answer, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
        out.append(Finding("AWS credentials", "unknown", f"found ({method}), but STS could not be reached: {answer}",
                           "check the network, a proxy, or AWS_ENDPOINT_URL"))
    elif isinstance(answer, Exception):
        out.append(Finding("AWS credentials", "error", f"found ({method}), but STS refused or failed: {answer}",
                           "refresh them (`aws sso login`, new keys) or check AWS_PROFILE"))
    else:
        out.append(Finding("AWS credentials", "ok", f"{answer.get('Arn')} ({method})"))
    return out


def ssh() -> list[Finding]:
    home = Path(os.path.expanduser("~"))
    out: list[Finding] = []
    agent_keys = 0
    if os.environ.get("SSH_AUTH_SOCK"):
        import paramiko

        done, answer = bounded(lambda: len(paramiko.Agent().get_keys()))
        agent_keys = answer if done and isinstance(answer, int) else 0
    files = [home / ".ssh" / name for name in KEY_FILES if (home / ".ssh" / name).is_file()]
    if agent_keys:
        out.append(Finding("SSH key", "ok", f"ssh-agent holds {agent_keys} key(s)"))
    elif files:
        out.append(Finding("SSH key", "ok", f"{files[0]} (pass it to validate with --ssh-key)"))
    else:
        out.append(Finding("SSH key", "warning", "no ssh-agent key and no ~/.ssh/id_* key (validate needs one)",
                           "ssh-keygen -t ed25519, or ssh-add the key your nodes accept"))
    known = home / ".ssh" / "known_hosts"
    if known.is_file():
        entries = sum(1 for line in known.read_text(errors="replace").splitlines() if line.strip() and not line.startswith("#"))
        out.append(Finding("known_hosts", "ok", f"{known}: {entries} entr{'y' if entries == 1 else 'ies'}"))
    else:
        out.append(Finding("known_hosts", "warning", f"{known} does not exist: every node's host key is unknown",
                           "ssh-keyscan the nodes into it from a trusted network, or validate --accept-new-host-keys once"))
    return out


def project(project_dir: Path) -> Finding:
    if (project_dir / "Pulumi.yaml").is_file():
        return Finding("project", "ok", str(project_dir))
    return Finding("project", "warning", f"no Pulumi.yaml at or above {project_dir}",
                   "run from the gpuforge project, or pass --project-dir")


@click.command("doctor")
@format_option
@project_dir_option
def command(fmt: str, project_dir: Path) -> None:
    """Check this machine: Python, the Pulumi CLI, AWS credentials and region, SSH key or agent,
    known_hosts and the project. Each line is a verdict and, where needed, the fix.

    Nothing here waits long: every probe has a bound of a few seconds.

    \b
    Exit: 0 nothing is wrong (warnings allowed), 1 something is broken.
    """
    findings = [python(), pulumi_cli(), *aws(), *ssh(), project(project_dir)]
    if fmt == "json":
        click.echo(json.dumps([vars(f) for f in findings], indent=2))
    else:
        rows = Rows("gpuforge doctor", [Column("what"), Column("verdict", styles=_STYLES), Column("detail"), Column("fix")])
        for f in findings:
            rows.add(f.what, f.verdict, f.detail, f.fix)
        emit(rows, fmt)
    raise SystemExit(EXIT_CHECKS_FAILED if any(f.verdict == "error" for f in findings) else 0)
