"""The 10 s rotation of the stage histograms into interval logs (design: Observability).

Every ``hdr_interval_s`` on the wall clock's grid, every stage's interval is closed (a swap of
histograms, quick, on the loop), written in HdrHistogram's interval-log format under
``<data-dir>/hdr`` (a few ms of encoding, in a thread) and summarized into the exact
percentiles that ``monotape_stage_latency_seconds`` exports until the next rotation.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from monotape.clock import Clock
from monotape.histograms import Interval, IntervalLogWriter, Percentiles, summarize
from monotape.log import log_event
from monotape.platform.core.stamps import StageStamps

__all__ = ["HistogramRotation", "sleep_until"]


async def sleep_until(clock: Callable[[], int], deadline_ns: int) -> None:
    """Sleep until ``clock()`` reaches ``deadline_ns``, however early the timer fires."""
    while (now := clock()) < deadline_ns:
        await asyncio.sleep((deadline_ns - now) / 1e9)


class HistogramRotation:
    """Closes, writes and summarizes the stage intervals; ``latest`` holds the summaries of
    the last closed interval (what ``StageLatencyCollector`` exports).

    ``before`` runs first at every rotation: the server's priority writes gathered since the
    last frame belong to the interval being closed."""

    def __init__(
        self,
        stamps: StageStamps,
        writer: IntervalLogWriter,
        clock: Clock,
        *,
        interval_s: float,
        before: Callable[[], object],
    ) -> None:
        self.stamps = stamps
        self.writer = writer
        self.latest: dict[str, Percentiles] = {}
        self._clock = clock
        self._step_ns = int(interval_s * 1e9)
        self._before = before
        self._persist_lock = threading.Lock()
        self._rotating: asyncio.Future[dict[str, Percentiles]] | None = None

    async def run(self) -> None:
        # Rotations sit on the wall clock's 10 s grid, so intervals of every process and host
        # line up and merge window by window.
        while True:
            wall = self._clock.wall_ns()
            await sleep_until(self._clock.wall_ns, wall - wall % self._step_ns + self._step_ns)
            try:
                await self.rotate_off_loop()
            except Exception as exc:  # a full disk must not stop market data
                log_event("rotation_failed", level="error", error=repr(exc))

    async def rotate_off_loop(self) -> None:
        """The 10 s rotation: swapping the histograms is quick and stays on the loop; encoding
        and writing the intervals (a few ms) runs in a thread, so it never delays a frame or a
        priority update. The spares are recycled once the write is done."""
        self._before()  # priority writes since the last frame: this interval's
        wall = self._clock.wall_ns()
        intervals = self.stamps.rotate(wall // 1_000_000, wall - self._clock.now_ns())
        self._rotating = asyncio.ensure_future(
            asyncio.to_thread(self._persist, intervals, wall // 1_000_000)
        )
        # Shielded: a stop must not recycle histograms the thread is still encoding (stop()
        # waits for this write before it cancels the loop).
        summaries = await asyncio.shield(self._rotating)
        self.stamps.recorders.recycle_all(intervals)
        self.latest = summaries

    def rotate_now(self, *, final: bool = False) -> None:
        """Rotate on the loop, write in place: for a stop (``final``) and for tests."""
        self._before()
        wall = self._clock.wall_ns()
        intervals = self.stamps.rotate(wall // 1_000_000, wall - self._clock.now_ns(), final=final)
        try:
            self.latest = self._persist(intervals, wall // 1_000_000)
        finally:
            self.stamps.recorders.recycle_all(intervals)

    async def settle(self, timeout_s: float) -> None:
        """Wait (bounded) for a rotation's write still running in its thread."""
        if self._rotating is not None and not self._rotating.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._rotating), timeout_s)

    def _persist(self, intervals: list[Interval], now_ms: int) -> dict[str, Percentiles]:
        # One writer at a time: a stop's final rotation may start while a cancelled rotation's
        # thread is still writing.
        with self._persist_lock:
            self.writer.write(intervals)
            self.writer.apply_retention(now_ms)
        return {
            iv.stage: summarize(
                iv.histogram,
                stage=iv.stage,
                window_start_ms=iv.start_ms,
                window_end_ms=iv.end_ms,
                intervals=1,
            )
            for iv in intervals
        }
