"""The controller's own lag: how long this process was not running when it should have been.

A daemon thread sleeps TICK_S at a time and notes how late it wakes. A late wake-up is time the
controller lost: the process was stopped (SIGSTOP, a suspended VM, swap), starved of CPU, or its
threads waited on the interpreter lock. Waits that judge a node (connect, banner, auth, a
command that gives no verdict) subtract that lost time, so a busy controller never charges a
node for its own stalls; the run reports the lag as its own finding instead.

`stalled(t0)` also counts a stall still in progress: a worker that wakes after a SIGCONT before
the ticker does sees the gap since the ticker's last wake-up.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass

TICK_S = 0.05
# A wake-up later than this is lost time; below it is ordinary scheduling jitter.
JITTER_S = 0.02


@dataclass(frozen=True)
class LagSummary:
    max_stall_s: float
    total_stall_s: float
    stalls: int  # wake-ups later than TICK_S + JITTER_S
    watched_s: float

    def to_dict(self) -> dict[str, float | int]:
        return {
            "max_stall_s": round(self.max_stall_s, 3),
            "total_stall_s": round(self.total_stall_s, 3),
            "stalls": self.stalls,
            "watched_s": round(self.watched_s, 2),
        }


class LagMonitor:
    """Started on first use (no import-time thread); one per process (`monitor()`)."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self._lock = threading.Lock()
        self._times: list[float] = []  # when a stall ended (monotonic), ascending
        self._late: list[float] = []  # that stall's length
        self._cum: list[float] = []  # total stalled seconds up to and including that stall
        self._started = time.monotonic()
        self._last = self._started
        self._thread = threading.Thread(target=self._tick, name="gf-lag", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        while True:
            time.sleep(self.tick_s)
            now = time.monotonic()
            with self._lock:
                late = now - self._last - self.tick_s
                if late > JITTER_S:
                    self._times.append(now)
                    self._late.append(late)
                    self._cum.append((self._cum[-1] if self._cum else 0.0) + late)
                self._last = now

    def _cum_at(self, t: float) -> float:
        i = bisect.bisect_right(self._times, t)
        return self._cum[i - 1] if i else 0.0

    def stalled(self, since: float, now: float | None = None) -> float:
        """Seconds this process lost between `since` and now (a stall in progress included)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            done = self._cum_at(now) - self._cum_at(since)
            ongoing = max(0.0, now - max(self._last, since) - self.tick_s - JITTER_S)
        return done + ongoing

    def own_time(self, since: float) -> float:
        """Wall seconds since `since` minus the controller's lost time: what a node was given."""
        now = time.monotonic()
        return max(0.0, now - since - self.stalled(since, now))

    def summary(self, since: float | None = None) -> LagSummary:
        now = time.monotonic()
        since = self._started if since is None else since
        with self._lock:
            lates = self._late[bisect.bisect_right(self._times, since):]
        total = sum(lates)
        return LagSummary(max(lates, default=0.0), total, len(lates), now - since)


_monitor: list[LagMonitor] = []
_monitor_lock = threading.Lock()


def monitor() -> LagMonitor:
    with _monitor_lock:
        if not _monitor:
            _monitor.append(LagMonitor())
        return _monitor[0]
