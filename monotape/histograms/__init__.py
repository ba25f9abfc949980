"""Stage latency histograms: interval recorders, interval logs, merge and query (issue 3).

Units: recorders take nanoseconds; histograms hold whole microseconds, 1 µs..60 s, 3 significant
digits (values outside are clamped to the bounds and counted). See docs/histograms.md.
"""

from .buckets import STAGE_DURATION_BUCKETS_S, DurationBuckets, StageBuckets
from .hdr import HIGHEST_US, LOWEST_US, SIGNIFICANT_DIGITS, new_histogram
from .log import IntervalLogWriter, read_intervals
from .query import Percentiles, merge, query, summarize, timeline
from .recorder import Interval, Recorders, StageRecorder
from .report import add_report_arguments, run_report
from .stages import ALL_STAGES, EXTRA_STAGES, STAGES

__all__ = [
    "ALL_STAGES",
    "EXTRA_STAGES",
    "HIGHEST_US",
    "LOWEST_US",
    "SIGNIFICANT_DIGITS",
    "STAGES",
    "STAGE_DURATION_BUCKETS_S",
    "DurationBuckets",
    "Interval",
    "IntervalLogWriter",
    "Percentiles",
    "Recorders",
    "StageBuckets",
    "StageRecorder",
    "add_report_arguments",
    "merge",
    "new_histogram",
    "query",
    "read_intervals",
    "run_report",
    "summarize",
    "timeline",
]
