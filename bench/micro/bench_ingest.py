"""Admit + conflation throughput on one core (design: 120,000 ticks/s peak, spikes past 190,000/s).

The tick mix: 2,400 instruments over 6 venues; symbol activity skewed (Zipf s=0.8 over symbols);
every update delivered twice, by handler A and by handler B drifting 6-9 ms behind (design:
redundancy), and 1% of A's copies held back 0-2 ms so they arrive out of order. Delivered as the
handlers deliver them (issue 35): every 1 ms pump, one columnar tick batch per (handler, venue)
with what it has due (``wire/batch.py``, ~20 ticks each at this rate); a frame is taken at every
40 ms boundary of the simulated clock.

Counted: input ticks (both copies) per second of wall time through ``Sequencer.on_batch`` (the
batch path: the admit rule over a batch's columns, the latest state updated in bulk) plus
``take_frame``. Target >= 400,000 ticks/s (twice the spike figure, both copies included, so the
lane keeps up with headroom for encoding on the same core). Median of 5 runs; the peer row runs
the very same ticks, in the same order and the same bus batches, through the per-tick reference
model (``monotape.testing.per_tick.PerTickSequencer.on_ticks``: the sequencer's hot loop before
ticks travelled as columns) in the same process, so a noisy machine shows in both rows. Both
must count the same admitted, duplicate and regressed ticks (checked).

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
from typing import Any, NamedTuple

from bench.common import Row, print_rows, row
from monotape.platform.core.conflation import next_boundary
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.model import Tick
from monotape.platform.wire.batch import TickBatch, batch_from_ticks
from monotape.testing.per_tick import PerTickSequencer

__all__ = ["make_stream", "run"]

SYMBOLS = 2_400
VENUES = ("XNAS", "XNYS", "XLON", "XPAR", "XETR", "XTKS")
RATE = 120_000  # updates/s of the simulated feed (design peak); each delivered twice
PUMP_NS = 1_000_000  # handlers' delay lines drained every 1 ms (feeds/handler.py PUMP_INTERVAL_S)
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
    """The bus batches of ``stream``: per 1 ms pump, one per (handler, venue) with the ticks it
    has due, in arrival order; ``(pump time, ticks)``, in delivery order."""
    out: list[tuple[int, list[Tick]]] = []
    i, n = 0, len(stream)
    while i < n:
        now = (stream[i][0] // PUMP_NS + 1) * PUMP_NS
        due: dict[tuple[str, str], list[Tick]] = {}
        while i < n and stream[i][0] < now:
            t = stream[i][1]
            due.setdefault((t.handler, t.venue), []).append(t)
            i += 1
        out += [(now, ticks) for _, ticks in sorted(due.items())]
    return out


def _columns(batches: list[tuple[int, list[Tick]]]) -> list[tuple[int, TickBatch]]:
    """Each bus batch as the tick batch a handler publishes (built before the clock starts, as
    the handler builds it in its own process)."""
    out: list[tuple[int, TickBatch]] = []
    for k, (now, ticks) in enumerate(batches):
        (batch,) = batch_from_ticks(ticks, batch_seq=k)
        out.append((now, batch))
    return out


class _Run(NamedTuple):
    frames: int
    admitted: int
    duplicates: int
    regressions: int


def _batch_path(batches: list[tuple[int, TickBatch]]) -> _Run:
    seq = Sequencer(lanes=4)
    on_batch = seq.on_batch
    boundary = next_boundary(batches[0][0])
    frames = 0
    for now, batch in batches:
        if now >= boundary:
            seq.take_frame(boundary)
            frames += 1
            boundary = next_boundary(now)
        on_batch(batch, now)
    return _Run(frames, seq.admitted_total, seq.duplicates_total, seq.regressions_total)


def _per_tick(batches: list[tuple[int, list[Tick]]]) -> _Run:
    seq = PerTickSequencer(lanes=4)
    on_ticks = seq.on_ticks
    boundary = next_boundary(batches[0][0])
    frames = 0
    for now, ticks in batches:
        if now >= boundary:
            seq.take_frame(boundary)
            frames += 1
            boundary = next_boundary(now)
        on_ticks(ticks, now)
    return _Run(frames, seq.admitted_total, seq.duplicates_total, seq.regressions_total)


def _measure(name: str, fn: Callable[[Any], _Run], batches: Any, ticks: int) -> dict[str, Any]:
    rates = []
    got: _Run | None = None
    for _ in range(RUNS):
        gc.collect()
        t0 = time.perf_counter_ns()
        got = fn(batches)
        rates.append(ticks * 1e9 / (time.perf_counter_ns() - t0))
    assert got is not None
    return {
        "bench": "ingest",
        "case": name,
        "ticks": ticks,
        "run": got,
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
    columns = _columns(batches)
    ticks = len(stream)
    measured = [
        _measure("Sequencer.on_batch (batch path) + take_frame", _batch_path, columns, ticks),
        _measure(
            "PerTickSequencer.on_ticks (per-tick peer) + take_frame", _per_tick, batches, ticks
        ),
    ]
    same, peer_run = measured[0]["run"], measured[1]["run"]
    # the same stream: the batch path and its per-tick model must agree tick for tick
    assert same == peer_run, (same, peer_run)
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
            peer="PerTickSequencer.on_ticks",
            note=(
                f"target >= {TARGET:,} ({'met' if m['ok'] else 'NOT met'}); "
                f"{m['ticks']:,} ticks ({SYMBOLS:,} symbols, 2 handlers, {len(batches):,} bus "
                f"batches of {m['ticks'] / len(batches):.1f} ticks, one per handler and venue "
                f"a 1 ms pump), median of {RUNS} runs; {m['run'].admitted:,} admitted, "
                f"{m['run'].duplicates:,} duplicates, {m['run'].regressions:,} regressions"
            ),
        )
        for m in measured
    ]


if __name__ == "__main__":
    print_rows(run(quick="--quick" in sys.argv[1:]))
