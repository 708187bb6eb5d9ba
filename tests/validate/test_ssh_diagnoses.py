"""SSH failures named by the step that failed, with the time really waited (issue 22): a server
that sends its banner and then hangs is a key exchange that did not finish, not "no SSH banner";
every node behind such a server gets the same diagnosis (the second one was told "No existing
session"); `after_s` is the wait, not 0.

The server is a real TCP listener on 127.0.0.1 that writes an OpenSSH banner line and then reads
and never answers, as an sshd whose key exchange hangs (a stuck PAM/DNS lookup, a full disk).
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import GPUFORGE, base_env

BANNER = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"


@pytest.fixture
def banner_then_hang() -> Iterator[int]:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.sendall(BANNER)
            conns.append(conn)  # kept open, never read from again: the client's KEXINIT goes nowhere

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(srv.getsockname()[1])
    stop.set()
    thread.join()
    for c in conns:
        c.close()
    srv.close()


def test_banner_then_hang_is_a_key_exchange_timeout_for_every_node(tmp_path: Path, banner_then_hang: int) -> None:
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (tmp_path / "known_hosts").write_text("")
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({
        "ssh": {"port": banner_then_hang, "key_file": str(key), "known_hosts": str(tmp_path / "known_hosts")},
        "nodes": [{"name": "node1", "host": "127.0.0.1"}, {"name": "node2", "host": "127.0.0.1"}],
    }))  # fmt: skip
    res = subprocess.run([GPUFORGE, "validate", "--inventory", str(inv), "--format", "json", "--checks", "system",
                          "--connect-timeout", "2", "--out", str(tmp_path / "ev")], cwd=tmp_path, env=base_env(),
                         capture_output=True, text=True, timeout=240, check=False)  # fmt: skip
    assert res.returncode == 1, res.stderr[-2000:]
    reach = {r["targets"][0]: r for r in json.loads(res.stdout)["results"] if r["check"] == "node.reachable"}
    assert set(reach) == {"node1", "node2"}, reach
    for node, row in reach.items():
        assert row["level"] == "error", row
        message = row["message"].lower()
        assert "key exchange" in message, (node, row["message"])
        assert "no ssh banner" not in message and "no existing session" not in message, (node, row["message"])
        assert row["observed"]["after_s"] >= 1.5, (node, row["observed"])  # the 2 s it waited, not 0
