"""Stage latency as a Prometheus histogram, from the very values the HDR recorders take.

The HDR intervals give exact per-node quantiles (``monotape_stage_latency_seconds``), but a
quantile cannot be added to another node's quantile: a fleet-wide p99 needs bucket counts,
which add. So every value a ``StageRecorder`` records is also counted into a few cumulative
buckets placed around the budgets (40 ms frames, 45 ms conflated p99 on loopback, 80 ms
tick-to-glass over a WAN, 5 ms priority), and ``StageDurationCollector`` (the node's
collectors) exports them as ``monotape_stage_duration_seconds{stage}`` when /metrics is read.

Cost: riding on the recorder's vectorized flush, never a per-value ``observe()`` (~0.7 µs,
measured). A large flush already counts its values per HDR index (``hdr.record_us``'s dense
bincount); ``add_dense`` folds those 17,408 counts into the 15 buckets with a lookup table, so
the buckets cost one gather per value (was a ``np.searchsorted`` over 14 bounds: ~20 ns per
value, half of a flush). Values are the recorder's whole microseconds and a bucket bound is exact
to 1 µs: the 12 HDR buckets that straddle a bound (3 significant digits: 4-4,096 µs wide there;
1 and 2 ms sit where HDR is exact) have their values placed by a ``searchsorted`` of those
values only.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from . import hdr

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


def _slots_by_index() -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """For every HDR counts index: the bucket slot of its lowest value, and whether its values
    straddle a bound (then each value's own slot is looked up)."""
    lowest, highest = hdr.index_bounds(hdr.new_histogram())
    low = np.searchsorted(_BOUNDS_US, lowest, side="left")
    return low, low != np.searchsorted(_BOUNDS_US, highest, side="left")


_SLOT_OF_INDEX, _STRADDLES = _slots_by_index()
# slots rise with the index: each slot's first index, for one np.add.reduceat over a flush's
# dense counts (every slot holds at least one index: the bounds are far apart at 3 digits)
_SLOT_STARTS = np.searchsorted(_SLOT_OF_INDEX, np.arange(len(_BOUNDS_US) + 1), side="left")


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

    def add_dense(
        self,
        dense: npt.NDArray[np.int64],
        values_us: npt.NDArray[np.int64],
        index: npt.NDArray[np.int64],
    ) -> None:
        """Count the values of a flush from ``dense`` (values per HDR counts index, as
        ``hdr.record_us`` returns it) and ``index`` (each value's counts index): the same counts
        as ``add_us(values_us)``."""
        counts = self._counts
        counts += np.add.reduceat(dense, _SLOT_STARTS)
        straddling = _STRADDLES[index]
        if straddling.any():  # move those above their bound one slot up
            exact = np.searchsorted(_BOUNDS_US, values_us[straddling], side="left")
            moved = exact != _SLOT_OF_INDEX[index[straddling]]
            counts += np.bincount(exact[moved], minlength=len(counts))
            counts -= np.bincount(exact[moved] - 1, minlength=len(counts))
        self.sum_us += int(values_us.sum())

    def add_counts_us(
        self, values_us: npt.NDArray[np.int64], weights: npt.NDArray[np.int64]
    ) -> None:
        """Count ``weights[i]`` copies of each value ``values_us[i]``."""
        if values_us.shape[0] == 0:
            return
        slots = np.searchsorted(_BOUNDS_US, values_us, side="left")
        self._counts += np.bincount(slots, weights=weights, minlength=len(self._counts)).astype(
            np.int64
        )
        self.sum_us += int((values_us * weights).sum())

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
