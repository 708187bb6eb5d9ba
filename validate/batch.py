"""Several commands in one session: a node's checks need one exec, not one session each.

`script()` runs the commands one after another, each under its own `timeout` (wrap()), so each
keeps its own bound, enforced on the node, and its own exit status (124/137: it ran past its
bound). Each command's output is framed by lines carrying a random per-session nonce:

    stdout:  <nonce> B <i>\\n  <command i's stdout>  \\n<nonce> E <i> <rc>\\n
    stderr:                    <command i's stderr>  \\n<nonce> E <i>\\n

The newline before each end mark is the script's, so a command's output comes back byte for
byte, trailing newline or not. Whatever the login prints before the first mark (a chatty rc
file) belongs to no command and is dropped. `Splitter` reads the two streams as they arrive and
hands back each command's (rc, stdout, stderr) as soon as both of its end marks are in: a
node's results stream per check. The framing is pure (tested without hosts); `run_batch` at the
end is the one entry point the runner uses, for every transport.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuforge.validate.inventory import Node
from gpuforge.validate.transport import KILL_AFTER_S, TIMEOUT_RCS, CommandResult, Job, Outcome, Transport, wrap


def nonce() -> str:
    return "gf-" + secrets.token_hex(8)


def script(commands: Sequence[tuple[str, float]], mark: str) -> str:
    """One POSIX sh program running each (command, bound) in turn; pass it to `sh -c`."""
    parts = [f"n={mark}"]
    for i, (command, timeout_s) in enumerate(commands):
        parts.append(
            f"printf '%s B {i}\\n' \"$n\"; {wrap(command, timeout_s)}; r=$?; "
            f"printf '\\n%s E {i} %d\\n' \"$n\" \"$r\"; printf '\\n%s E {i}\\n' \"$n\" >&2"
        )
    return "\n".join(parts) + "\nexit 0\n"


def remote_command(commands: Sequence[tuple[str, float]], mark: str) -> str:
    """What the login shell is given: `sh -c '<script>'` (the login shell need not be sh)."""
    return f"sh -c {shlex.quote(script(commands, mark))}"


def bound(commands: Sequence[tuple[str, float]]) -> float:
    """The longest the whole script may take on the node: each bound plus its kill grace."""
    return sum(max(t, 0.1) + KILL_AFTER_S for _, t in commands)


@dataclass
class Done:
    index: int
    rc: int
    stdout: bytes
    stderr: bytes


class _Stream:
    """One stream's buffer and scan position; a segment ends at an end mark (pattern group 1: index)."""

    def __init__(self, end: re.Pattern[bytes], begin: re.Pattern[bytes] | None) -> None:
        self.buf = bytearray()
        self.end, self.begin = end, begin
        self.seg = 0 if begin is None else -1  # where the current segment starts; -1: before a begin mark
        self.started = -1  # the last index whose begin mark was seen

    def feed(self, data: bytes) -> list[tuple[int, bytes, bytes]]:
        """(index, segment, the end mark's second group or b"") for each segment completed."""
        scan = max(0, len(self.buf) - 64)  # a mark may straddle two chunks
        self.buf += data
        found = []
        while True:
            if self.seg < 0:
                assert self.begin is not None
                b = self.begin.search(self.buf, scan)
                if b is None:
                    break
                self.started, self.seg = int(b.group(1)), b.end()
            e = self.end.search(self.buf, max(self.seg, scan))
            if e is None:
                break
            # copy before the buffer shrinks: a match's groups read the bytearray it matched
            found.append((int(e.group(1)), bytes(self.buf[self.seg : e.start()]), bytes(e.group(e.re.groups))))
            del self.buf[: e.end()]
            scan = 0
            self.seg = 0 if self.begin is None else -1
        return found

    def partial(self) -> bytes:
        return bytes(self.buf[self.seg :]) if self.seg >= 0 else b""


class Splitter:
    """Feeds on stdout/stderr chunks as they arrive; each `feed_*` returns the commands that chunk
    completed, in order. `started` is the last command whose begin mark came in."""

    def __init__(self, mark: str, count: int) -> None:
        m = re.escape(mark.encode())
        self.count = count
        self._out = _Stream(re.compile(rb"\n" + m + rb" E (\d+) (-?\d+)\n"), re.compile(rb"(?:^|\n)" + m + rb" B (\d+)\n"))
        self._err = _Stream(re.compile(rb"\n" + m + rb" E (\d+)\n"), None)
        self._outs: dict[int, tuple[int, bytes]] = {}
        self._errs: dict[int, bytes] = {}
        self.finished = 0  # commands handed back so far

    @property
    def started(self) -> int:
        return self._out.started

    def feed_stdout(self, data: bytes) -> list[Done]:
        for i, seg, rc in self._out.feed(data):
            self._outs[i] = (int(rc), seg)
        return self._ready()

    def feed_stderr(self, data: bytes) -> list[Done]:
        for i, seg, _ in self._err.feed(data):
            self._errs[i] = seg
        return self._ready()

    def _ready(self) -> list[Done]:
        done = []
        while self.finished in self._outs and self.finished in self._errs:
            rc, out = self._outs.pop(self.finished)
            done.append(Done(self.finished, rc, out, self._errs.pop(self.finished)))
            self.finished += 1
        return done

    def partial(self) -> tuple[bytes, bytes]:
        """What the command in progress printed so far (for a result cut short)."""
        return self._out.partial(), self._err.partial()


# ----------------------------------------------------------------------------- any transport

OnResult = Callable[[Job, CommandResult], None]


def run_batch(transport: Transport, node: Node, jobs: Sequence[Job], on_result: OnResult | None = None) -> list[CommandResult]:
    """A node's jobs over as few sessions as the transport allows; on_result as each completes.

    A transport that streams (SSH: `run_batch` of its own) hands back each command as its end
    mark arrives. Any other runs the framed script as one command (one `srun`, one local `sh`)
    and splits its output; one job alone runs as itself, exactly as `run` would.
    """
    own = getattr(transport, "run_batch", None)
    if own is not None:
        results: list[CommandResult] = own(node, jobs, on_result)
        return results
    if len(jobs) == 1:
        only = transport.run(node, jobs[0].command, jobs[0].timeout_s)
        if on_result is not None:
            on_result(jobs[0], only)
        return [only]
    mark = nonce()
    pairs = [(j.command, j.timeout_s) for j in jobs]
    whole = transport.run(node, script(pairs, mark), bound(pairs))
    results = split(node.name, jobs, mark, whole)
    if on_result is not None:
        for job, res in zip(jobs, results, strict=True):
            on_result(job, res)
    return results


def split(node: str, jobs: Sequence[Job], mark: str, whole: CommandResult) -> list[CommandResult]:
    """Per-command results from one framed script's result. Commands the script never finished
    share its outcome: out of reach (stage connect/connection), or past the script's bound."""
    sp = Splitter(mark, len(jobs))
    done = sp.feed_stdout(whole.stdout.encode()) + sp.feed_stderr(whole.stderr.encode())
    each = whole.duration_s / max(1, len(jobs))
    results = [result(node, jobs[d.index].command, d, each) for d in done]
    for job in jobs[len(results) :]:
        if whole.stage != "command":
            took, why = whole.duration_s, whole.detail
            results.append(CommandResult(node, job.command, whole.outcome, None, "", "", took, why, whole.stage))
        else:
            why = whole.detail or f"the checks before it did not end (exit {whole.exit_code})"
            results.append(CommandResult(node, job.command, Outcome.TIMEOUT, None, "", "", whole.duration_s, why))
    return results


def result(node: str, command: str, d: Done, took: float) -> CommandResult:
    """One finished command: its own `timeout`'s exit status is the verdict on time."""
    out, err = d.stdout.decode("utf-8", errors="replace"), d.stderr.decode("utf-8", errors="replace")
    if d.rc in TIMEOUT_RCS:
        return CommandResult(node, command, Outcome.TIMEOUT, None, out, err, took,
                             f"ran past its bound on the node (`timeout` exit {d.rc})")  # fmt: skip
    return CommandResult(node, command, Outcome.OK, d.rc, out, err, took)
