"""validate's SSH fan-out against real OpenSSH daemons on loopback (tests/validate/loopbed.py):
one session per node, results streaming with no barrier, threads and connections bounded by
the pool whatever the node count, a descriptor limit that queues work, bounds enforced on the
node, and unreachable / auth failure / hung sshd as separate outcomes. Each test failed on the
transport and runner before the pool (one thread and connection per node, a probe session,
a connect barrier, a deadline started before the channel opened)."""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate import ssh as ssh_module
from gpuforge.validate.checks import Expectations, NodeCheck
from gpuforge.validate.inventory import Inventory
from gpuforge.validate.runner import Runner, RunResult
from gpuforge.validate.ssh import SshTransport
from gpuforge.validate.stagehost import RunOptions
from gpuforge.validate.system import IdentityCheck, system_checks
from gpuforge.validate.transport import Job, Timeouts
from tests.validate.loopbed import LoopBed, missing_requirements

pytestmark = [pytest.mark.slow]
_WHY = missing_requirements()
BOUND = Timeouts(connect=2, banner=2, auth=2, channel=2)


def _bed(n: int, **kw: Any) -> LoopBed:
    if _WHY:
        pytest.skip(_WHY)
    return LoopBed(n, **kw).up()


@pytest.fixture
def bed(request: pytest.FixtureRequest) -> Iterator[LoopBed]:
    tb = _bed(int(getattr(request, "param", 6)))
    try:
        yield tb
    finally:
        tb.down()


class Recorder:
    """Progress that notes when each line came, and the most threads alive at any line."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.lines: list[tuple[float, str, str]] = []  # (when, stage, note)
        self.peak_threads = threading.active_count()
        self.name = ""

    def stage(self, name: str, total: int) -> None:
        self.name = name

    def advance(self, note: str = "") -> None:
        self.lines.append((time.monotonic() - self.t0, self.name, note))
        self.peak_threads = max(self.peak_threads, threading.active_count())


def _run(tb: LoopBed, workers: int, checks: list[NodeCheck[Any]] | None = None,
         progress: Recorder | None = None) -> tuple[RunResult, SshTransport]:  # fmt: skip
    inv = Inventory.model_validate(tb.inventory())
    t = SshTransport(inv.ssh, BOUND, ask_passphrase=False, max_connections=workers)
    opts = RunOptions(network=False, max_workers=workers)
    try:
        chosen = system_checks(True) if checks is None else checks
        res = Runner(inv, t, chosen, lambda n: Expectations(), options=opts, progress=progress).run()
    finally:
        t.close()
    return res, t


def test_a_node_runs_all_its_checks_in_one_session(bed: LoopBed) -> None:
    res, _ = _run(bed, 8)
    assert {s.state for s in res.states.values()} == {"ok"}, res.states
    rows = {(r.check, r.targets[0]) for r in res.report.results if r.check != "node.reachable"}
    assert rows == {(c.name, n) for c in system_checks(True) for n in bed.names()}
    # three checks, no probe: one session per node (was four: `true`, then one per check)
    assert [bed.sessions(i) for i in range(1, bed.n + 1)] == [1] * bed.n


def test_first_results_arrive_while_a_hung_node_still_connects(bed: LoopBed) -> None:
    bed.stop(bed.n)  # a hung sshd: TCP connects, no banner for BOUND.banner seconds
    rec = Recorder()
    res, _ = _run(bed, 8, progress=rec)
    name = bed.names()[-1]
    first = min(t for t, stage, note in rec.lines if stage != "connect" and not note.startswith(name))  # a check's
    hung = min(t for t, _, note in rec.lines if note.startswith(name))
    # no barrier: healthy nodes report before the hung one's bound runs out (it took >= 2 s)
    assert hung >= BOUND.banner and first < hung, rec.lines[:6]
    assert res.states[bed.names()[-1]].state == "timeout" and "banner" in res.states[bed.names()[-1]].detail


@pytest.mark.parametrize("bed", [40], indirect=True)
def test_threads_and_connections_do_not_grow_with_the_node_count(bed: LoopBed) -> None:
    base = threading.active_count()
    rec = Recorder()
    res, t = _run(bed, 4, progress=rec)
    assert {s.state for s in res.states.values()} == {"ok"}
    # 4 workers, each with one connection (a paramiko reader thread), a closed connection's reader
    # finishing its last 0.1 s read beside its successor's, and the lag ticker: not 40 of anything
    assert rec.peak_threads <= base + 3 * 4 + 1, rec.peak_threads
    assert t.stats.peak_live <= 4 and t.stats.opened == bed.n


@pytest.mark.parametrize("bed", [24], indirect=True)
@pytest.mark.parametrize("trust_the_limit", [True, False])
def test_a_descriptor_limit_below_the_pool_queues_work_and_fails_no_node(
    bed: LoopBed, trust_the_limit: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not trust_the_limit:  # the pool is told it has room: it meets EMFILE and must queue on it
        monkeypatch.setattr(ssh_module, "fd_capacity", lambda wanted: wanted)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    import os

    room = len(os.listdir("/proc/self/fd")) + 12  # a handful of sockets beyond what is open now
    resource.setrlimit(resource.RLIMIT_NOFILE, (room, hard))
    try:
        res, t = _run(bed, 64)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert {s.state for s in res.states.values()} == {"ok"}, {k: v.detail for k, v in res.states.items() if v.state != "ok"}
    assert t.stats.peak_live < 24
    if not trust_the_limit:
        assert t.stats.descriptor_waits > 0


def test_unreachable_auth_failure_and_hung_sshd_are_separate_outcomes() -> None:
    tb = _bed(4, deny=frozenset({2}))
    try:
        tb.stop(3)
        tb.refuse(4)
        res, _ = _run(tb, 4, [IdentityCheck()])
    finally:
        tb.down()
    states = {k: v.state for k, v in res.states.items()}
    assert states == {"n0001": "ok", "n0002": "auth_failed", "n0003": "timeout", "n0004": "unreachable"}
    reach = [r for r in res.report.results if r.check == "node.reachable"]
    assert [r.level for r in reach] == [Level.PASS, Level.ERROR, Level.ERROR, Level.ERROR]


class _Sleeper(NodeCheck[str]):
    name: ClassVar[str] = "test.sleeper"
    timeout_s: ClassVar[float] = 1.0

    def command(self) -> str:
        return "sleep 30"

    def parse(self, stdout: str) -> str:
        return stdout

    def evaluate(self, node: str, measurement: str, expect: Expectations) -> list[CheckResult]:
        return [CheckResult(self.name, Level.PASS, (node,), measurement, None, "ran")]


@pytest.mark.parametrize("bed", [2], indirect=True)
def test_a_check_past_its_bound_is_judged_by_the_nodes_own_timeout(bed: LoopBed) -> None:
    res, _ = _run(bed, 2, [IdentityCheck(), _Sleeper()])
    rows = [r for r in res.report.results if r.check == "test.sleeper"]
    assert [r.level for r in rows] == [Level.ERROR, Level.ERROR]
    assert all("`timeout` exit 124" in r.message for r in rows), [r.message for r in rows]
    assert {r.level for r in res.report.results if r.check == "system.identity"} == {Level.INFO}


@pytest.mark.parametrize("bed", [8], indirect=True)
def test_a_round_of_pairs_runs_at_once_though_the_pool_is_sized_for_fewer_workers(bed: LoopBed) -> None:
    inv = Inventory.model_validate(bed.inventory())
    t = SshTransport(inv.ssh, BOUND, ask_passphrase=False, max_connections=2)
    runner = Runner(inv, t, [], lambda n: Expectations(), options=RunOptions(network=False, max_workers=2))
    stamp = "date +%s.%N; sleep 3; date +%s.%N"
    try:
        results = runner.run_pairs("round", [Job(n, stamp, 20) for n in inv.nodes[:6]])
    finally:
        t.close()
    spans = [[float(x) for x in r.stdout.split()] for r in results]
    assert all(r.ok for r in results), [r.detail for r in results]
    # all six measured together, as the round's disjoint pairs must be (not in waves of two)
    assert max(a for a, _ in spans) < min(b for _, b in spans), spans
