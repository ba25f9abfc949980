"""The load report's arithmetic (loadgen/merge.py): workers' results in, one report out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monotape import metric_names as m
from monotape.loadgen.merge import Lag, merge_results, sum_progress
from monotape.loadgen.trace import Trace
from monotape.loadgen.worker_job import WorkerResult

# 10 s: a wave of 40 connects at second 2 over a trickle of 1 a second.
TRACE = Trace(name="t", connects=[1, 1, 40, 1, 1, 1, 1, 1, 1, 1], disconnects=[0] * 10)


def _result(
    wid: int, *, seconds: int = 5, last_gap: int = 3, errors: int = 0, cancelled: int = 0
) -> WorkerResult:
    return WorkerResult(
        wid=wid,
        connect_ms=[1.0, 2.0],
        first_frame_ms=[5.0],
        attempts=10,
        rejected=2,
        retries=2,
        waves=[8, 2, 0],
        connect_failures=0,
        graceful=1,
        abrupt=1,
        closed_at_end=6,
        lost=0,
        abandoned=0,
        errors=errors,
        error_samples=[f"worker {wid} sample"] if errors else [],
        connected_sessions=8,
        first_frame_sessions=7,
        peak=8,
        last_gap=last_gap,
        due_at_end=6,
        up_at_end=6,
        # per second: attempts, rejected, opened, first_frames, connected
        seconds=[[2, 0, 2, 1, 2 + t] for t in range(seconds)],
        cancelled=cancelled,
    )


def test_two_workers_sum_and_the_node_figures_are_differences() -> None:
    before = {m.AUTH_CACHE_HITS: 10.0, m.AUTH_CACHE_MISSES: 5.0}
    after = {m.AUTH_CACHE_HITS: 40.0, m.AUTH_CACHE_MISSES: 15.0}
    report = merge_results(
        "ws://127.0.0.1:1/", TRACE, 2, [_result(0), _result(1)], [], 9.5, Lag(0.2, 9), before, after
    )
    assert (report.processes, report.attempts, report.rejected_503) == (2, 20, 4)
    assert (report.connected, report.first_frames, report.closed_at_end) == (16, 14, 12)
    assert report.attempt_waves == [16, 4]  # the trailing empty wave is dropped
    assert [s.attempts for s in report.timeline] == [4] * 5
    assert [s.connected for s in report.timeline] == [4, 6, 8, 10, 12]
    assert report.peak_concurrent == 12  # the timeline's peak beats each worker's own
    assert (report.last_wave_s, report.recovered_at_s, report.recovery_s) == (2, 4.0, 2.0)
    assert (report.auth_cache_hits, report.auth_cache_misses) == (30, 10)
    assert report.auth_cache_hit_rate == 0.75
    assert (report.loop_lag_max_s, report.loop_lag_samples) == (0.2, 9)
    assert report.all_connected_at_end and report.errors == 0


def test_a_failed_worker_is_an_error_and_no_recovery_is_claimed() -> None:
    report = merge_results(
        "ws://127.0.0.1:1/",
        TRACE,
        2,
        [_result(0, errors=1)],
        ["worker 1 did not report"],
        9.5,
        Lag(None, 0),
        None,
        None,
    )
    assert report.errors == 2
    assert report.error_samples == ["worker 1 did not report", "worker 0 sample"]
    assert report.recovered_at_s is None and report.recovery_s is None
    assert not report.all_connected_at_end
    assert report.auth_cache_hits is None and report.loop_lag_max_s is None


def test_cancelled_terminals_are_errors_that_say_what_they_were() -> None:
    report = merge_results(
        "ws://127.0.0.1:1/",
        TRACE,
        2,
        [_result(0, errors=1, cancelled=3), _result(1, cancelled=2)],
        [],
        9.5,
        Lag(None, 0),
        None,
        None,
    )
    assert (report.errors, report.cancelled) == (6, 5)
    assert report.error_samples[0] == "worker 0 sample"
    assert "5 terminal(s) still busy" in report.error_samples[-1]
    assert ("lost / abandoned / errors (cancelled)", "0 / 0 / 6 (5)") in report.rows()


def test_no_results_is_an_empty_report_not_a_crash() -> None:
    report = merge_results("ws://127.0.0.1:1/", TRACE, 1, [], [], 0.0, Lag(None, 0), None, None)
    assert report.timeline == [] and report.attempt_waves == [] and report.peak_concurrent == 0


@given(st.lists(st.tuples(*[st.integers(0, 1000)] * 7), max_size=8), st.floats(0, 100))
def test_progress_sums_every_worker_counter(counters: list[tuple[int, ...]], t: float) -> None:
    line = sum_progress(dict(enumerate(counters)), t, None)
    fields = (
        line.connected,
        line.connecting,
        line.backing_off,
        line.rejected,
        line.retries,
        line.first_frames,
        line.errors,
    )
    assert list(fields) == [sum(c[i] for c in counters) for i in range(7)]
    assert line.elapsed_s == round(t, 1) and line.loop_lag_s is None
