"""Stage histograms: amortized recording cost per value, rotation, encode, query, memory.

Issue 3: 190k ticks/s x 5 stages is ~1M values/s; hdrh's ``record_value()`` is ~1 µs per value
(measured), a whole core. The batch path (numpy bucket indexes + bincount into a view of the
counts array) must stay at or below 30 ns per value. Each figure is the median of >= 3 runs, with
the per-value ``record_value`` loop as the peer.

    .venv/bin/python -m bench.micro.bench_histograms [--quick]
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

from bench.common import Row, median_min_max, row
from monotape.histograms import hdr
from monotape.histograms.log import IntervalLogWriter
from monotape.histograms.query import query
from monotape.histograms.recorder import Recorders, StageRecorder

__all__ = ["run"]

BENCH = "stage histograms"
TARGET_NS = 30.0
T0 = 1_764_460_800_000


def _values(n: int, seed: int = 1) -> np.ndarray:
    # ~20 µs median, long tail up to seconds: a latency-shaped spread over many buckets
    return np.random.default_rng(seed).lognormal(10, 1.5, n).astype(np.int64)


def _runs(fn: Callable[[], float], runs: int) -> tuple[float, float, float]:
    return median_min_max([fn() for _ in range(runs)])


def run(quick: bool = False) -> list[Row]:
    runs = 3 if quick else 7
    n = 200_000 if quick else 1_000_000
    n_slow = 20_000 if quick else 100_000
    values = _values(n)
    as_list = values.tolist()
    rows: list[Row] = []

    def per_value() -> float:
        h = hdr.new_histogram()
        rec = h.record_value
        t = time.perf_counter_ns()
        for v in as_list[:n_slow]:
            rec(v // 1000)
        return (time.perf_counter_ns() - t) / n_slow

    def batch_array(chunk: int) -> Callable[[], float]:
        def go() -> float:
            r = StageRecorder("write", start_ms=0)
            t = time.perf_counter_ns()
            for i in range(0, n, chunk):
                r.record_many_ns(values[i : i + chunk])
            return (time.perf_counter_ns() - t) / n

        return go

    def buffered() -> float:
        r = StageRecorder("write", start_ms=0)
        record = r.record_ns
        t = time.perf_counter_ns()
        for v in as_list:
            record(v)
        r.flush()
        return (time.perf_counter_ns() - t) / n

    def empty_call() -> float:
        def noop(v: int) -> None:
            pass

        t = time.perf_counter_ns()
        for v in as_list:
            noop(v)
        return (time.perf_counter_ns() - t) / n

    peer, peer_lo, peer_hi = _runs(per_value, runs)
    rows.append(
        row(
            BENCH,
            "hdrh record_value, per value (peer)",
            peer,
            "ns/value",
            lo=peer_lo,
            hi=peer_hi,
            ratio=1.0,
            note=f"{n_slow:,} values",
        )
    )
    for chunk in (65_536, 4_800, 256):
        med, lo, hi = _runs(batch_array(chunk), runs)
        rows.append(
            row(
                BENCH,
                f"record_many_ns, batches of {chunk:,}",
                med,
                "ns/value",
                lo=lo,
                hi=hi,
                ratio=med / peer,
                peer="record_value",
                note=f"target <= {TARGET_NS:.0f} ns ({'met' if med <= TARGET_NS else 'NOT met'})"
                if chunk == 65_536
                else "4,800 = ticks per 40 ms frame at 120k/s"
                if chunk == 4_800
                else "small batches pay numpy call overhead",
            )
        )
    med, lo, hi = _runs(buffered, runs)
    rows.append(
        row(
            BENCH,
            "record_ns into 64 Ki buffer (+ self-flush)",
            med,
            "ns/value",
            lo=lo,
            hi=hi,
            ratio=med / peer,
            peer="record_value",
            note="a Python call per value; prefer record_many_ns per batch of ticks",
        )
    )
    med, lo, hi = _runs(empty_call, runs)
    rows.append(
        row(
            BENCH,
            "empty Python function call (floor for any per-value API)",
            med,
            "ns/value",
            lo=lo,
            hi=hi,
            ratio=med / peer,
            peer="record_value",
        )
    )

    # rotation: flush + swap of 7 stages (spare recycled), then the log write (encode) of them
    recs = Recorders(start_ms=T0)
    frame_values = values[:4_800]

    def rotate_cost() -> float:
        for r in recs:
            r.record_many_ns(frame_values)
        t = time.perf_counter_ns()
        intervals = recs.rotate_all(T0 + 10_000)
        dt = time.perf_counter_ns() - t
        recs.recycle_all(intervals)
        return dt / 1_000 / len(intervals)

    med, lo, hi = _runs(rotate_cost, runs)
    rows.append(
        row(
            BENCH,
            "rotate (flush + swap), per stage",
            med,
            "µs",
            lo=lo,
            hi=hi,
            note="spare recycled after the write: no reset on the hot path",
        )
    )

    with tempfile.TemporaryDirectory() as tmp:
        writer = IntervalLogWriter(tmp, "bench", "h1")
        recs2 = Recorders(start_ms=T0)
        now = T0
        write_us: list[float] = []
        for _ in range(60 if quick else 360):  # 10 min / 1 h of 10 s intervals
            for r in recs2:
                r.record_many_ns(values[:20_000])
            now += 10_000
            intervals = recs2.rotate_all(now)
            t = time.perf_counter_ns()
            writer.write(intervals)
            write_us.append((time.perf_counter_ns() - t) / 1_000 / len(intervals))
            recs2.recycle_all(intervals)
        writer.close()
        med, lo, hi = median_min_max(write_us)
        rows.append(
            row(
                BENCH,
                "log write (encode + append), per stage interval",
                med,
                "µs",
                lo=lo,
                hi=hi,
                note="20,000 values per interval",
            )
        )

        def query_40s() -> float:
            t = time.perf_counter_ns()
            query(tmp, "write", now - 40_000, now)
            return (time.perf_counter_ns() - t) / 1e6

        med, lo, hi = _runs(query_40s, runs)
        rows.append(
            row(
                BENCH,
                "query 40 s window (read + merge + 5 percentiles)",
                med,
                "ms",
                lo=lo,
                hi=hi,
                note=f"scans {len(write_us) * 7:,} interval lines",
            )
        )

    h = hdr.new_histogram()
    hist_bytes = h.counts_len * 8
    per_stage = 2 * hist_bytes + 65_536 * 8
    rows.append(
        row(
            BENCH,
            "memory per stage recorder",
            per_stage / 1024,
            "KiB",
            note=f"2 histograms x {hist_bytes / 1024:.0f} KiB counts + 64 Ki int64 buffer",
        )
    )
    return rows


if __name__ == "__main__":
    for r in run(quick="--quick" in sys.argv):
        print(f"{r.variant:<52} {r.value:>10.2f} {r.unit:<9} [{r.min:.2f}..{r.max:.2f}] {r.note}")
