"""The container runtime of the POC test hosts: a stand-in for the docker CLI (tests/SUBSTITUTIONS.md).

The test hosts have no container runtime, no NGC image and no GPU. Like the first-boot
rehearsal's docker stand-in (tests/rehearsal/standins.py), this one imitates only what the
product asks of docker, and says so: `docker run [--rm] [--pull P] [--network N] [--ipc I]
[--gpus G] [-v SRC:DST[:ro]] [-e K=V] IMAGE CMD...` runs CMD with THIS machine's Python and its
(CPU) torch instead of inside IMAGE, with the -v folders' paths mapped back to the host and the
-e variables set, and appends the image it was asked for (with everything else it was given) to
a JSON-lines log, so a test can check the pinned reference. `python` in CMD is this interpreter;
`torchrun` is `python -m torch.distributed.run` (what the torchrun entry point runs). Anything
else is refused with docker's own message shape, exit 125.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

DOCKER = r'''#!{python}
"""Stand-in for the docker CLI on the POC test hosts (tests/poc/standins.py says what it imitates)."""
import json, os, sys
LOG = {log!r}
SITE = {site!r}  # the test venv's site-packages when the host cannot see the venv's own interpreter
WITH_VALUE = {{"--pull", "--network", "--ipc", "--gpus", "-v", "--volume", "-e", "--env", "--name", "--shm-size"}}
FLAGS = {{"--rm", "-i", "-t", "--init"}}
args = sys.argv[1:]
if args[:1] != ["run"]:
    print(f"docker stand-in: {{' '.join(args[:1]) or '(nothing)'}} is not imitated (the POC only runs)", file=sys.stderr)
    sys.exit(125)
opts, i, rest = {{}}, 1, args[1:]
mounts, env = [], {{}}
while rest and rest[0].startswith("-"):
    a = rest.pop(0)
    if a in FLAGS:
        opts[a] = True
        continue
    if a not in WITH_VALUE or not rest:
        print(f"unknown flag: {{a}}", file=sys.stderr)
        sys.exit(125)
    v = rest.pop(0)
    if a in ("-v", "--volume"):
        src, dst = v.split(":")[:2]
        mounts.append((src, dst))
    elif a in ("-e", "--env"):
        k, _, val = v.partition("=")
        env[k] = val
    else:
        opts[a] = v
if not rest:
    print('"docker run" requires at least 1 argument.', file=sys.stderr)
    sys.exit(125)
image, cmd = rest[0], rest[1:]
with open(LOG, "a") as f:
    f.write(json.dumps({{"image": image, "options": opts, "mounts": mounts, "env": env, "command": cmd}}) + "\n")
def host_path(a):
    for src, dst in mounts:
        if a == dst or a.startswith(dst + "/"):
            return src + a[len(dst):]
    return a
cmd = [host_path(a) for a in cmd]
if cmd[:1] == ["python"]:
    cmd = [sys.executable, *cmd[1:]]
elif cmd[:1] == ["torchrun"]:
    cmd = [sys.executable, "-m", "torch.distributed.run", *cmd[1:]]
os.environ.update(env)
if SITE:
    os.environ["PYTHONPATH"] = SITE
os.execv(cmd[0], cmd)
'''


def install_docker(bin_dir: Path, log: Path, python: str | None = None, site_packages: str | None = None) -> Path:
    """Write the stand-in as `bin_dir/docker`, logging to `log`; returns its path. `python` and
    `site_packages`: for the network-namespace hosts, whose clean /root hides the test venv's
    interpreter (pyenv's, under /root): Debian's /usr/bin/python3 of the same minor version runs
    the same torch from the venv's site-packages."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "docker"
    path.write_text(DOCKER.format(python=python or sys.executable, log=str(log), site=site_packages or ""))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def torch_available() -> str | None:
    """Why the real framework cannot run here, or None (setup.sh installs the pinned CPU torch)."""
    import importlib.util

    # find_spec, not import: torch is only ever run in the scripts' own processes, as on a node.
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed; scripts/setup.sh installs the pinned CPU build (pyproject dev extra)"
    return None


def child_env(bin_dir: Path) -> dict[str, str]:
    """This process's environment with `bin_dir` first on PATH."""
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
