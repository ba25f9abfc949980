"""Stage latency as a Prometheus histogram, from the very values the HDR recorders take.

The HDR intervals give exact per-node quantiles (``monotape_stage_latency_seconds``), but a
quantile cannot be added to another node's quantile: a fleet-wide p99 needs bucket counts,
which add. So every value a ``StageRecorder`` records is also counted into a few cumulative
buckets placed around the budgets (40 ms frames, 45 ms conflated p99 on loopback, 80 ms
tick-to-glass over a WAN, 5 ms priority), and ``StageDurationCollector`` (the node's
collectors) exports them as ``monotape_stage_duration_seconds{stage}`` when /metrics is read.

Cost: one ``np.searchsorted`` over 14 bounds and one ``np.bincount`` per flushed batch, riding
on the recorder's vectorized flush, never a per-value ``observe()`` (~0.7 µs, MEASURED). Values
are the recorder's whole microseconds, so a bucket bound is exact to 1 µs.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "STAGE_DURATION_BUCKETS_S",
    "DurationBuckets",
    "StageBuckets",
]

# Upper bounds (seconds): 1-20 ms for the fast stages and the 5 ms priority budget; 40 ms (one
# frame), 45 ms (conflated p99 on loopback), 50 ms; 80 ms (tick to glass over a WAN); then the
# tail, up to 5 s. An alert threshold placed on a bound reads exactly "more than x% above it".
STAGE_DURATION_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.04,
    0.045,
    0.05,
    0.08,
    0.1,
    0.2,
    0.5,
    1.0,
    5.0,
)
_BOUNDS_US = np.array([round(b * 1e6) for b in STAGE_DURATION_BUCKETS_S], dtype=np.int64)


class DurationBuckets:
    """Cumulative-since-start counts per bucket (the last slot is +Inf) and the sum, as a
    Prometheus histogram needs them: never reset, so ``rate()`` works across rotations."""

    __slots__ = ("_counts", "sum_us")

    def __init__(self) -> None:
        self._counts = np.zeros(len(_BOUNDS_US) + 1, dtype=np.int64)
        self.sum_us = 0

    def add_us(self, values_us: npt.NDArray[np.int64]) -> None:
        """Count whole-microsecond values (already clamped by the recorder)."""
        if values_us.shape[0] == 0:
            return
        # side="left": the first bound >= v, i.e. Prometheus' `le` (v <= bound)
        slots = np.searchsorted(_BOUNDS_US, values_us, side="left")
        self._counts += np.bincount(slots, minlength=len(self._counts))
        self.sum_us += int(values_us.sum())

    @property
    def count(self) -> int:
        return int(self._counts.sum())

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, cumulative count)`` ending with ``+Inf``."""
        running = np.cumsum(self._counts)
        out = [
            (repr(float(b)), float(n))
            for b, n in zip(STAGE_DURATION_BUCKETS_S, running[:-1], strict=True)
        ]
        out.append(("+Inf", float(running[-1])))
        return out


class StageBuckets(Protocol):
    """What the collector reads of a stage recorder (``StageRecorder`` is one)."""

    @property
    def stage(self) -> str: ...

    @property
    def buckets(self) -> DurationBuckets: ...
