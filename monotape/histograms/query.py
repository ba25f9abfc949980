"""Merge intervals additively and answer percentile queries over any window.

Merging adds counts arrays (numpy views), sums totals and takes min/max of the recorded extremes,
so the merge of any set of intervals equals one histogram that recorded all their values
(tested to the percentile). ``hdrh``'s own ``HdrHistogram.add`` is not used: it takes
``get_min_value()`` of an empty histogram (0) as a minimum, so every merge would report min 0.

Window rule (see ``log.read_intervals``): an interval belongs to [start_ms, end_ms) if its start
lies in it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from . import hdr
from .log import PathLike, read_intervals
from .recorder import Interval

__all__ = ["Percentiles", "merge", "query", "summarize", "timeline"]

# Prometheus quantile label -> Percentiles field (design metric monotape_stage_latency_seconds).
PROMETHEUS_QUANTILES: dict[str, str] = {
    "0.5": "p50_us",
    "0.99": "p99_us",
    "0.999": "p999_us",
    "1": "max_us",
}


class Percentiles(msgspec.Struct, frozen=True, gc=False):
    """Merged percentiles of one stage over a window. Values are whole microseconds.

    Every value is the histogram's equivalent-value rounding (3 significant digits): min is the
    lowest equivalent value of the smallest recorded value, percentiles and max the highest
    equivalent value, exactly as HdrHistogram reports them. An empty window has count 0 and
    zeros everywhere.
    """

    stage: str
    window_start_ms: int
    window_end_ms: int
    intervals: int
    count: int
    min_us: int
    p50_us: int
    p90_us: int
    p99_us: int
    p999_us: int
    p9999_us: int
    max_us: int

    def seconds(self) -> dict[str, float]:
        """Quantile label -> seconds, for ``monotape_stage_latency_seconds{stage,quantile}``."""
        return {q: getattr(self, f) / 1e6 for q, f in PROMETHEUS_QUANTILES.items()}


def merge(intervals: Iterable[Interval | Any]) -> Any:
    """One histogram holding every value of the given intervals (or bare histograms)."""
    out = hdr.new_histogram()
    view = hdr.counts_view(out)
    for item in intervals:
        other = item.histogram if isinstance(item, Interval) else item
        if other.counts_len != out.counts_len or other.unit_magnitude != out.unit_magnitude:
            raise ValueError("cannot merge a histogram of a different shape")
        if not other.total_count:
            continue
        view += hdr.counts_view(other)
        out.total_count += other.total_count
        out.min_value = min(out.min_value, other.min_value)
        out.max_value = max(out.max_value, other.max_value)
    return out


def summarize(
    hist: Any,
    *,
    stage: str,
    window_start_ms: int = 0,
    window_end_ms: int = 0,
    intervals: int = 0,
) -> Percentiles:
    """The report's figures for one histogram."""
    count = int(hist.total_count)
    p50, p90, p99, p999, p9999 = hdr.percentile_values(hist, hdr.PERCENTILES)
    return Percentiles(
        stage=stage,
        window_start_ms=window_start_ms,
        window_end_ms=window_end_ms,
        intervals=intervals,
        count=count,
        min_us=int(hist.get_min_value()) if count else 0,
        p50_us=p50,
        p90_us=p90,
        p99_us=p99,
        p999_us=p999,
        p9999_us=p9999,
        max_us=int(hist.get_max_value()) if count else 0,
    )


def query(
    paths_or_dir: PathLike | Iterable[PathLike], stage: str, start_ms: int, end_ms: int
) -> Percentiles:
    """Exact merged percentiles of ``stage`` over [start_ms, end_ms), all processes and hosts."""
    intervals = list(read_intervals(paths_or_dir, stage=stage, start_ms=start_ms, end_ms=end_ms))
    return summarize(
        merge(intervals),
        stage=stage,
        window_start_ms=start_ms,
        window_end_ms=end_ms,
        intervals=len(intervals),
    )


def timeline(
    paths_or_dir: PathLike | Iterable[PathLike],
    stage: str,
    start_ms: int,
    end_ms: int,
    *,
    step_ms: int = 10_000,
) -> list[Percentiles]:
    """Percentiles per ``step_ms`` slot (the rotation period), merged across processes.

    An interval goes to the slot its start falls in (``start_ms // step_ms * step_ms``); only
    slots holding at least one interval are listed, in time order.
    """
    if step_ms <= 0:
        raise ValueError("step_ms must be positive")
    slots: dict[int, list[Interval]] = {}
    for interval in read_intervals(paths_or_dir, stage=stage, start_ms=start_ms, end_ms=end_ms):
        slots.setdefault(interval.start_ms // step_ms * step_ms, []).append(interval)
    return [
        summarize(
            merge(group),
            stage=stage,
            window_start_ms=slot,
            window_end_ms=slot + step_ms,
            intervals=len(group),
        )
        for slot, group in sorted(slots.items())
    ]
