"""Interval recorders: one per stage per process, batch recording, active/spare swap.

After HdrHistogram's Java ``Recorder``: the writer records into the *active* histogram; rotation
swaps in a reset *spare* and hands out the filled one, so recording never waits for the log
writer (encoding an interval costs ~0.6 ms, measured). Memory is fixed per stage: two
histograms (~144 KB each) and one preallocated int64 buffer; recording a value allocates nothing.

Values come in as **nanoseconds** (monotonic-clock differences) and are stored as whole
microseconds, clamped to [0 µs, 60 s] (see ``hdr``). ``record_ns`` (one value) and ``add_ns`` (a
batch) append to the buffer, which flushes itself, vectorized, when full; ``rotate`` flushes
first, so every value recorded before a rotation lands in that rotation's interval.

The buffer is the one way a latency reaches the node's histograms: the tick stages' values
(``platform/core/stamps.py``), the fan-out's writes, priority writes, hydrations and glass
samples all arrive through ``record_ns`` or ``add_ns`` of their stage's recorder.

Threading: a recorder belongs to one thread (the pipeline's event loop); ``rotate`` is called
from that same thread (a 10 s timer on the loop), so a swap is a few reference assignments and
the hot path never blocks on it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import hdr
from .buckets import DurationBuckets
from .stages import ALL_STAGES, check_stage

__all__ = ["Interval", "Recorders", "StageRecorder"]


@dataclass(frozen=True, slots=True)
class Interval:
    """One stage's histogram over [start_ms, end_ms) wall-clock milliseconds since the epoch.

    ``proc`` and ``host`` are empty for a recorder's own interval and filled when read back from
    a log. A recorder's interval stays valid until that recorder's next ``rotate()``, which
    reuses its histogram: write or merge it before then (the log writer encodes it at once).
    """

    stage: str
    start_ms: int
    end_ms: int
    histogram: Any  # hdrh.histogram.HdrHistogram, microseconds
    proc: str = ""
    host: str = ""

    @property
    def count(self) -> int:
        return int(self.histogram.total_count)


class StageRecorder:
    """The interval recorder for one stage in one process."""

    def __init__(self, stage: str, *, start_ms: int, buffer_capacity: int = 65_536) -> None:
        if buffer_capacity < 1:
            raise ValueError("buffer_capacity must be at least 1")
        self.stage = check_stage(stage)
        self._active: Any = hdr.new_histogram()
        self._spare: Any = hdr.new_histogram()
        self._spare_clean = True  # the spare is reset and may become active as it is
        # An array.array takes a Python int ~3x faster than a numpy item store; the numpy view
        # over the same memory (no copy) is what a flush records from.
        self._buffer = array("q", bytes(8 * buffer_capacity))
        self._view: npt.NDArray[np.int64] = np.frombuffer(self._buffer, dtype=np.int64)
        self._capacity = buffer_capacity
        self._fill = 0
        self._start_ms = start_ms
        self.clamped = 0  # values outside [0 µs, 60 s] recorded at the bound, since start
        self.recorded = 0  # values flushed into a histogram since start (see `pending`)
        # The same values again as Prometheus buckets (monotape_stage_duration_seconds): bucket
        # counts add across processes and hosts, HDR quantiles do not (buckets.py).
        self.buckets = DurationBuckets()

    @property
    def buffer_capacity(self) -> int:
        return self._capacity

    @property
    def pending(self) -> int:
        """Values appended to the buffer and not yet flushed into the active histogram."""
        return self._fill

    def record_ns(self, value_ns: int) -> None:
        """Append one latency (ns); a full buffer flushes itself as one vectorized record."""
        fill = self._fill
        self._buffer[fill] = value_ns
        self._fill = fill + 1
        if fill + 1 == self._capacity:
            self.flush()

    def add_ns(self, values_ns: npt.NDArray[np.int64]) -> None:
        """Append a batch of latencies (ns), copied (the caller may reuse its array).

        Small batches (a 1 ms handler drain holds a few dozen ticks) are gathered here and
        recorded vectorized once the buffer fills (measured: ~20 ns/value in large batches,
        ~200 ns in batches of 256); a batch larger than the buffer is recorded at once."""
        n = len(values_ns)
        fill = self._fill
        if fill + n > self._capacity:
            self.flush()
            fill = 0
            if n > self._capacity:
                self.record_many_ns(values_ns)
                return
        self._view[fill : fill + n] = values_ns
        self._fill = fill + n
        if self._fill == self._capacity:
            self.flush()

    def record_many_ns(self, values_ns: npt.ArrayLike) -> None:
        """Record an array of latencies (ns) straight into the active histogram."""
        self.flush()
        us, clamped = hdr.clamp_ns_to_us(values_ns)
        self._record_us(us.reshape(-1))
        self.clamped += clamped

    def add_counts_ns(
        self, values_ns: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]
    ) -> None:
        """Record ``counts[i]`` values of ``values_ns[i]`` each (ns), straight into the active
        histogram: a batch of ticks that share one stamp (say, a bus batch admitted at one
        instant and carried by one frame) is one value with its count, not one per tick."""
        if len(values_ns) == 0:
            return
        us = values_ns // 1000
        clamped = (us < 0) | (us > hdr.HIGHEST_US)
        if clamped.any():
            self.clamped += int(counts[clamped].sum())
            us = np.clip(us, 0, hdr.HIGHEST_US)
        hdr.record_counts_us(self._active, us, counts)
        self.buckets.add_counts_us(us, counts)
        self.recorded += int(counts.sum())

    def flush(self) -> None:
        """Move the buffered values into the active histogram."""
        n = self._fill
        if n == 0:
            return
        us, clamped = hdr.clamp_ns_to_us(self._view[:n])
        self._record_us(us)
        self.clamped += clamped
        self._fill = 0

    def _record_us(self, us: npt.NDArray[np.int64]) -> None:
        index = hdr.counts_index(self._active, us)
        dense = hdr.record_us(self._active, us, index)
        if dense is None:
            self.buckets.add_us(us)
        else:  # a large flush: the buckets from its per-index counts, no second search
            self.buckets.add_dense(dense, us, index)
        self.recorded += int(us.shape[0])

    def rotate(self, now_ms: int) -> Interval:
        """Close the interval at ``now_ms`` (wall ms) and start the next one.

        Flushes, swaps in the spare (reset by ``recycle`` or here) and returns the filled
        histogram as ``Interval(stage, previous rotation, now_ms)``.
        """
        self.flush()
        if not self._spare_clean:
            hdr.reset(self._spare)
        filled, self._active = self._active, self._spare
        self._spare = filled
        self._spare_clean = False
        interval = Interval(self.stage, self._start_ms, now_ms, filled)
        filled.set_start_time_stamp(self._start_ms)
        filled.set_end_time_stamp(now_ms)
        self._start_ms = now_ms
        return interval

    def recycle(self, interval: Interval) -> None:
        """Hand back an interval once written, so the next ``rotate`` is a pure swap."""
        if interval.histogram is self._spare and not self._spare_clean:
            hdr.reset(self._spare)
            self._spare_clean = True


class Recorders:
    """A ``StageRecorder`` for every stage name (``ALL_STAGES`` unless given), in one process."""

    def __init__(
        self,
        *,
        start_ms: int,
        stages: Iterable[str] = ALL_STAGES,
        buffer_capacity: int = 65_536,
    ) -> None:
        self._by_stage = {
            s: StageRecorder(s, start_ms=start_ms, buffer_capacity=buffer_capacity) for s in stages
        }

    def __getitem__(self, stage: str) -> StageRecorder:
        return self._by_stage[stage]

    def __iter__(self) -> Iterator[StageRecorder]:
        return iter(self._by_stage.values())

    def __len__(self) -> int:
        return len(self._by_stage)

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(self._by_stage)

    def flush_all(self) -> None:
        for recorder in self._by_stage.values():
            recorder.flush()

    def rotate_all(self, now_ms: int) -> list[Interval]:
        """Rotate every stage at the same instant; one interval per stage, in stage order."""
        return [recorder.rotate(now_ms) for recorder in self._by_stage.values()]

    def recycle_all(self, intervals: Iterable[Interval]) -> None:
        for interval in intervals:
            self._by_stage[interval.stage].recycle(interval)
