"""`gpuforge validate` reaches its first node without importing what it does not use: a CI log
(stderr not a terminal) needs no rich, and paramiko's optional invoke (for ssh_config's `Match
exec`, which gpuforge never reads) drags in unittest.mock and asyncio. Together ~0.15 s of CPU
before the first result on the build machine (issue 20: time to the first result)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

UNUSED = ("invoke", "rich", "asyncio", "unittest.mock")


def test_validate_over_ssh_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True, timeout=30)
    (tmp_path / "kh").write_text("")
    ssh = {"key_file": str(tmp_path / "k"), "known_hosts": str(tmp_path / "kh"), "port": 1}  # port 1: refused at once
    (tmp_path / "inv.json").write_text(json.dumps({"ssh": ssh, "nodes": [{"name": "a", "host": "127.0.0.1"}]}))
    code = (
        "import sys\nfrom gpuforge.cli import main\ntry:\n"
        f"    main(['validate', '--inventory', {str(tmp_path / 'inv.json')!r}, '--checks', 'system', '--format', 'json',"
        f" '--out', {str(tmp_path / 'ev')!r}])\n"
        "except SystemExit as exc:\n    code = exc.code\n"
        f"print(code, [m for m in {UNUSED!r} if sys.modules.get(m) is not None], 'paramiko' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=False)
    # exit 1: the node is unreachable (reported, not a crash); paramiko was used; nothing else was
    assert p.stdout.strip().splitlines()[-1] == "1 [] True", (p.stdout, p.stderr[-500:])
