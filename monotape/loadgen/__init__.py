"""Storm load: arrival traces, the multi-process replay harness and its report (docs/load.md)."""

from monotape.loadgen.harness import LoadConfig, LoadRefused, check_target, run_load
from monotape.loadgen.report import (
    LoadProgress,
    LoadReport,
    Percentiles,
    Second,
    compare,
    percentile,
    print_progress,
    summarize,
)
from monotape.loadgen.trace import (
    DEFAULT_CARDINALITY,
    SessionPlan,
    SizeWeight,
    Trace,
    TraceError,
    dump_trace,
    load_trace,
    parse_trace,
    plan_sessions,
    poisson_like,
    storm_trace,
)

__all__ = [
    "DEFAULT_CARDINALITY",
    "LoadConfig",
    "LoadProgress",
    "LoadRefused",
    "LoadReport",
    "Percentiles",
    "Second",
    "SessionPlan",
    "SizeWeight",
    "Trace",
    "TraceError",
    "check_target",
    "compare",
    "dump_trace",
    "load_trace",
    "parse_trace",
    "percentile",
    "plan_sessions",
    "poisson_like",
    "print_progress",
    "run_load",
    "storm_trace",
    "summarize",
]
