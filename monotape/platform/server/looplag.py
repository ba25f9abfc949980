"""Event-loop lag: how late a timer that should fire every ``interval_s`` actually wakes.

Everything of the embedded node shares one event loop (design: Processes), so a callback that
holds it - a GC pause, a synchronous encode of a snapshot storm, a blocking call - delays every
frame boundary of the 40 ms grid by the same amount. This measures that delay directly.

``LoopLagMonitor`` is a small state machine (``observe(lag_ns)``) with a thin driver
(``run()``): the driver sleeps ``interval_s``, reads the monotonic clock on wake-up and
observes ``woke - (slept_at + interval)``. Exported at scrape time by ``LoopLagCollector``
(``monotape/platform/role/collectors.py``) as
``monotape_event_loop_lag_seconds`` (the latest lag), plus, when the names are given, the
maximum since the previous scrape and a histogram of every sample.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from typing import Any

from monotape.clock import Clock, SystemClock

__all__ = ["LOOP_LAG_BUCKETS_S", "LoopLagMonitor"]

# Upper bounds (seconds): 1 ms is scheduler noise; 40 ms is one whole frame of the grid.
LOOP_LAG_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
)
_BOUNDS_NS: tuple[int, ...] = tuple(round(b * 1e9) for b in LOOP_LAG_BUCKETS_S)


class LoopLagMonitor:
    """The latest lag, the maximum since the last ``take_max()`` and a cumulative histogram."""

    def __init__(self, interval_s: float = 0.1, *, clock: Clock | None = None) -> None:
        if not interval_s > 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self._clock: Clock = clock or SystemClock()
        self.last_ns = 0
        self.max_ns = 0  # since the last take_max()
        self.sample_max_ns = 0  # since the last take_sample_max() (the embedded dashboards)
        self.peak_ns = 0  # since start, never reset
        self.samples = 0
        self.total_ns = 0
        self._buckets = [0] * (len(_BOUNDS_NS) + 1)  # last slot: +Inf
        self._stopping = False
        self._wake: asyncio.Future[None] | None = None

    # -- core ----------------------------------------------------------------------------------
    def observe(self, lag_ns: int) -> None:
        lag_ns = max(0, int(lag_ns))
        self.last_ns = lag_ns
        if lag_ns > self.max_ns:
            self.max_ns = lag_ns
        if lag_ns > self.sample_max_ns:
            self.sample_max_ns = lag_ns
        if lag_ns > self.peak_ns:
            self.peak_ns = lag_ns
        self.samples += 1
        self.total_ns += lag_ns
        self._buckets[bisect_left(_BOUNDS_NS, lag_ns)] += 1

    def take_max(self) -> int:
        """The maximum lag (ns) since the previous call, then reset. One reader (the /metrics
        scrape) should own this; other readers use ``peak_ns`` or ``snapshot()``."""
        out, self.max_ns = self.max_ns, 0
        return out

    def take_sample_max(self) -> int:
        """The same maximum for a second reader (the dashboards' sampler, once a second), kept
        apart so neither reader steals the other's peak."""
        out, self.sample_max_ns = self.sample_max_ns, 0
        return out

    def histogram(self) -> tuple[list[tuple[str, int]], float, int]:
        """Cumulative ``(le, count)`` buckets ending with ``+Inf``, sum of seconds, count."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip(LOOP_LAG_BUCKETS_S, self._buckets, strict=False):
            running += n
            out.append((repr(float(bound)), running))
        running += self._buckets[-1]
        out.append(("+Inf", running))
        return out, self.total_ns / 1e9, running

    def snapshot(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "last_ms": self.last_ns / 1e6,
            "max_since_scrape_ms": self.max_ns / 1e6,
            "peak_ms": self.peak_ns / 1e6,
            "samples": self.samples,
            "mean_ms": self.total_ns / self.samples / 1e6 if self.samples else 0.0,
            "buckets": dict(self.histogram()[0]),
        }

    # -- driver --------------------------------------------------------------------------------
    async def run(self) -> None:
        """Sample until ``stop()``. One timer per interval; the wait is a bare future with a
        ``call_later`` (what ``asyncio.sleep`` does), so ``stop()`` can wake it at once."""
        loop = asyncio.get_running_loop()
        now = self._clock.now_ns
        interval_ns = round(self.interval_s * 1e9)
        self._stopping = False
        while not self._stopping:
            wake: asyncio.Future[None] = loop.create_future()
            self._wake = wake
            slept_at = now()
            timer = loop.call_later(self.interval_s, _resolve, wake)
            try:
                await wake
            finally:
                timer.cancel()
                self._wake = None
            if self._stopping:
                break
            self.observe(now() - slept_at - interval_ns)

    def stop(self) -> None:
        """Make ``run()`` return at its next wake-up (at once when it is waiting). Call it from
        the loop's thread; idempotent."""
        self._stopping = True
        if self._wake is not None:
            _resolve(self._wake)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
