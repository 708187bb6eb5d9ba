"""`gpuforge health-check` under concurrency (issue 19), the command itself: three processes
against stand-in `sinfo`/`scontrol` that hold every node's first read until all three have read,
the interleaving in which nodes that drain on what they read drain past the bound. The decision
over every interleaving: test_health_race.py; the real daemons: test_slurm_testbed.py.
The stand-ins keep node states in a JSON file under a lock and stamp reasons in whole seconds,
as slurmctld does (node_mgr.c update_node); they answer the format the command asks for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]

FAKE = textwrap.dedent('''\
    #!{python}
    """A stand-in for {name}: node states in a JSON file, each call under a lock (slurmctld's node
    lock), reasons stamped with whole seconds. The first sinfo of each node holds its answer until
    every node has read once: all of them decide before any drains."""
    import fcntl, json, os, sys, time
    root = {root!r}
    def locked(fn):
        with open(os.path.join(root, "lock"), "w") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            path = os.path.join(root, "state.json")
            state = json.load(open(path))
            out = fn(state)
            json.dump(state, open(path, "w"))
            return out
    if "{name}" == "sinfo":
        fmt = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--format="))
        me = os.environ["GF_NODE"]
        def read(state):
            fresh = me not in state["read"]
            state["read"].append(me)
            return fresh, json.loads(json.dumps(state))
        fresh, state = locked(read)
        if fresh:  # hold the answer until every node has read
            for _ in range(600):
                if len(set(locked(lambda s: s["read"]))) >= {n}:
                    break
                time.sleep(0.05)
        stamp = os.environ.get("SLURM_TIME_FORMAT") == "%s"
        for node, (st, reason, t) in sorted(state["nodes"].items()):
            fields = {{"%N": node, "%T": st, "%E": reason,
                      "%H": (str(t) if stamp else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))) if t else "Unknown"}}
            line = fmt
            for k, v in fields.items():
                line = line.replace(k, v)
            print(line)
    else:
        args = dict(a.split("=", 1) for a in sys.argv[2:])
        def update(state):
            node = args["nodename"]
            if args["state"] == "drain":
                state["nodes"][node] = ["drained", args["reason"], int(time.time())]
            elif args["state"] == "resume":
                state["nodes"][node] = ["idle", "none", 0]
        locked(update)
''')


def test_the_command_drains_one_of_three_nodes_that_all_read_before_any_drains(tmp_path: Path) -> None:
    names = ["n1", "n2", "n3"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sinfo", "scontrol"):
        p = bin_dir / name
        p.write_text(FAKE.format(python=sys.executable, name=name, root=str(tmp_path), n=len(names)))
        p.chmod(0o755)
    (tmp_path / "state.json").write_text(json.dumps({"read": [], "nodes": {n: ["idle", "none", 0] for n in names}}))
    inv = tmp_path / "inventory.json"
    # p5.48xlarge expects 8 GPUs; the replayed nvidia-smi (one H100, tests/validate/replay) shows 1
    inv.write_text(json.dumps({"nodes": [{"name": n, "host": "localhost", "instance_type": "p5.48xlarge"} for n in names]}))
    replay = PROJECT / "tests" / "validate" / "replay"
    procs = []
    for n in names:
        env = {**os.environ, "PATH": f"{bin_dir}:{replay}:{os.environ['PATH']}", "GF_NODE": n, "SLURMD_NODENAME": n,
               "GPUFORGE_REPLAY_SCENARIO": "h100-590"}  # fmt: skip
        argv = [sys.executable, "-c", "import sys; from gpuforge.cli import main; sys.argv[0] = 'gpuforge'; main()",
                "health-check", "--inventory", str(inv), "--checks", "gpu",
                "--max-drained-percent", "50", "--log", str(tmp_path / f"{n}.jsonl")]  # fmt: skip
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    state = json.loads((tmp_path / "state.json").read_text())
    drained = sorted(n for n, (st, reason, _) in state["nodes"].items() if st == "drained")
    assert len(drained) == 1, (state, [o[1][-2000:] for o in outs])
    assert state["nodes"][drained[0]][1].startswith("gpuforge-health: gpu.count: 1 GPUs visible, expected 8")
    assert sorted(set(state["read"])) == names  # every node read before any drained: the race was played
    assert [p.returncode for p in procs] == [1, 1, 1]  # a failing node exits 1 whether drained or held
