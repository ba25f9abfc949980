"""The one histogram shape every stage uses, and the vectorized operations on it.

Units: a histogram holds **microseconds** (integers), 1 µs .. 60 s at 3 significant digits
(design, Observability). Recorders take nanoseconds and floor-divide by 1,000. A value below
1 µs lands in the 0 µs bucket; a negative value is clamped to 0 and a value above 60 s is clamped
to 60 s (``HIGHEST_US``), so every tick is counted (a silent drop would make ``count`` lie) and
the recorder counts how many it clamped.

``hdrh``'s ``record_value()`` is pure Python, ~1 µs per value (measured). ``record_us``
computes the same counts index as ``HdrHistogram._counts_index_for`` with numpy, adds into a numpy
view of the ctypes counts array and updates ``total_count``, ``min_value`` and ``max_value`` the
way ``record_value`` does, so a batch is indistinguishable from per-value recording (tested).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped, unused-ignore]

__all__ = [
    "HIGHEST_US",
    "LOWEST_US",
    "PERCENTILES",
    "SIGNIFICANT_DIGITS",
    "HdrHistogram",
    "clamp_ns_to_us",
    "counts_index",
    "counts_view",
    "index_bounds",
    "new_histogram",
    "percentile_values",
    "record_counts_us",
    "record_us",
    "reset",
]

LOWEST_US = 1
HIGHEST_US = 60_000_000  # 60 s
SIGNIFICANT_DIGITS = 3
# The report's percentiles, in the order Percentiles lists them.
PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9, 99.99)

# Above this many values per batch a dense np.bincount over the whole counts array beats
# np.add.at (measured in bench/micro/bench_histograms.py); below it np.add.at touches fewer cells.
_BINCOUNT_MIN = 2_048

IntArray = npt.NDArray[np.int64]


def new_histogram() -> Any:
    """A fresh 1 µs..60 s, 3-digit histogram (~144 KB of counts)."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def counts_view(hist: Any) -> npt.NDArray[np.uint64]:
    """A numpy view (no copy) of the histogram's ctypes counts array."""
    view: npt.NDArray[np.uint64] = np.ctypeslib.as_array(hist.counts)
    return view


def clamp_ns_to_us(values_ns: npt.ArrayLike) -> tuple[IntArray, int]:
    """Nanoseconds to whole microseconds clamped to [0, HIGHEST_US]; also how many were clamped."""
    us = np.asarray(values_ns, dtype=np.int64) // 1000
    # one comparison: a negative value reads as a huge unsigned one
    clamped = int(np.count_nonzero(us.view(np.uint64) > HIGHEST_US))
    if clamped:
        us = np.clip(us, 0, HIGHEST_US)
    return us, clamped


def counts_index(hist: Any, values_us: IntArray) -> IntArray:
    """Vectorized ``HdrHistogram._counts_index_for`` for non-negative int64 values.

    bucket = bit_length(v | sub_bucket_mask) - unit_magnitude - (half_count_magnitude + 1);
    sub_bucket = v >> (bucket + unit_magnitude);
    index = ((bucket + 1) << half_count_magnitude) + sub_bucket - sub_bucket_half_count.
    The bit length is the float64 exponent (biased by 1,023, bits 52-62) plus one: exact, as
    values are < 2**53. Read straight from the float's bits, in place (no ``frexp`` mantissa
    array): about half the cost, and a flush is mostly this.
    """
    masked = values_us | hist.sub_bucket_mask
    bucket: IntArray = masked.astype(np.float64).view(np.int64)
    bucket >>= 52
    bucket -= 1022 + hist.unit_magnitude + hist.sub_bucket_half_count_magnitude + 1
    sub_bucket = values_us >> (bucket + hist.unit_magnitude)
    bucket += 1
    bucket <<= hist.sub_bucket_half_count_magnitude
    bucket += sub_bucket
    bucket -= hist.sub_bucket_half_count
    return bucket


def record_us(hist: Any, values_us: IntArray, index: IntArray | None = None) -> IntArray | None:
    """Record already clamped microsecond values, exactly as ``record_value`` would one by one.

    ``index``: the values' ``counts_index`` if the caller has it. Returns the counts added per
    index (the dense ``np.bincount``) when the batch was large enough to take that path, else
    None: ``buckets.DurationBuckets.add_dense`` derives the Prometheus buckets from it without
    another search over the values."""
    n = int(values_us.shape[0])
    if n == 0:
        return None
    if index is None:
        index = counts_index(hist, values_us)
    view = counts_view(hist)
    dense: IntArray | None = None
    if n >= _BINCOUNT_MIN:
        dense = np.bincount(index, minlength=hist.counts_len)
        view += dense.view(np.uint64)  # counts: never negative, so the same bits
    else:
        np.add.at(view, index, np.uint64(1))
    hist.total_count += n
    hist.min_value = min(hist.min_value, int(values_us.min()))
    hist.max_value = max(hist.max_value, int(values_us.max()))
    return dense


def record_counts_us(hist: Any, values_us: IntArray, counts: IntArray) -> None:
    """Record ``counts[i]`` copies of each clamped microsecond value ``values_us[i]``: the same
    counts, total, min and max as that many ``record_value`` calls (a batch of ticks that share
    one stamp is one value with its count)."""
    keep = counts > 0
    if not keep.all():
        values_us, counts = values_us[keep], counts[keep]
    if values_us.shape[0] == 0:
        return
    np.add.at(counts_view(hist), counts_index(hist, values_us), counts.astype(np.uint64))
    hist.total_count += int(counts.sum())
    hist.min_value = min(hist.min_value, int(values_us.min()))
    hist.max_value = max(hist.max_value, int(values_us.max()))


def index_bounds(hist: Any) -> tuple[IntArray, IntArray]:
    """The lowest and highest value (µs) each counts index holds, for every index."""
    index = np.arange(hist.counts_len, dtype=np.int64)
    half = hist.sub_bucket_half_count
    bucket = (index >> hist.sub_bucket_half_count_magnitude) - 1
    sub = (index & (half - 1)) + half
    first = bucket < 0  # the first bucket's lower half sits below sub_bucket_half_count
    sub[first] -= half
    bucket[first] = 0
    shift = bucket + hist.unit_magnitude
    lowest = sub << shift
    return lowest, lowest + (np.int64(1) << shift) - 1


def reset(hist: Any) -> None:
    """``HdrHistogram.reset()`` without its Python loop over 17,408 counters (a memset)."""
    counts_view(hist)[:] = 0
    hist.total_count = 0
    hist.min_value = sys.maxsize
    hist.max_value = 0
    hist.start_time_stamp_msec = 0
    hist.end_time_stamp_msec = 0


def percentile_values(hist: Any, percentiles: Iterable[float]) -> list[int]:
    """``get_value_at_percentile`` for each percentile, from one cumulative sum (exactly equal).

    hdrh walks the counts array in Python (~0.35 ms per percentile, measured); this reuses its
    target-count arithmetic and its equivalent-value rounding, with a searchsorted for the walk.
    """
    total = int(hist.total_count)
    cumulative = np.cumsum(counts_view(hist), dtype=np.uint64)
    out: list[int] = []
    for percentile in percentiles:
        if total == 0:
            out.append(0)
            continue
        target = hist.get_target_count_at_percentile(percentile)
        index = int(np.searchsorted(cumulative, np.uint64(target), side="left"))
        if index >= hist.counts_len:  # counts sum short of total_count: hdrh returns 0
            out.append(0)
            continue
        value = hist.get_value_from_index(index)
        if percentile:
            out.append(int(hist.get_highest_equivalent_value(value)))
        else:
            out.append(int(hist.get_lowest_equivalent_value(value)))
    return out
