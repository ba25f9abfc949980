"""What the load workers measured, merged into one ``LoadReport``: values in, a report out.

``harness.run_load`` collects the workers' results and the node's /metrics samples, then calls
``merge_results``; ``sum_progress`` makes the once-a-second progress line from their counters.
"""

from __future__ import annotations

from typing import NamedTuple

from monotape.loadgen.report import LoadProgress, LoadReport, Second, summarize
from monotape.loadgen.trace import Trace
from monotape.loadgen.worker_job import WorkerResult
from monotape.metric_names import AUTH_CACHE_HITS, AUTH_CACHE_MISSES

__all__ = ["Lag", "merge_results", "sum_progress"]


class Lag(NamedTuple):
    """The node's event-loop lag as sampled during the run (None: no admin URL, or no sample)."""

    max_s: float | None
    samples: int


def sum_progress(
    latest: dict[int, tuple[int, ...]], elapsed: float, loop_lag_s: float | None
) -> LoadProgress:
    """One progress line: the workers' latest counters summed (``worker.py`` sends seven)."""
    sums = [sum(p[i] for p in latest.values()) for i in range(7)]
    return LoadProgress(
        elapsed_s=round(elapsed, 1),
        connected=sums[0],
        connecting=sums[1],
        backing_off=sums[2],
        rejected=sums[3],
        retries=sums[4],
        first_frames=sums[5],
        errors=sums[6],
        loop_lag_s=loop_lag_s,
    )


def merge_results(
    url: str,
    trace: Trace,
    n: int,
    rs: list[WorkerResult],
    failures: list[str],
    elapsed: float,
    lag: Lag,
    before: dict[str, float] | None,
    after: dict[str, float] | None,
) -> LoadReport:
    """One report from ``n`` workers' results (``url`` already redacted), the run's failures,
    and the node's /metrics figures ``before`` and ``after`` the run (auth cache)."""

    def total(field: str) -> int:
        return sum(int(getattr(r, field)) for r in rs)

    n_seconds = max((len(r.seconds) for r in rs), default=0)
    timeline = []
    for t in range(n_seconds):
        col = [sum(r.seconds[t][i] for r in rs if t < len(r.seconds)) for i in range(5)]
        scheduled = trace.connects[t] if t < trace.duration_s else 0
        timeline.append(Second(t, scheduled, col[0], col[1], col[2], col[3], col[4]))
    while timeline and timeline[-1].attempts == 0 and timeline[-1].t >= trace.duration_s:
        timeline.pop()
    waves = [sum(r.waves[i] for r in rs) for i in range(max((len(r.waves) for r in rs), default=0))]
    while waves and waves[-1] == 0:
        waves.pop()
    last_wave = trace.last_wave_s()
    gap = max((r.last_gap for r in rs), default=-1)
    recovered: float | None = float(max(last_wave, gap + 1))
    if failures or (recovered is not None and recovered >= trace.duration_s):
        recovered = None
    hits = misses = rate = None
    if before is not None and after is not None and AUTH_CACHE_HITS in after:
        hits = int(after[AUTH_CACHE_HITS] - before.get(AUTH_CACHE_HITS, 0.0))
        misses = int(after.get(AUTH_CACHE_MISSES, 0.0) - before.get(AUTH_CACHE_MISSES, 0.0))
        rate = round(hits / (hits + misses), 4) if hits + misses else None
    samples = [e for r in rs for e in r.error_samples][:20]
    cancelled = total("cancelled")
    if cancelled:  # they raised nothing, so no sample says what they were
        samples.append(
            f"{cancelled} terminal(s) still busy (connecting, reading or closing) at the "
            "trace's end plus drain_s: cancelled"
        )
    due, up = total("due_at_end"), total("up_at_end")
    peak = max([s.connected for s in timeline] + [r.peak for r in rs] + [0])
    return LoadReport(
        url=url,
        trace=trace.name,
        processes=n,
        elapsed_s=round(elapsed, 3),
        scheduled=trace.total_connects,
        scheduled_connects_per_s_max=max(trace.connects),
        mean_connects_per_s=round(trace.mean_connects_per_s, 3),
        connected=total("connected_sessions"),
        first_frames=total("first_frame_sessions"),
        connect_ms=summarize([v for r in rs for v in r.connect_ms]),
        first_frame_ms=summarize([v for r in rs for v in r.first_frame_ms]),
        attempts=total("attempts"),
        rejected_503=total("rejected"),
        retries=total("retries"),
        attempt_waves=waves,
        connect_failures=total("connect_failures"),
        disconnects_graceful=total("graceful"),
        disconnects_abrupt=total("abrupt"),
        closed_at_end=total("closed_at_end"),
        lost=total("lost"),
        abandoned=total("abandoned"),
        errors=total("errors") + cancelled + len(failures),
        cancelled=cancelled,
        error_samples=failures + samples,
        peak_concurrent=peak,
        last_wave_s=last_wave,
        recovered_at_s=recovered,
        recovery_s=None if recovered is None else recovered - last_wave,
        all_connected_at_end=not failures and due == up,
        due_at_end=due,
        up_at_end=up,
        loop_lag_max_s=lag.max_s,
        loop_lag_samples=lag.samples,
        auth_cache_hits=hits,
        auth_cache_misses=misses,
        auth_cache_hit_rate=rate,
        timeline=timeline,
    )
