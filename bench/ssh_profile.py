"""Where one node's validation time goes, against real sshd on loopback (tests/validate/loopbed.py).

Sequential, one connection at a time, so each figure is that step alone:
- paramiko: TCP connect, banner + key exchange (start_client), host-key check, public-key auth,
  session open, and the exec of one command until its exit status; wall and this process's CPU.
- paramiko's known_hosts load, as SSHClient does it per connection, at the bed's size.
- OpenSSH `ssh` (what pdsh and clush run per node): one full connection + command, wall and the
  child's CPU (fork, exec, kex, auth included).
- Python start-up: `python -c pass`, and importing what `gpuforge validate` imports.
Medians over --reps connections. Usage: sudo .venv/bin/python -m bench.ssh_profile [--nodes 16]
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import subprocess
import sys
import time

import paramiko

from tests.validate.loopbed import PORT, LoopBed, missing_requirements


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _paramiko_once(bed: LoopBed, i: int, pkey: paramiko.PKey, hk: paramiko.HostKeys) -> dict[str, float]:
    t: dict[str, float] = {}
    c0, w0 = time.process_time(), time.perf_counter()
    sock = socket.create_connection((bed.ip(i), PORT), timeout=5)
    t["tcp"] = time.perf_counter() - w0
    w = time.perf_counter()
    tr = paramiko.Transport(sock)
    tr.start_client(timeout=5)
    t["banner+kex"] = time.perf_counter() - w
    w = time.perf_counter()
    key = tr.get_remote_server_key()
    known = hk.lookup(f"[{bed.ip(i)}]:{PORT}")
    assert known is not None and known.get(key.get_name()) == key
    t["hostkey"] = time.perf_counter() - w
    w = time.perf_counter()
    tr.auth_publickey("root", pkey)
    t["auth"] = time.perf_counter() - w
    w = time.perf_counter()
    chan = tr.open_session(timeout=5)
    t["session open"] = time.perf_counter() - w
    w = time.perf_counter()
    chan.exec_command("uname -n; uname -r")
    while not chan.exit_status_ready():
        chan.recv(4096)
    chan.recv_exit_status()
    t["exec+exit"] = time.perf_counter() - w
    chan.close()
    tr.close()
    t["total"] = time.perf_counter() - w0
    t["cpu"] = time.process_time() - c0
    return t


def _ssh_once(bed: LoopBed, i: int, cfg: str) -> dict[str, float]:
    c0, w0 = _cpu_children(), time.perf_counter()
    subprocess.run(["ssh", "-F", cfg, bed.ip(i), "uname -n; uname -r"], check=True, capture_output=True, timeout=30)
    return {"total": time.perf_counter() - w0, "cpu": _cpu_children() - c0}


def _python(code: str) -> dict[str, float]:
    c0, w0 = _cpu_children(), time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    return {"total": time.perf_counter() - w0, "cpu": _cpu_children() - c0}


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    why = missing_requirements()
    if why:
        print(f"error: cannot profile: {why}", file=sys.stderr)
        return 2
    bed = LoopBed(args.nodes).up()
    try:
        pkey = paramiko.PKey.from_path(str(bed.key))
        w = time.perf_counter()
        hk = paramiko.HostKeys(str(bed.known_hosts))
        load = time.perf_counter() - w
        nodes = [1 + k % args.nodes for k in range(args.reps)]
        _paramiko_once(bed, 1, pkey, hk)  # warm: imports, crypto back end
        para = _median([_paramiko_once(bed, i, pkey, hk) for i in nodes])
        cfg = str(bed.ssh_config())
        ssh = _median([_ssh_once(bed, i, cfg) for i in nodes])
        bare = _median([_python("pass") for _ in range(5)])
        imp = _median([_python("import gpuforge.cli, validate.runner, validate.transport, paramiko") for _ in range(5)])
    finally:
        bed.down()
    print(f"loopback bed: {args.nodes} sshd, medians of {args.reps} sequential connections (ms)")
    print("| step | paramiko wall | OpenSSH ssh wall |")
    print("|---|---|---|")
    for k in ("tcp", "banner+kex", "hostkey", "auth", "session open", "exec+exit", "total", "cpu"):
        other = f"{ssh[k] * 1000:.1f}" if k in ssh else ""
        print(f"| {k} | {para[k] * 1000:.1f} | {other} |")
    print(f"| known_hosts load ({args.nodes} entries, SSHClient does it per connection) | {load * 1000:.1f} | |")
    print(f"| python -c pass | {bare['total'] * 1000:.0f} (cpu {bare['cpu'] * 1000:.0f}) | |")
    print(f"| python: import the validate CLI + paramiko | {imp['total'] * 1000:.0f} (cpu {imp['cpu'] * 1000:.0f}) | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
