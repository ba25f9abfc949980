"""Batch recording equals per-value recording exactly; rotation never loses a value."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.histograms import hdr
from monotape.histograms.recorder import Recorders, StageRecorder
from monotape.histograms.stages import ALL_STAGES, STAGES

PCTS = (0.0, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0)
HIGH_NS = hdr.HIGHEST_US * 1000

# Edges: 0 and 1 µs, sub-microsecond, the bucket boundaries, 60 s, beyond 60 s, negative.
edge_ns = st.sampled_from(
    [
        0,
        999,
        1_000,
        1_999,
        2_047_000,
        2_048_000,
        4_095_999,
        1_000_000,
        HIGH_NS,
        HIGH_NS + 1_000,
        HIGH_NS * 5,
        -5_000,
        67_108_864_000,
    ]
)
values_ns = st.lists(
    st.one_of(edge_ns, st.integers(min_value=0, max_value=HIGH_NS * 2)), max_size=400
)


def per_value(values: list[int]) -> hdr.HdrHistogram:
    """The reference: hdrh's own record_value, one value at a time, with our clamping."""
    h = hdr.new_histogram()
    for v in values:
        assert h.record_value(min(max(v // 1000, 0), hdr.HIGHEST_US))
    return h


def assert_same(a: hdr.HdrHistogram, b: hdr.HdrHistogram) -> None:
    assert np.array_equal(hdr.counts_view(a), hdr.counts_view(b))
    assert a.total_count == b.total_count
    assert a.min_value == b.min_value
    assert a.max_value == b.max_value
    assert a.get_min_value() == b.get_min_value()
    assert a.get_max_value() == b.get_max_value()
    for p in PCTS:
        assert a.get_value_at_percentile(p) == b.get_value_at_percentile(p)
    # the numpy percentile walk equals hdrh's
    assert hdr.percentile_values(a, PCTS) == [b.get_value_at_percentile(p) for p in PCTS]


@settings(max_examples=60, deadline=None)
@given(values_ns, st.integers(min_value=1, max_value=64))
def test_batch_equals_per_value(values: list[int], capacity: int) -> None:
    ref = per_value(values)
    # 1) the buffer path, flushing itself every `capacity` values
    r = StageRecorder("write", start_ms=0, buffer_capacity=capacity)
    for v in values:
        r.record_ns(v)
    r.flush()
    assert_same(r.rotate(1).histogram, ref)
    # 2) the array path (np.add.at below the bincount threshold)
    r2 = StageRecorder("write", start_ms=0)
    r2.record_many_ns(np.array(values, dtype=np.int64))
    assert_same(r2.rotate(1).histogram, ref)
    expected_clamped = sum(1 for v in values if v < 0 or v // 1000 > hdr.HIGHEST_US)
    assert r.clamped == r2.clamped == expected_clamped


@settings(max_examples=60, deadline=None)
@given(
    st.lists(values_ns.map(lambda v: v[:40]), max_size=12),
    st.integers(min_value=1, max_value=64),
)
def test_add_ns_batches_equal_per_value(batches: list[list[int]], capacity: int) -> None:
    """``add_ns``: batches of any size against any buffer size (smaller, equal, larger) land
    exactly as per-value records, and the caller may reuse its array at once (the server's
    priority buffer does)."""
    flat = [v for b in batches for v in b]
    r = StageRecorder("priority", start_ms=0, buffer_capacity=capacity)
    reused = np.empty(64, dtype=np.int64)
    for batch in batches:
        n = len(batch)
        reused[:n] = batch
        r.add_ns(reused[:n])
        reused[:n] = -1  # overwritten at once: a recorder that kept a view would record -1s
        assert r.pending < capacity  # a full buffer has flushed itself
    assert r.recorded + r.pending == len(flat)
    assert_same(r.rotate(1).histogram, per_value(flat))
    assert r.clamped == sum(1 for v in flat if v < 0 or v // 1000 > hdr.HIGHEST_US)


def test_large_batch_bincount_path_equals_per_value() -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [rng.lognormal(11, 2, 20_000).astype(np.int64), np.array([0, 1_000, HIGH_NS * 3])]
    )
    r = StageRecorder("decode", start_ms=0)
    r.record_many_ns(values)
    assert_same(r.rotate(1).histogram, per_value(values.tolist()))


def test_buffer_flushes_itself_when_full() -> None:
    r = StageRecorder("encode", start_ms=0, buffer_capacity=4)
    for v in (1_000, 2_000, 3_000):
        r.record_ns(v)
    assert r.pending == 3
    r.record_ns(4_000)
    assert r.pending == 0
    assert r.rotate(10).count == 4


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.integers(0, HIGH_NS), max_size=50), min_size=1, max_size=12))
def test_rotation_never_loses_a_value(batches: list[list[int]]) -> None:
    r = StageRecorder("sequence", start_ms=1_000, buffer_capacity=7)
    total = 0
    merged = hdr.new_histogram()
    now = 1_000
    for i, batch in enumerate(batches):
        for v in batch:
            r.record_ns(v)
        now += 10_000
        interval = r.rotate(now)
        assert (interval.start_ms, interval.end_ms) == (now - 10_000, now)
        assert interval.count == len(batch)
        total += interval.count
        hdr.counts_view(merged)[:] += hdr.counts_view(interval.histogram)
        if i % 2:
            r.recycle(interval)  # both paths: recycled spare and reset-at-rotate
    assert total == sum(len(b) for b in batches)
    assert int(hdr.counts_view(merged).sum()) == total


def test_rotate_hands_out_filled_and_swaps_in_a_reset_spare() -> None:
    r = StageRecorder("write", start_ms=0)
    r.record_ns(5_000)
    first = r.rotate(10_000)
    r.recycle(first)  # handed back: spare is reset now, not at the next rotate
    assert first.count == 0  # the spare is reused (fixed memory)
    r.record_ns(6_000)
    second = r.rotate(20_000)
    assert second.histogram is not first.histogram
    assert second.count == 1
    third = r.rotate(30_000)  # second's histogram is reused from here on
    assert third.histogram is first.histogram and third.count == 0
    assert r._active is second.histogram and second.count == 0


def test_recorders_cover_every_stage_and_rotate_together() -> None:
    recs = Recorders(start_ms=0)
    assert recs.stages == ALL_STAGES and recs.stages[:5] == STAGES
    assert ALL_STAGES[5:] == ("glass", "hydrate", "priority", "tick_to_write")
    recs["glass"].record_ns(3_000_000)
    intervals = recs.rotate_all(10_000)
    assert [i.stage for i in intervals] == list(ALL_STAGES)
    assert {i.stage: i.count for i in intervals}["glass"] == 1


def test_unknown_stage_and_bad_capacity() -> None:
    with pytest.raises(ValueError, match="unknown stage"):
        StageRecorder("nope", start_ms=0)
    with pytest.raises(ValueError):
        StageRecorder("write", start_ms=0, buffer_capacity=0)
