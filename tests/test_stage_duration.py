"""monotape_stage_duration_seconds{stage}: the HDR stages' very values as Prometheus buckets,
and the end-to-end tick_to_write stage."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from monotape import metric_names as m
from monotape.histograms import (
    STAGE_DURATION_BUCKETS_S,
    DurationBuckets,
    Recorders,
    StageDurationCollector,
    StageRecorder,
)
from monotape.platform.model import Tick
from monotape.platform.stamps import StageStamps

MS = 1_000_000
OFFSET = 1_700_000_000 * 10**9


def test_the_buckets_sit_around_the_budgets() -> None:
    ms = [round(b * 1000, 3) for b in STAGE_DURATION_BUCKETS_S]
    assert ms == [1, 2, 5, 10, 20, 40, 45, 50, 80, 100, 200, 500, 1000, 5000]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 6_000_000), max_size=300))
def test_cumulative_counts_follow_le_exactly(values_us: list[int]) -> None:
    b = DurationBuckets()
    b.add_us(np.array(values_us, dtype=np.int64))
    got = dict(b.cumulative())
    for bound in STAGE_DURATION_BUCKETS_S:
        expected = sum(1 for v in values_us if v <= round(bound * 1e6))
        assert got[repr(bound)] == expected
    assert got["+Inf"] == len(values_us) == b.count
    assert b.sum_us == sum(values_us)


def test_a_value_on_a_bound_is_counted_in_that_bucket() -> None:
    b = DurationBuckets()
    b.add_us(np.array([40_000, 40_001], dtype=np.int64))
    got = dict(b.cumulative())
    assert got["0.04"] == 1 and got["0.045"] == 2


def test_the_recorder_feeds_both_from_the_same_values_and_never_resets_the_buckets() -> None:
    rec = StageRecorder("write", start_ms=0, buffer_capacity=4)
    for ns in (500_000, 3 * MS, 41 * MS):  # buffered: in neither until a flush
        rec.record_ns(ns)
    assert rec.buckets.count == 0
    first = rec.rotate(10_000)
    assert first.count == rec.buckets.count == 3
    rec.record_many_ns(np.array([90 * MS, 2_000 * MS, -5]))  # -5 ns: clamped to 0, as HDR does
    second = rec.rotate(20_000)
    assert second.count == 3
    assert rec.buckets.count == 6  # cumulative across rotations, as a Prometheus histogram is
    got = dict(rec.buckets.cumulative())
    assert got["0.001"] == 2 and got["0.005"] == 3 and got["0.045"] == 4
    assert got["0.1"] == 5 and got["5.0"] == got["+Inf"] == 6


def test_exported_per_stage_at_scrape_time() -> None:
    recs = Recorders(start_ms=0)
    recs["tick_to_write"].record_many_ns(np.array([30 * MS, 42 * MS, 85 * MS]))
    registry = CollectorRegistry()
    registry.register(StageDurationCollector(lambda: recs))
    bucket = f"{m.STAGE_DURATION}_bucket"
    get = registry.get_sample_value
    assert get(bucket, {"stage": "tick_to_write", "le": "0.04"}) == 1
    assert get(bucket, {"stage": "tick_to_write", "le": "0.08"}) == 2
    assert get(bucket, {"stage": "tick_to_write", "le": "+Inf"}) == 3
    assert get(f"{m.STAGE_DURATION}_count", {"stage": "tick_to_write"}) == 3
    assert abs(get(f"{m.STAGE_DURATION}_sum", {"stage": "tick_to_write"}) - 0.157) < 1e-9
    assert get(f"{m.STAGE_DURATION}_count", {"stage": "decode"}) == 0  # every stage, from start
    text = generate_latest(registry).decode()
    assert f"# TYPE {m.STAGE_DURATION} histogram" in text


def tick(i: int, decoded: int, admitted: int) -> Tick:
    return Tick(i, "XNAS", 1, i, OFFSET + decoded, 100, 101, 100, 1, "A", decoded, admitted)


def test_tick_to_write_is_decoded_to_the_frames_last_direct_write_per_tick() -> None:
    recs = Recorders(start_ms=0)
    stamps = StageStamps(recs)
    ticks = [tick(0, 10 * MS, 11 * MS), tick(1, 30 * MS, 31 * MS)]
    stamps.decoded(ticks)
    stamps.admitted(ticks)
    assert stamps.framed(40 * MS, 42 * MS, OFFSET) == 2
    stamps.written(np.array([1 * MS, 3 * MS, 2 * MS], dtype=np.int64))  # last write at 45 ms
    by = {iv.stage: iv.histogram for iv in stamps.rotate(1_000, OFFSET)}
    h = by["tick_to_write"]
    assert h.get_total_count() == 2  # one value per tick, not per connection
    assert h.get_count_at_value(35_000) == 1  # 45 - 10 ms, in µs
    assert h.get_count_at_value(15_000) == 1  # 45 - 30 ms
    assert by["write"].get_total_count() == 3


def test_a_frame_with_no_direct_write_gives_its_ticks_no_end_to_end_value() -> None:
    recs = Recorders(start_ms=0)
    stamps = StageStamps(recs)
    ticks = [tick(0, 10 * MS, 11 * MS)]
    stamps.decoded(ticks)
    stamps.admitted(ticks)
    stamps.framed(40 * MS, 41 * MS, OFFSET)
    stamps.written(np.array([], dtype=np.int64))  # nobody subscribed, or everyone behind
    stamps.framed(80 * MS, 81 * MS, OFFSET)  # an empty frame: nothing carried over
    stamps.written(np.array([MS], dtype=np.int64))
    by = {iv.stage: iv.count for iv in stamps.rotate(1_000, OFFSET)}
    assert by["tick_to_write"] == 0 and by["conflate"] == 1 and by["write"] == 1
