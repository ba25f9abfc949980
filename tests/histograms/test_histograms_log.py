"""Interval logs: read back by hdrh's HistogramLogReader, tags, hour files, retention."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from hdrh.log import HistogramLogReader

from monotape.histograms import hdr
from monotape.histograms.log import (
    HOUR_MS,
    IntervalLogWriter,
    decode_tag,
    encode_tag,
    file_hour_ms,
    log_files,
    read_intervals,
)
from monotape.histograms.recorder import Recorders

T0 = 1_764_460_800_000 + 123  # 2025-11-30T00:00:00.123Z: odd milliseconds on purpose


def record_run(
    directory: Path, proc: str, rotations: int, seed: int, *, t0: int = T0
) -> dict[tuple[str, int], np.ndarray]:
    """Record random values for `rotations` 10 s intervals; return the values per (stage, start)."""
    rng = np.random.default_rng(seed)
    recs = Recorders(start_ms=t0, stages=("decode", "write"), buffer_capacity=512)
    writer = IntervalLogWriter(directory, proc, "h1")
    recorded: dict[tuple[str, int], np.ndarray] = {}
    now = t0
    for _ in range(rotations):
        for rec in recs:
            values = rng.lognormal(10, 1.5, int(rng.integers(0, 3_000))).astype(np.int64)
            for v in values[: len(values) // 2]:
                rec.record_ns(int(v))
            rec.record_many_ns(values[len(values) // 2 :])
            recorded[(rec.stage, now)] = values
        now += 10_000
        intervals = recs.rotate_all(now)
        writer.write(intervals)
        recs.recycle_all(intervals)
    writer.close()
    return recorded


def test_hdrh_reader_reads_our_files_with_identical_counts(tmp_path: Path) -> None:
    recorded = record_run(tmp_path, "writer-1", 6, seed=1)
    [path] = log_files(tmp_path)
    text = path.read_text()
    assert "#[StartTime: 1764460800.123 (seconds since epoch), 2025-11-30 00:00:00.123 UTC]" in text
    assert "Tag=stage=write;proc=writer-1;host=h1,1764460800.123,10.000," in text
    reader = HistogramLogReader(str(path), hdr.new_histogram())
    seen = 0
    while (h := reader.get_next_interval_histogram()) is not None:
        tag = decode_tag(h.get_tag())
        start_ms = round(h.get_start_time_stamp())
        assert round(h.get_end_time_stamp()) - start_ms == 10_000
        expected = hdr.new_histogram()
        us, _ = hdr.clamp_ns_to_us(recorded[(tag["stage"], start_ms)])
        hdr.record_us(expected, us)
        assert np.array_equal(hdr.counts_view(h), hdr.counts_view(expected))
        assert h.get_total_count() == expected.get_total_count()
        assert h.get_max_value() == expected.get_max_value()
        seen += 1
    reader.close()
    assert seen == len(recorded) == 12


def test_our_reader_returns_tags_and_exact_times(tmp_path: Path) -> None:
    recorded = record_run(tmp_path, "writer-1", 3, seed=2)
    got = list(read_intervals(tmp_path))
    assert [(i.stage, i.start_ms) for i in got] == list(recorded)
    assert all(i.proc == "writer-1" and i.host == "h1" for i in got)
    assert all(i.end_ms - i.start_ms == 10_000 for i in got)
    assert [i.count for i in got] == [len(v) for v in recorded.values()]
    only = list(read_intervals(tmp_path, stage="write", start_ms=T0 + 10_000, end_ms=T0 + 20_000))
    assert [(i.stage, i.start_ms) for i in only] == [("write", T0 + 10_000)]


def test_tags_never_hold_commas_or_spaces(tmp_path: Path) -> None:
    tag = encode_tag("write", "proc, with spaces;=%", "host 1")
    assert "," not in tag and " " not in tag
    assert decode_tag(tag) == {"stage": "write", "proc": "proc, with spaces;=%", "host": "host 1"}
    recs = Recorders(start_ms=T0, stages=("glass",))
    recs["glass"].record_ns(2_000)
    writer = IntervalLogWriter(tmp_path, "proc, with spaces;=%", "host 1")
    writer.write(recs.rotate_all(T0 + 10_000))
    writer.close()
    [interval] = read_intervals(tmp_path)
    assert (interval.proc, interval.host, interval.count) == ("proc, with spaces;=%", "host 1", 1)
    [path] = log_files(tmp_path)
    h = HistogramLogReader(str(path), hdr.new_histogram()).get_next_interval_histogram()
    assert h.get_total_count() == 1


def test_one_file_per_hour_and_window_skips_files(tmp_path: Path) -> None:
    hour = 1_764_460_800_000
    record_run(tmp_path, "p", 4, seed=3, t0=hour + HOUR_MS - 20_000)  # crosses the hour
    files = log_files(tmp_path)
    assert [file_hour_ms(f) for f in files] == [hour, hour + HOUR_MS]
    assert log_files(tmp_path, start_ms=hour + HOUR_MS) == files[1:]
    assert log_files(tmp_path, end_ms=hour + HOUR_MS) == files[:1]
    assert len(list(read_intervals(tmp_path, stage="decode"))) == 4


def test_truncated_line_is_skipped_and_reported(tmp_path: Path) -> None:
    record_run(tmp_path, "p", 2, seed=4)
    [path] = log_files(tmp_path)
    with path.open("a") as f:
        f.write("Tag=stage=write;proc=p;host=h1,1764460820.123,10.000,1.0,HISTFAAAAB")  # crash
    errors: list[str] = []
    assert len(list(read_intervals(tmp_path, errors=errors))) == 4
    assert len(errors) == 1 and ":" in errors[0]


def _touch(directory: Path, hour_ms: int, size: int, proc: str = "p") -> Path:
    from monotape.histograms.log import log_path

    path = log_path(directory, proc, "h", hour_ms)
    path.write_bytes(b"#" * size)
    return path


def test_retention_by_age(tmp_path: Path) -> None:
    now_hour = 1_764_460_800_000
    old = [_touch(tmp_path, now_hour - k * HOUR_MS, 10) for k in (5, 4, 3, 2)]
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not ours")
    writer = IntervalLogWriter(tmp_path, "p", "h", max_age_s=2 * 3600, max_bytes=10**9)
    deleted = writer.apply_retention(now_hour + 1)
    # a file's age runs from the end of its hour: hours -5, -4 and -3 ended > 2 h ago
    assert sorted(deleted) == sorted(old[:3])
    assert [p.exists() for p in old] == [False, False, False, True]
    assert foreign.exists()


def test_retention_by_size_deletes_oldest_and_spares_the_current_hour(tmp_path: Path) -> None:
    now_hour = 1_764_460_800_000
    files = [_touch(tmp_path, now_hour - k * HOUR_MS, 100) for k in (3, 2, 1)]
    current = _touch(tmp_path, now_hour, 1_000, proc="other")  # another process, this hour
    writer = IntervalLogWriter(tmp_path, "p", "h", max_bytes=250)
    deleted = writer.apply_retention(now_hour + 1)
    assert deleted == files  # oldest first; 1,000 bytes remain but the current hour is spared
    assert current.exists()
    writer2 = IntervalLogWriter(tmp_path, "p", "h", max_bytes=1_000)
    assert writer2.apply_retention(now_hour + 1) == []


def test_writer_applies_retention_and_survives_its_file_being_deleted(tmp_path: Path) -> None:
    old = _touch(tmp_path, T0 - 48 * HOUR_MS, 10)
    recs = Recorders(start_ms=T0, stages=("write",))
    writer = IntervalLogWriter(tmp_path, "p", "h1", max_age_s=86_400)
    recs["write"].record_ns(1_000)
    writer.write(recs.rotate_all(T0 + 10_000))
    assert not old.exists()
    assert writer.path is not None
    os.unlink(writer.path)  # someone else's retention, say
    recs["write"].record_ns(2_000)
    writer.write(recs.rotate_all(T0 + 20_000))
    writer.close()
    assert [i.count for i in read_intervals(tmp_path)] == [1]
