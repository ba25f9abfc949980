"""The sequencer's priority-interest question per bus batch: ``wanted`` per tick (the old way)
against one ``wanted_among`` per batch (host/interest.py), on a real /dev/shm segment.

A batch is 256 ticks over 4,000 iids (random, seed 1), 2 writers; with no mark anywhere (the
common case) and with 16 marked symbols (writer 0), 8 of them in the batch. Each variant is the
median µs per batch over ``batches`` batches; the script prints the median (with min and max)
of ``runs`` runs (>= 3).

    .venv/bin/python -m bench.micro.bench_interest [--runs 3] [--batches 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from collections.abc import Callable

from bench.common import Row, median_min_max, print_rows, row
from monotape.platform.host.interest import PriorityInterest

__all__ = ["run"]

BATCH = 256
UNIVERSE = 4_000
WRITERS = 2


def _per_batch_us(step: Callable[[list[int]], object], batches: list[list[int]]) -> float:
    times = []
    for iids in batches:
        t0 = time.perf_counter_ns()
        step(iids)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def run(quick: bool = False, *, runs: int = 3, n_batches: int = 2_000) -> list[Row]:
    """``quick``: 3 runs of 300 batches (the smoke)."""
    if quick:
        runs, n_batches = 3, 300
    rng = random.Random(1)
    batches = [[rng.randrange(UNIVERSE) for _ in range(BATCH)] for _ in range(n_batches)]
    seg = PriorityInterest.create(f"monotape-bench-interest-{uuid.uuid4().hex[:12]}", WRITERS)
    reader = PriorityInterest.attach(seg.name)  # the sequencer's own mapping
    rows: list[Row] = []
    try:
        for marks in ("none", "16"):
            if marks == "16":
                for i in range(8):
                    seg.set(0, batches[0][i], True)  # in the batch
                    seg.set(0, UNIVERSE + i, True)  # elsewhere

            def before(iids: list[int], wanted: Callable[[int], bool] = reader.wanted) -> object:
                return {i for i in iids if wanted(i)}

            def after(iids: list[int]) -> object:
                return reader.wanted_among(iids)

            old = [_per_batch_us(before, batches) for _ in range(max(3, runs))]
            new = [_per_batch_us(after, batches) for _ in range(max(3, runs))]
            (old_med, old_lo, old_hi), (med, lo, hi) = median_min_max(old), median_min_max(new)
            peer = f"wanted per tick, marks={marks}"
            rows.append(row("interest", peer, old_med, "us/batch", lo=old_lo, hi=old_hi))
            rows.append(
                row(
                    "interest",
                    f"wanted_among, marks={marks}",
                    med,
                    "us/batch",
                    lo=lo,
                    hi=hi,
                    ratio=med / old_med if old_med else None,
                    peer=peer,
                )
            )
    finally:
        reader.close()
        seg.close()
        seg.unlink()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=2_000)
    args = parser.parse_args()
    print_rows(run(runs=args.runs, n_batches=args.batches))


if __name__ == "__main__":
    main()
