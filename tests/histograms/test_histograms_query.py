"""Merging across time, processes and hosts equals one histogram holding every value."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.histograms import hdr
from monotape.histograms.log import IntervalLogWriter, read_intervals
from monotape.histograms.query import Percentiles, merge, query, summarize, timeline
from monotape.histograms.recorder import Recorders

T0 = 1_764_460_800_000
PCTS = (50.0, 90.0, 99.0, 99.9, 99.99)


def write_process(directory: Path, proc: str, host: str, values: list[np.ndarray], t0: int) -> None:
    """One process: values[k] recorded in the k-th 10 s interval of stage `write`."""
    recs = Recorders(start_ms=t0, stages=("write", "decode"), buffer_capacity=1_000)
    writer = IntervalLogWriter(directory, proc, host)
    now = t0
    for batch in values:
        for v in batch:
            recs["write"].record_ns(int(v))
        recs["decode"].record_ns(1_000)  # another stage in the same file: must be filtered out
        now += 10_000
        intervals = recs.rotate_all(now)
        writer.write(intervals)
        recs.recycle_all(intervals)
    writer.close()


def one_histogram(values: np.ndarray) -> hdr.HdrHistogram:
    h = hdr.new_histogram()
    for v in values.tolist():
        h.record_value(min(max(v // 1000, 0), hdr.HIGHEST_US))
    return h


def expected(values: np.ndarray, *, start: int, end: int, intervals: int) -> Percentiles:
    h = one_histogram(values)
    return Percentiles(
        stage="write",
        window_start_ms=start,
        window_end_ms=end,
        intervals=intervals,
        count=h.get_total_count(),
        min_us=h.get_min_value() if len(values) else 0,
        p50_us=h.get_value_at_percentile(50.0),
        p90_us=h.get_value_at_percentile(90.0),
        p99_us=h.get_value_at_percentile(99.0),
        p999_us=h.get_value_at_percentile(99.9),
        p9999_us=h.get_value_at_percentile(99.99),
        max_us=h.get_max_value(),
    )


def two_processes(tmp_path: Path, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)

    def batches() -> list[np.ndarray]:
        return [
            rng.lognormal(11, 1.8, int(rng.integers(200, 2_000))).astype(np.int64) + 5_000
            for _ in range(8)
        ]

    a, b = batches(), batches()
    # the two processes rotate out of phase (3.5 s apart) and live on different hosts
    write_process(tmp_path, "writer-1", "h1", a, T0)
    write_process(tmp_path, "writer-2", "h2", b, T0 + 3_500)
    return a, b


def test_merge_across_two_process_files_equals_one_histogram(tmp_path: Path) -> None:
    a, b = two_processes(tmp_path, seed=11)
    got = query(tmp_path, "write", T0, T0 + 100_000)
    assert got == expected(np.concatenate(a + b), start=T0, end=T0 + 100_000, intervals=16)
    assert got.min_us > 0  # hdrh's add() would have made it 0


def test_window_spanning_a_rotation_boundary(tmp_path: Path) -> None:
    a, b = two_processes(tmp_path, seed=12)
    # [T0+15 s, T0+35 s): process 1 intervals starting at 20 s and 30 s, process 2 at 23.5 s and
    # 33.5 s; process 1's interval starting at 10 s straddles the window start and is excluded.
    start, end = T0 + 15_000, T0 + 35_000
    got = query(tmp_path, "write", start, end)
    inside = [a[2], a[3], b[2], b[3]]
    assert got == expected(np.concatenate(inside), start=start, end=end, intervals=4)
    # half-open: an interval starting exactly at `end` is not in the window, one at `start` is
    assert query(tmp_path, "write", T0 + 20_000, T0 + 30_000).intervals == 1 + 1
    assert query(tmp_path, "write", T0 + 20_000, T0 + 20_001).intervals == 1


def test_consecutive_windows_partition_the_values(tmp_path: Path) -> None:
    a, b = two_processes(tmp_path, seed=13)
    counts = [
        query(tmp_path, "write", T0 + k, T0 + k + 25_000).count for k in range(0, 100_000, 25_000)
    ]
    assert sum(counts) == sum(len(x) for x in a + b)


def test_timeline_slots_merge_processes(tmp_path: Path) -> None:
    a, b = two_processes(tmp_path, seed=14)
    rows = timeline(tmp_path, "write", T0, T0 + 100_000)
    assert [r.window_start_ms for r in rows] == [T0 + 10_000 * k for k in range(8)]
    assert [r.intervals for r in rows] == [2] * 8
    for k, r in enumerate(rows):
        both = np.concatenate([a[k], b[k]])
        assert r == expected(both, start=T0 + 10_000 * k, end=T0 + 10_000 * (k + 1), intervals=2)


def test_empty_window() -> None:
    empty = summarize(hdr.new_histogram(), stage="glass")
    assert empty.count == 0 and empty.min_us == 0 and empty.max_us == 0 and empty.p99_us == 0


def test_percentiles_json_and_seconds() -> None:
    p = summarize(one_histogram(np.array([1_000_000] * 10)), stage="write")
    assert msgspec.json.decode(msgspec.json.encode(p))["p99_us"] == p.p99_us
    assert p.seconds()["1"] == p.max_us / 1e6


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(min_value=-10, max_value=hdr.HIGHEST_US * 1000 + 10**9), max_size=60),
        min_size=1,
        max_size=10,
    )
)
def test_merge_of_decoded_intervals_is_exact(batches: list[list[int]]) -> None:
    """Any split of the values into intervals, encoded and decoded, merges back exactly."""
    hists = []
    for batch in batches:
        h = hdr.new_histogram()
        us, _ = hdr.clamp_ns_to_us(np.array(batch, dtype=np.int64))
        hdr.record_us(h, us)
        hists.append(hdr.HdrHistogram.decode(h.encode()))
    merged = merge(hists)
    everything = np.array([v for b in batches for v in b], dtype=np.int64)
    ref = one_histogram(everything)
    assert np.array_equal(hdr.counts_view(merged), hdr.counts_view(ref))
    assert summarize(merged, stage="write") == summarize(ref, stage="write")
    assert merged.get_min_value() == ref.get_min_value()
    assert merged.get_max_value() == ref.get_max_value()


def test_read_intervals_on_explicit_paths(tmp_path: Path) -> None:
    two_processes(tmp_path, seed=15)
    files = sorted(tmp_path.glob("*.hlog"))
    assert len(files) == 2
    assert {i.proc for i in read_intervals(files, stage="write")} == {"writer-1", "writer-2"}
