"""Event-loop lag: how late the loop runs a timer that asked to wake now, measured all the time.

One event loop serves every session of every tenant, so anything that holds it (a CPU-heavy render, a
blocking call, an import) delays every other request by as long. The monitor wakes every
`interval_s` and notes how late it woke; the lag goes to `/metrics` as a histogram
(`gym_event_loop_lag_seconds`) and a gauge of the largest lag in the last minute
(`gym_event_loop_lag_max_seconds`). Above the threshold (`GYM_LIMITS__LOOP_LAG_WARN_MS`) it logs a
WARNING naming the requests in flight when the loop stalled and where the loop was stuck: a watchdog
thread, which runs while the loop is held, samples the loop thread's stack and the requests in flight
once the loop has been silent past the threshold (the request that stalled it may end before the loop
next wakes the monitor). The app's front (`gym_server.api.front.Front`) keeps the in-flight table with
`request_started` and `request_finished`: a dict insert and delete per request.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import re
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["BUCKETS", "LoopLagMonitor"]

log = logging.getLogger(__name__)

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MAX_WINDOW_S = 60.0  # the gauge's window: the largest lag of the last minute (at most two)
_SHOWN_REQUESTS = 3
_STACK_FRAMES = 4
# The frames that are "ours": the workspace's packages (the service, an environment, a verifier, the client).
_OURS = re.compile(r"[/\\](gym_server|gym_trainer|gym_verifiers|gym_env_\w+)[/\\]")


class LoopLagMonitor(Collector):
    """Measures the running loop's lag, exports it, and warns, naming the culprit, above `warn_s`."""

    def __init__(self, *, warn_s: float = 0.1, interval_s: float = 0.05) -> None:
        self.warn_s = warn_s
        self.interval_s = interval_s
        self._counts = [0] * (len(BUCKETS) + 1)
        self._sum = 0.0
        self._window_start = time.monotonic()
        self._window_max = 0.0
        self._previous_max = 0.0
        self._in_flight: dict[int, tuple[str, float]] = {}
        self._ids = itertools.count()
        self._beat = time.monotonic()
        self._blocked_in: str | None = None
        self._blocked_requests: list[tuple[str, float]] = []
        self._loop_thread: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"LoopLagMonitor(warn_s={self.warn_s}, interval_s={self.interval_s})"

    @property
    def max_s(self) -> float:
        """The largest lag seen in the current and previous window."""
        return max(self._window_max, self._previous_max)

    def start(self) -> None:
        """Start measuring the running loop (from a coroutine on it) and the watchdog thread."""
        self._loop_thread = threading.get_ident()
        self._beat = time.monotonic()
        self._stop.clear()
        self._task = asyncio.get_running_loop().create_task(self._measure(), name="loop-lag-monitor")
        self._watchdog = threading.Thread(target=self._watch, name="loop-lag-watchdog", daemon=True)
        self._watchdog.start()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._watchdog is not None:
            await asyncio.to_thread(self._watchdog.join)
            self._watchdog = None

    def request_started(self, method: str, path: str) -> int:
        token = next(self._ids)
        self._in_flight[token] = (f"{method} {path}", time.monotonic())
        return token

    def request_finished(self, token: int) -> None:
        self._in_flight.pop(token, None)

    def observe(self, lag: float) -> None:
        """Count one lag sample (seconds); warn when it is over the threshold."""
        self._counts[bisect.bisect_left(BUCKETS, lag)] += 1
        self._sum += lag
        now = time.monotonic()
        if now - self._window_start >= MAX_WINDOW_S:
            self._previous_max, self._window_max, self._window_start = self._window_max, 0.0, now
        self._window_max = max(self._window_max, lag)
        if lag > self.warn_s:
            self._warn(lag, now)

    def collect(self) -> Iterator[Metric]:
        histogram = HistogramMetricFamily(
            "gym_event_loop_lag_seconds",
            "How late the event loop ran a timer due now, sampled every interval: every request waits "
            "as long.",
        )
        cumulative, buckets = 0, []
        for bound, count in zip((*BUCKETS, float("inf")), self._counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        histogram.add_metric([], buckets, self._sum)
        yield histogram
        gauge = GaugeMetricFamily(
            "gym_event_loop_lag_max_seconds", "The largest event-loop lag of the last one to two minutes."
        )
        gauge.add_metric([], self.max_s)
        yield gauge

    async def _measure(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(self.interval_s)
            lag = max(0.0, loop.time() - asked - self.interval_s)
            self._beat = time.monotonic()
            self.observe(lag)

    def _warn(self, lag: float, now: float) -> None:
        stalled_since = now - lag
        # Those the watchdog saw during the stall (the request that stalled may have ended since), else
        # those in flight now that began before it.
        seen = self._blocked_requests or [
            (what, started) for what, started in self._in_flight.values() if started <= stalled_since
        ]
        culprits = sorted((started, what) for what, started in seen)
        shown = ", ".join(
            f"{what} ({(now - started) * 1000:.0f} ms)" for started, what in culprits[:_SHOWN_REQUESTS]
        )
        log.warning(
            "event loop blocked for %.0f ms (threshold %.0f ms); requests in flight: %s; blocked in: %s",
            lag * 1000,
            self.warn_s * 1000,
            shown or "none",
            self._blocked_in or "unknown (not sampled)",
        )
        self._blocked_in, self._blocked_requests = None, []

    def _watch(self) -> None:
        """Sample the loop thread's stack once per stall longer than the threshold."""
        sampled_beat = None
        while not self._stop.wait(self.interval_s):
            beat = self._beat
            if time.monotonic() - beat <= self.warn_s or sampled_beat == beat:
                continue
            where = _where_thread_is(self._loop_thread)
            if where is not None:
                sampled_beat = beat
                self._blocked_in = where
                self._blocked_requests = list(self._in_flight.values())


def _where_thread_is(thread_id: int | None) -> str | None:
    """Where a thread is now: its innermost frames, and the innermost of the gym's own, as
    `file:line function`; None when the thread has ended.

    Only names and line numbers leave this function. A frame object kept after the sample (it was a
    local of the watchdog's loop until the next stall) keeps every local of the stack it was taken from
    alive once that stack returns: the batch of transcripts a slow commit was writing stayed in memory
    after its sessions closed. Source lines are not read (`lookup_lines=False`): the message has no
    use for them, and `linecache` would keep every sampled file's text for the life of the process.
    """
    frame = sys._current_frames().get(thread_id or -1)
    if frame is None:
        return None
    stack = traceback.StackSummary.extract(traceback.walk_stack(frame), lookup_lines=False)
    innermost = stack[:_STACK_FRAMES]
    shown = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in innermost]
    ours = next((f for f in stack if _OURS.search(f.filename)), None)
    if ours is not None and ours not in innermost:
        shown.append(f"... {Path(ours.filename).name}:{ours.lineno} {ours.name}")
    return " <- ".join(shown)
