"""A node's checks in one session (validate/batch.py): the framing, fed the way a channel feeds
it, and the framed script run for real by `sh` through the local transport."""

from __future__ import annotations

import subprocess
import time

from gpuforge.validate import batch
from gpuforge.validate.inventory import Node
from gpuforge.validate.transport import Job, LocalTransport, Outcome

NODE = Node(name="here", host="localhost")
COMMANDS = [
    ("echo hi", 5.0),
    ("printf 'no newline'; echo oops >&2; exit 3", 5.0),
    ("true", 5.0),
    ("printf '\\n\\n'; echo 'x\\ny' >&2", 5.0),
]


def _run_script(commands: list[tuple[str, float]], mark: str) -> tuple[bytes, bytes]:
    p = subprocess.run(["sh", "-c", batch.script(commands, mark)], capture_output=True, timeout=60, check=True)
    return p.stdout, p.stderr


def test_each_command_comes_back_byte_for_byte_with_its_exit_status() -> None:
    mark = batch.nonce()
    out, err = _run_script(COMMANDS, mark)
    sp = batch.Splitter(mark, len(COMMANDS))
    done = sp.feed_stdout(out) + sp.feed_stderr(err)
    assert [(d.index, d.rc, d.stdout, d.stderr) for d in done] == [
        (0, 0, b"hi\n", b""),
        (1, 3, b"no newline", b"oops\n"),
        (2, 0, b"", b""),
        (3, 0, b"\n\n", b"x\ny\n"),
    ]


def test_streams_fed_a_byte_at_a_time_interleaved_give_the_same_results_in_order() -> None:
    mark = batch.nonce()
    out, err = _run_script(COMMANDS, mark)
    sp = batch.Splitter(mark, len(COMMANDS))
    done: list[batch.Done] = []
    for k in range(max(len(out), len(err))):
        done += sp.feed_stdout(out[k : k + 1]) if k < len(out) else []
        done += sp.feed_stderr(err[k : k + 1]) if k < len(err) else []
    assert [d.index for d in done] == [0, 1, 2, 3]
    assert done[1].stdout == b"no newline" and done[3].stderr == b"x\ny\n"


def test_a_result_is_handed_back_when_its_marks_arrive_not_at_the_end() -> None:
    mark = batch.nonce()
    out, err = _run_script(COMMANDS[:2], mark)
    sp = batch.Splitter(mark, 2)
    first_out = out[: out.index(f"{mark} B 1".encode())]
    assert sp.feed_stdout(first_out) == []  # stderr's end mark for command 0 not in yet
    assert sp.started == 0
    [d] = sp.feed_stderr(err[: err.index(b"oops")])
    assert (d.index, d.stdout) == (0, b"hi\n") and sp.finished == 1


def test_login_noise_before_the_first_mark_belongs_to_no_command() -> None:
    mark = batch.nonce()
    out, err = _run_script(COMMANDS[:1], mark)
    sp = batch.Splitter(mark, 1)
    [d] = sp.feed_stdout(b"Welcome to node7\n" + out) + sp.feed_stderr(err)
    assert d.stdout == b"hi\n"


def test_run_batch_over_a_transport_that_cannot_stream_splits_one_framed_run() -> None:
    jobs = [Job(NODE, c, t) for c, t in COMMANDS]
    seen: list[int] = []
    results = batch.run_batch(LocalTransport(), NODE, jobs, lambda j, r: seen.append(jobs.index(j)))
    assert seen == [0, 1, 2, 3]
    assert [(r.outcome, r.exit_code, r.stdout) for r in results] == [
        (Outcome.OK, 0, "hi\n"), (Outcome.OK, 3, "no newline"), (Outcome.OK, 0, ""), (Outcome.OK, 0, "\n\n"),
    ]  # fmt: skip


def test_a_command_past_its_bound_is_judged_by_the_nodes_timeout_and_the_rest_still_run() -> None:
    jobs = [Job(NODE, "sleep 30", 1.0), Job(NODE, "echo after", 5.0)]
    start = time.monotonic()
    slow, after = batch.run_batch(LocalTransport(), NODE, jobs)
    assert time.monotonic() - start < 10
    assert slow.outcome is Outcome.TIMEOUT and slow.stage == "command" and "exit 124" in slow.detail
    assert after.ok and after.stdout == "after\n"
