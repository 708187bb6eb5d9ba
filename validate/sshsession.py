"""One SSH session carrying a node's checks, read as it streams (validate/batch.py frames it).

Each check's result is handed back as soon as its end marks arrive. The check's limit is
enforced on the node (`timeout`); this read loop only backs it up, in the controller's own time
(validate/lag.py): a node whose command gives no verdict within its bound + kill grace + slack
of the controller's attention is reported as such, and a stalled controller never is.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import paramiko

from gpuforge.validate import batch, lag
from gpuforge.validate.batch import OnResult
from gpuforge.validate.inventory import Node
from gpuforge.validate.transport import KILL_AFTER_S, LOCAL_SLACK_S, CommandResult, Job, Outcome

READ_S = 0.25  # how long one read waits before the loop looks at its bounds again


def open_session(tr: paramiko.Transport, channel_s: float, max_sessions: int) -> paramiko.Channel | str:
    """A session channel, or why there is none. sshd may still count a session we just closed,
    or run with MaxSessions below ours: a refused session is retried for as long as a channel
    may take. A wait that ran out while this controller was stalled is tried again."""
    clock, start = lag.monitor(), time.monotonic()
    while True:
        if not tr.is_active():
            return "connection closed by the node"
        try:
            return tr.open_session(timeout=channel_s)
        except paramiko.SSHException as exc:
            # a refusal is a ChannelException, or, when concurrent opens on one transport
            # race for paramiko's single saved exception, a bare "Unable to open channel."
            refused = isinstance(exc, paramiko.ChannelException) or "Unable to open channel" in str(exc)
            timed_out = "Timeout" in str(exc)
            if not refused and not timed_out:
                return f"channel: {exc}"
            if clock.own_time(start) >= (3 if refused else 1) * channel_s:
                if refused:
                    return f"channel: sshd refused a session ({exc}); its MaxSessions is below {max_sessions}?"
                return f"channel: {exc}"
            time.sleep(0.1)


def session(tr: paramiko.Transport, node: Node, jobs: Sequence[Job], on_result: OnResult | None, channel_s: float,
            max_sessions: int) -> list[CommandResult]:  # fmt: skip
    """The jobs in one session on `tr`, streamed; a session that cannot open fails them all."""
    start = time.monotonic()
    chan = open_session(tr, channel_s, max_sessions)
    if isinstance(chan, str):
        outcome = Outcome.TIMEOUT if "Timeout" in chan else Outcome.UNREACHABLE
        failed = [CommandResult(node.name, j.command, outcome, None, "", "", time.monotonic() - start, chan, "channel")
                  for j in jobs]  # fmt: skip
        return report(jobs, failed, on_result)
    try:
        return _stream(node, chan, jobs, on_result)
    finally:
        chan.close()


def _stream(node: Node, chan: paramiko.Channel, jobs: Sequence[Job], on_result: OnResult | None) -> list[CommandResult]:
    mark = batch.nonce()
    pairs = [(j.command, j.timeout_s) for j in jobs]
    split = batch.Splitter(mark, len(jobs))
    clock = lag.monitor()
    results: list[CommandResult] = []
    chan.settimeout(READ_S)
    chan.exec_command(batch.remote_command(pairs, mark))
    began = time.monotonic()  # when the command now running began (own time is measured from it)
    out_eof = False
    while len(results) < len(jobs):
        done: list[batch.Done] = []
        if not out_eof:
            try:
                data = chan.recv(65536)
                out_eof = not data
                done += split.feed_stdout(data)
            except TimeoutError:
                pass
        while chan.recv_stderr_ready():
            done += split.feed_stderr(chan.recv_stderr(65536))
        if out_eof and not done:
            try:  # stdout is over: what is left is on stderr, or the session ended early
                data = chan.recv_stderr(65536)
                done += split.feed_stderr(data)
                if not data:
                    break
            except TimeoutError:
                pass
        for d in done:
            now = time.monotonic()
            res = batch.result(node.name, jobs[d.index].command, d, now - began)
            results.append(res)
            if on_result is not None:
                on_result(jobs[d.index], res)
            began = now
        if len(results) < len(jobs):
            cur = jobs[len(results)]
            if clock.own_time(began) > cur.timeout_s + KILL_AFTER_S + LOCAL_SLACK_S:
                return report(jobs[len(results) :], _hung(node, jobs[len(results) :], began, split), on_result,
                               results)  # fmt: skip
    if len(results) < len(jobs):
        why = "the session ended before its checks did (connection lost?)"
        lost = [CommandResult(node.name, j.command, Outcome.UNREACHABLE, None, "", "", time.monotonic() - began, why,
                              "connection") for j in jobs[len(results) :]]  # fmt: skip
        return report(jobs[len(results) :], lost, on_result, results)
    return results


def _hung(node: Node, left: Sequence[Job], began: float, split: batch.Splitter) -> list[CommandResult]:
    """The node gave no verdict (no exit, not even `timeout`'s) within the bound, the kill grace
    and the slack, in the controller's own time: the check ran past its bound (a process the
    kill cannot end, an sshd that stopped answering). The rest of the batch did not run."""
    out, err = (b.decode("utf-8", errors="replace") for b in split.partial())
    took = time.monotonic() - began
    first = CommandResult(node.name, left[0].command, Outcome.TIMEOUT, None, out, err, took,
                          f"no verdict from the node within its bound + {KILL_AFTER_S + LOCAL_SLACK_S:g} s "
                          f"({lag.monitor().own_time(began):.1f} s of the controller's own time)")  # fmt: skip
    why = "not run: an earlier check on this node did not end"
    return [first] + [CommandResult(node.name, j.command, Outcome.TIMEOUT, None, "", "", 0.0, why) for j in left[1:]]


def report(jobs: Sequence[Job], res: list[CommandResult], on_result: OnResult | None,
            before: list[CommandResult] | None = None) -> list[CommandResult]:  # fmt: skip
    """Hand results to on_result (those not handed yet) and return all of them in job order."""
    if on_result is not None:
        for job, r in zip(jobs, res, strict=True):
            on_result(job, r)
    return [*(before or []), *res]

