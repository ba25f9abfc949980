"""Recording in runs and large flushes: the same histogram and buckets as value by value.

``StageRecorder.add_counts_ns`` takes a value with its count (a batch of ticks sharing one
stamp); a large flush folds its dense per-index counts into the Prometheus buckets through a
lookup table. Both must be indistinguishable from recording each value once.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.histograms import STAGE_DURATION_BUCKETS_S, DurationBuckets, StageRecorder, hdr

BOUNDS_US = [round(b * 1e6) for b in STAGE_DURATION_BUCKETS_S]
# values on, beside and between the bounds, and anywhere up to past 60 s (clamped)
_near_bounds = st.sampled_from([b + d for b in BOUNDS_US for d in (-5, -1, 0, 1, 2, 7)])
_value_us = st.one_of(_near_bounds, st.integers(0, 70_000_000), st.integers(0, 3_000))


def _same(a: StageRecorder, b: StageRecorder) -> None:
    ha, hb = a.rotate(1).histogram, b.rotate(1).histogram
    assert np.array_equal(hdr.counts_view(ha), hdr.counts_view(hb))
    assert (ha.total_count, ha.min_value, ha.max_value) == (
        hb.total_count,
        hb.min_value,
        hb.max_value,
    )
    assert a.buckets.cumulative() == b.buckets.cumulative()
    assert a.buckets.sum_us == b.buckets.sum_us
    assert (a.clamped, a.recorded) == (b.clamped, b.recorded)


@settings(max_examples=60, deadline=None)
@given(st.lists(_value_us, min_size=1, max_size=400), st.integers(1, 40))
def test_a_large_flush_fills_the_buckets_as_value_by_value(values_us: list[int], k: int) -> None:
    values = np.array(values_us * k, dtype=np.int64)  # k copies: past the dense path's 2,048
    rng = np.random.default_rng(len(values))
    values = rng.permutation(values)
    dense = StageRecorder("write", start_ms=0)
    dense.add_ns(values * 1000 + 999)
    one_by_one = DurationBuckets()
    one_by_one.add_us(np.minimum(values, hdr.HIGHEST_US))
    dense.flush()
    assert dense.buckets.cumulative() == one_by_one.cumulative()
    assert dense.buckets.sum_us == one_by_one.sum_us
    expected = {repr(b): sum(1 for v in values.tolist() if min(v, hdr.HIGHEST_US) <= u)
                for b, u in zip(STAGE_DURATION_BUCKETS_S, BOUNDS_US, strict=True)}  # fmt: skip
    got = dict(dense.buckets.cumulative())
    assert all(got[le] == n for le, n in expected.items())


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-2_000_000, 70_000_000_000), st.integers(0, 50)),
        min_size=0,
        max_size=40,
    )
)
def test_a_value_with_its_count_equals_that_many_values(runs: list[tuple[int, int]]) -> None:
    in_runs = StageRecorder("sequence", start_ms=0)
    flat = StageRecorder("sequence", start_ms=0)
    values = np.array([v for v, _ in runs], dtype=np.int64)
    counts = np.array([n for _, n in runs], dtype=np.int64)
    in_runs.add_counts_ns(values, counts)
    flat.record_many_ns(np.repeat(values, counts))
    _same(in_runs, flat)


def test_counts_index_is_hdrhs_own() -> None:
    h = hdr.new_histogram()
    values = np.array(
        [0, 1, 2047, 2048, 2049, 4095, 4096, 1_000_000, 59_999_999, hdr.HIGHEST_US], dtype=np.int64
    )
    got = hdr.counts_index(h, values).tolist()
    assert got == [h._counts_index_for(int(v)) for v in values]
    lowest, highest = hdr.index_bounds(h)
    for i in got:
        v = h.get_value_from_index(i)
        assert lowest[i] == h.get_lowest_equivalent_value(v)
        assert highest[i] == h.get_highest_equivalent_value(v)
