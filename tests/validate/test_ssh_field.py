"""SSH as it is in the field (issue 12, item 4), against real sshd on the netns test bed with
OpenSSH's stock limits, a real ssh-agent, a real non-SSH listener and real key files.
Each test failed on the transport/runner as they were before this change."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.common.results import Level
from gpuforge.validate.checks import Expectations
from gpuforge.validate.inventory import Inventory, Node, SshConfig
from gpuforge.validate.registry import node_checks
from gpuforge.validate.runner import Runner
from gpuforge.validate.ssh import SshTransport
from gpuforge.validate.stagehost import RunOptions
from gpuforge.validate.transport import Job, LocalTransport, Outcome, Timeouts, run_many
from tests.validate.testbed import Testbed, missing_requirements

BOUND = Timeouts(connect=2, banner=2, auth=2, channel=2)
_WHY = missing_requirements()
netns = [pytest.mark.netns, pytest.mark.slow]


def _bed(n: int, **kw: object) -> Testbed:
    if _WHY:
        pytest.skip(_WHY)
    return Testbed(n, **kw).up()  # type: ignore[arg-type]


@pytest.fixture
def bed1() -> Iterator[Testbed]:
    tb = _bed(1)
    try:
        yield tb
    finally:
        tb.down()


def _transport(tb: Testbed, **ssh: object) -> SshTransport:
    doc = tb.inventory()
    doc["ssh"] = {**doc["ssh"], **ssh}  # type: ignore[dict-item]
    return SshTransport(Inventory.model_validate(doc).ssh, BOUND, ask_passphrase=False)


def _node(tb: Testbed, i: int = 1, **kw: object) -> Node:
    return Node(name=tb.hosts[i - 1].name, host=tb.hosts[i - 1].ip, **kw)  # type: ignore[arg-type]


# --- stock sshd: MaxSessions 10 per connection ---------------------------------------------------


@pytest.mark.netns
@pytest.mark.slow
def test_test_hosts_run_sshd_with_stock_limits(bed1: Testbed) -> None:
    cfg = bed1.hosts[0].dir / "sshd_config"
    assert "MaxSessions" not in cfg.read_text() and "MaxStartups" not in cfg.read_text()
    effective = subprocess.run(["/usr/sbin/sshd", "-T", "-f", str(cfg)], capture_output=True, text=True, timeout=15, check=True)
    assert "maxsessions 10\n" in effective.stdout and "maxstartups 10:30:100\n" in effective.stdout


@pytest.mark.netns
@pytest.mark.slow
def test_thirty_two_commands_at_once_on_one_node_under_stock_sshd(bed1: Testbed) -> None:
    t = _transport(bed1)
    node = _node(bed1)
    try:
        jobs = [Job(node, "sleep 0.3; echo ok", 20) for _ in range(32)]
        results = run_many(t, jobs, 32)
    finally:
        t.close()
    assert [(r.outcome, r.stdout) for r in results] == [(Outcome.OK, "ok\n")] * 32, {r.detail for r in results}
    # sshd frees a session a moment after its channel closes, so it may still refuse a few opens
    # ("no more sessions" in its log): the transport retries those instead of failing the node
    assert all(r.stage == "command" for r in results)


@pytest.mark.netns
@pytest.mark.slow
def test_commands_over_ssh_run_in_the_c_locale(bed1: Testbed) -> None:
    # whatever locale the node's login gives, the tools speak C (ping summaries, decimal points)
    t = _transport(bed1)
    try:
        res = t.run(_node(bed1), 'echo "$LC_ALL"', 10)
    finally:
        t.close()
    assert res.ok and res.stdout == "C\n"


# --- keys: passphrase and ssh-agent --------------------------------------------------------------


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    sock = tmp_path / "agent.sock"
    out = subprocess.run(["ssh-agent", "-s", "-a", str(sock)], capture_output=True, text=True, timeout=15, check=True)
    pid = int(re.search(r"SSH_AGENT_PID=(\d+)", out.stdout).group(1))  # type: ignore[union-attr]
    env = {"SSH_AUTH_SOCK": str(sock), "SSH_AGENT_PID": str(pid)}
    monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
    try:
        yield env
    finally:
        os.kill(pid, signal.SIGTERM)  # the agent this fixture started, by its PID


def _encrypt(key: Path, passphrase: str = "correct horse") -> None:
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", passphrase, "-f", str(key)], check=True, timeout=15)


@pytest.mark.netns
@pytest.mark.slow
def test_agent_first_so_a_passphrase_key_needs_no_terminal(bed1: Testbed, agent: dict[str, str]) -> None:
    env = {**os.environ, **agent}
    subprocess.run(["ssh-add", "-q", str(bed1.key)], env=env, check=True, timeout=15, capture_output=True)
    _encrypt(bed1.key)  # the file on disk now needs a passphrase; the agent holds the key
    t = _transport(bed1)
    try:
        res = t.run(_node(bed1), "hostname", 10)
    finally:
        t.close()
    assert res.ok and res.stdout == "node1\n"
    # no key file at all: the agent alone is enough
    t = _transport(bed1, key_file=None)
    try:
        assert t.run(_node(bed1), "true", 10).ok
    finally:
        t.close()


def test_passphrase_key_without_agent_or_terminal_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuforge.cli import main

    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(key)], check=True, timeout=15)
    (tmp_path / "known_hosts").write_text("")
    inv = tmp_path / "inv.json"
    ssh = {"key_file": str(key), "known_hosts": str(tmp_path / "known_hosts")}
    inv.write_text(json.dumps({"ssh": ssh, "nodes": [{"name": "a", "host": "127.0.0.1"}]}))
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--inventory", str(inv)])
    err = capsys.readouterr().err
    assert ex.value.code == 2, err
    assert err.startswith("error: ssh.key_file:") and "passphrase" in err and "ssh-add" in err
    assert "Traceback" not in err


# --- per-node port and user ------------------------------------------------------------------------


@pytest.mark.netns
@pytest.mark.slow
def test_per_node_port_and_user_are_honoured() -> None:
    tb = _bed(2, ports={2: 2222})
    try:
        doc = tb.inventory()
        doc["ssh"] = {**doc["ssh"], "user": "gf-nosuchuser"}  # type: ignore[dict-item]
        doc["nodes"] = [
            {"name": "node1", "host": tb.hosts[0].ip, "user": "root"},
            {"name": "node2", "host": tb.hosts[1].ip, "user": "root", "port": 2222},
        ]
        inv = Inventory.model_validate(doc)
        t = SshTransport(inv.ssh, BOUND, ask_passphrase=False)
        try:
            results = [t.run(n, "hostname; id -un", 10) for n in inv.nodes]
        finally:
            t.close()
    finally:
        tb.down()
    assert [r.stdout for r in results] == ["node1\nroot\n", "node2\nroot\n"], [r.detail for r in results]


# --- what the other end is -------------------------------------------------------------------------


def _listener(reply: bytes | None) -> tuple[socket.socket, threading.Thread]:
    """A TCP server on 127.0.0.1 that answers one connection with `reply` (None: says nothing)."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(20)

    def serve() -> None:
        for _ in range(4):  # the transport's connection, then its probe: bounded
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(256)
                    if reply is not None:
                        conn.sendall(reply)
                    else:
                        conn.recv(256)  # hold the line open until the client gives up
                except OSError:
                    pass

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    return srv, th


@pytest.mark.parametrize(
    ("reply", "outcome", "words"),
    [
        (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", Outcome.UNREACHABLE, "not an SSH server"),
        (None, Outcome.TIMEOUT, "sshd hung?"),
    ],
)
def test_a_port_that_is_not_ssh_is_named_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reply: bytes | None, outcome: Outcome, words: str
) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=15)
    (tmp_path / "known_hosts").write_text("")
    srv, th = _listener(reply)
    try:
        port = srv.getsockname()[1]
        ssh = SshConfig(key_file=str(key), known_hosts=str(tmp_path / "known_hosts"), port=port)
        t = SshTransport(ssh, Timeouts(connect=2, banner=1, auth=2, channel=2), ask_passphrase=False)
        res = t.run(Node(name="web", host="127.0.0.1"), "true", 5)
        t.close()
    finally:
        srv.close()
        th.join(10)
    assert res.outcome is outcome and words in res.detail, res.detail


@pytest.mark.netns
@pytest.mark.slow
def test_changed_host_key_shows_sha256_fingerprints_and_the_fix(bed1: Testbed, tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=15)
    ip = bed1.hosts[0].ip
    bed1.known_hosts.write_text(f"{ip} {' '.join(Path(f'{other}.pub').read_text().split()[:2])}\n")

    def fp(pub: Path) -> str:
        out = subprocess.run(
            ["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], capture_output=True, text=True, timeout=15, check=True
        )
        return out.stdout.split()[1]

    t = _transport(bed1)
    try:
        res = t.run(_node(bed1), "true", 5)
    finally:
        t.close()
    sent = fp(bed1.hosts[0].dir / "ssh_host_ed25519_key.pub")
    assert res.outcome is Outcome.HOST_KEY
    assert sent in res.detail and fp(Path(f"{other}.pub")) in res.detail, res.detail
    assert f"ssh-keygen -f '{bed1.known_hosts}' -R '{ip}'" in res.detail
    assert Path(f"{other}.pub").read_text().split()[1] not in res.detail  # no base64 key dump


# --- what the report says ------------------------------------------------------------------------


def test_local_transport_does_not_report_ssh() -> None:
    inv = Inventory.model_validate({"nodes": [{"name": "here", "host": "localhost"}]})
    res = Runner(inv, LocalTransport(), [], lambda n: Expectations(), options=RunOptions(network=False)).run()
    [row] = [r for r in res.report.results if r.check == "node.reachable"]
    assert row.level is Level.PASS and "ssh" not in row.message.lower()

    class ThroughSrun(LocalTransport):  # only the kind differs: what the reachable row may claim
        kind = "slurm"

    res = Runner(inv, ThroughSrun(), [], lambda n: Expectations(), options=RunOptions(network=False)).run()
    [row] = [r for r in res.report.results if r.check == "node.reachable"]
    assert "srun" in row.message and "ssh" not in row.message.lower()


@pytest.mark.netns
@pytest.mark.slow
def test_gpu_node_without_nvidia_smi_is_one_driver_missing_error() -> None:
    tb = _bed(2, scenarios={1: "h100-590"}, no_replay={2})
    try:
        inv = Inventory.model_validate(tb.inventory())
        t = SshTransport(inv.ssh, BOUND, ask_passphrase=False)
        try:
            expect = Expectations(gpus_per_node=1, gpu_memory_gib=80.0)
            res = Runner(inv, t, node_checks(), lambda n: expect, options=RunOptions(network=False)).run()
        finally:
            t.close()
    finally:
        tb.down()
    rows = [r for r in res.report.results if "node2" in r.targets]
    driver = [r for r in rows if r.check == "gpu.driver_present"]
    assert [(r.level, r.message.split(":")[0]) for r in driver] == [(Level.ERROR, "nvidia-smi not found (exit 127)")]
    assert not [r for r in rows if "exit 127" in r.message and r.check != "gpu.driver_present"]
    assert res.states["node2"].state == "failed_gates"
    assert not [r for r in res.report.results if r.check == "gpu.driver_present" and "node1" in r.targets]


@pytest.mark.netns
@pytest.mark.slow
def test_unreachable_node_is_one_row() -> None:
    tb = _bed(2, scenarios={1: "h100-590"})
    try:
        tb.link_down(2)
        inv = Inventory.model_validate(tb.inventory())
        t = SshTransport(inv.ssh, BOUND, ask_passphrase=False)
        try:
            res = Runner(inv, t, node_checks(), lambda n: Expectations(), options=RunOptions(network=False)).run()
        finally:
            t.close()
    finally:
        tb.down()
    rows = [(r.check, r.level) for r in res.report.results if "node2" in r.targets]
    assert rows == [("node.reachable", Level.ERROR)], rows
