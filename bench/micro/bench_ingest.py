"""Admit + conflation throughput on one core (design: 120,000 ticks/s peak, spikes past 190,000/s).

The tick mix: 2,400 instruments over 6 venues; symbol activity skewed (Zipf s=0.8 over symbols);
every update delivered twice, by handler A and by handler B drifting 6-9 ms behind (design:
redundancy), and 1% of A's copies held back 0-2 ms so they arrive out of order. Delivered in
bus batches of 256 ticks; a frame is taken at every 40 ms boundary of the simulated clock.

Counted: input ticks (both copies) per second of wall time through ``Sequencer.on_ticks`` plus
``take_frame``. Target >= 400,000 ticks/s (twice the spike figure, both copies included, so the
lane keeps up with headroom for encoding on the same core). Median of 5 runs; the peer row runs
the same stream through ``Lane.admit`` per tick (the un-inlined rule) in the same process, so a
noisy machine shows in both rows.

    .venv/bin/python -m bench.micro.bench_ingest [--quick]
"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from bench.common import Row, print_rows, row
from monotape.platform.core.conflation import next_boundary
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.model import Tick

__all__ = ["make_stream", "run"]

SYMBOLS = 2_400
VENUES = ("XNAS", "XNYS", "XLON", "XPAR", "XETR", "XTKS")
RATE = 120_000  # updates/s of the simulated feed (design peak); each delivered twice
BATCH = 256
TARGET = 400_000
RUNS = 5


def make_stream(updates: int, seed: int = 1) -> list[tuple[int, Tick]]:
    """(arrival_ns, tick) in arrival order: two copies of each update, drifted and jittered."""
    rng = random.Random(seed)
    cum = list(accumulate(1.0 / (k**0.8) for k in range(1, SYMBOLS + 1)))
    iids = rng.choices(range(SYMBOLS), cum_weights=cum, k=updates)
    seqs = [0] * SYMBOLS
    per_venue = SYMBOLS // len(VENUES)
    step = 1_000_000_000 // RATE
    out: list[tuple[int, Tick]] = []
    for k, iid in enumerate(iids):
        seqs[iid] += 1
        seq = seqs[iid]
        t0 = 1_000_000_000 + k * step
        venue = VENUES[iid // per_venue % len(VENUES)]
        price = 10_000 + seq % 50
        for handler, at in (
            ("A", t0 + (rng.randrange(2_000_000) if rng.random() < 0.01 else 0)),
            ("B", t0 + rng.randrange(6_000_000, 9_000_000)),
        ):
            tick = Tick(
                iid=iid, venue=venue, epoch=1, seq=seq, venue_ts_ns=t0, bid=price - 1,
                ask=price + 1, last=price, size=100, handler=handler, decoded_ns=at,
            )  # fmt: skip
            out.append((at, tick))
    out.sort(key=lambda p: p[0])
    return out


def _batches(stream: list[tuple[int, Tick]]) -> list[tuple[int, list[Tick]]]:
    return [
        (stream[i + len(stream[i : i + BATCH]) - 1][0], [t for _, t in stream[i : i + BATCH]])
        for i in range(0, len(stream), BATCH)
    ]


def _inlined(batches: list[tuple[int, list[Tick]]]) -> tuple[int, Sequencer]:
    seq = Sequencer(lanes=4)
    on_ticks = seq.on_ticks
    boundary = next_boundary(batches[0][0])
    frames = 0
    for now, ticks in batches:
        if now >= boundary:
            seq.take_frame(boundary)
            frames += 1
            boundary = next_boundary(now)
        on_ticks(ticks, now)
    return frames, seq


def _per_tick(batches: list[tuple[int, list[Tick]]]) -> tuple[int, Sequencer]:
    seq = Sequencer(lanes=4)
    lanes, n = seq.lanes, len(seq.lanes)
    boundary = next_boundary(batches[0][0])
    frames = 0
    for now, ticks in batches:
        if now >= boundary:
            seq.take_frame(boundary)
            frames += 1
            boundary = next_boundary(now)
        for t in ticks:
            lanes[t.iid % n].admit(t, now)
    return frames, seq


def _measure(
    name: str, fn: Callable[[Any], tuple[int, Sequencer]], batches: Any, ticks: int
) -> dict[str, Any]:
    rates = []
    seq: Sequencer | None = None
    for _ in range(RUNS):
        gc.collect()
        t0 = time.perf_counter_ns()
        _frames, seq = fn(batches)
        rates.append(ticks * 1e9 / (time.perf_counter_ns() - t0))
    assert seq is not None
    return {
        "bench": "ingest",
        "case": name,
        "ticks": ticks,
        "admitted": seq.admitted_total,
        "duplicates": seq.duplicates_total,
        "regressions": seq.regressions_total,
        "runs": RUNS,
        "ticks_per_s": statistics.median(rates),
        "min_ticks_per_s": min(rates),
        "max_ticks_per_s": max(rates),
        "target": TARGET,
        "ok": statistics.median(rates) >= TARGET,
    }


def run(quick: bool = False) -> list[Row]:
    updates = 30_000 if quick else 300_000
    stream = make_stream(updates)
    batches = _batches(stream)
    ticks = len(stream)
    measured = [
        _measure("Sequencer.on_ticks (inlined) + take_frame", _inlined, batches, ticks),
        _measure("Lane.admit per tick (peer) + take_frame", _per_tick, batches, ticks),
    ]
    peer = float(measured[1]["ticks_per_s"])
    return [
        row(
            "ingest: admit + conflation",
            str(m["case"]),
            float(m["ticks_per_s"]),
            "ticks/s",
            lo=float(m["min_ticks_per_s"]),
            hi=float(m["max_ticks_per_s"]),
            ratio=float(m["ticks_per_s"]) / peer,
            peer="Lane.admit",
            note=(
                f"target >= {TARGET:,} ({'met' if m['ok'] else 'NOT met'}); "
                f"{m['ticks']:,} ticks ({SYMBOLS:,} symbols, 2 handlers, batches of {BATCH}), "
                f"median of {RUNS} runs; {m['duplicates']:,} duplicates, "
                f"{m['regressions']:,} regressions"
            ),
        )
        for m in measured
    ]


if __name__ == "__main__":
    print_rows(run(quick="--quick" in sys.argv[1:]))
