"""CPython GC on monotape's terms: what the GcMonitor callback costs, what a full collection of a
large heap costs unfrozen vs frozen, and how often each generation runs under steady allocation
with and without ``gc.freeze()`` (MEASURED: the CPython GC trap).

- ``callback pair``: the monitor's "start"+"stop" pair called directly, µs per collection;
  peer: an empty callback pair (the floor of any ``gc.callbacks`` entry).
- ``full collection``: a heap of ``HEAP`` tracked objects (lists; ~1.5M, as in MEASURED) aged
  into gen 2, then ``gc.collect()`` timed by the monitor itself; ``frozen`` runs after
  ``gc.freeze()``. Median of ``runs`` with min and max; ratio = frozen / unfrozen.
- ``steady ticks``: the same heap, then a tick loop (``steady_loop``: a ``[price, size]`` list
  per tick into a bounded 50k ring, so recent state survives a few collections, and one
  reference cycle per 20 ticks, as futures and caught exceptions make) for a fixed time;
  collections per minute of each generation, pause maxima and GC time per minute, unfrozen vs
  frozen vs frozen with a 10x gen-0 threshold. Per-minute figures scale with this machine's
  loop speed; the note also gives gen-2 runs per 1M ticks.

    .venv/bin/python -m bench.micro.bench_gc [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from bench.common import Row, median_min_max, row
from monotape.histograms.gc import GcMonitor

__all__ = ["run"]

HEAP = 1_500_000
RING = 50_000
CYCLE_EVERY = 20  # one reference cycle per 20 ticks


@contextmanager
def gc_state() -> Iterator[None]:
    """Leave the interpreter's GC as it was found: thresholds, freeze, enabled."""
    threshold = gc.get_threshold()
    enabled = gc.isenabled()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        if enabled:
            gc.enable()
        gc.collect()


def build_heap(n: int) -> list[list[int]]:
    heap = [[i] for i in range(n)]
    gc.collect()  # age it: everything now sits in gen 2
    return heap


def bench_callback(pairs: int) -> list[Row]:
    mon = GcMonitor(capacity=1_000)
    cb = mon.callback
    info = {"generation": 0, "collected": 0, "uncollectable": 0}

    def noop(phase: str, info: dict[str, int]) -> None:
        pass

    def time_pairs(fn: Callable[[str, dict[str, int]], None]) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(pairs):
            fn("start", info)
            fn("stop", info)
        return (time.perf_counter_ns() - t0) / pairs / 1e3

    runs = 5
    mons = [time_pairs(cb) for _ in range(runs)]
    peers = [time_pairs(noop) for _ in range(runs)]
    med, lo, hi = median_min_max(mons)
    pmed, plo, phi = median_min_max(peers)
    return [
        row(
            "gc: callback pair",
            "GcMonitor",
            med,
            "µs/collection",
            lo=lo,
            hi=hi,
            ratio=med / pmed,
            peer="empty callback",
            note=f"start+stop called directly, {pairs:,} pairs x {runs} runs; MEASURED ~0.3 µs",
        ),
        row(
            "gc: callback pair",
            "empty callback",
            pmed,
            "µs/collection",
            lo=plo,
            hi=phi,
            ratio=1.0,
            note="the floor of any gc.callbacks entry",
        ),
    ]


def full_collection_ms(mon: GcMonitor, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        gc.collect()
        last = [p for p in mon.pauses() if p.generation == 2][-1]
        out.append(last.duration_ns / 1e6)
    return out


def bench_full_collection(heap_size: int, runs: int) -> list[Row]:
    rows: list[Row] = []
    with gc_state(), GcMonitor() as mon:
        heap = build_heap(heap_size)
        tracked = len(gc.get_objects())
        unfrozen = median_min_max(full_collection_ms(mon, runs))
        frozen_count = mon.freeze_after_warmup()
        frozen = median_min_max(full_collection_ms(mon, runs))
        del heap
    for variant, (med, lo, hi), note in (
        ("unfrozen", unfrozen, f"{tracked:,} tracked objects; MEASURED ~220 ms at ~1.5M"),
        ("frozen", frozen, f"after gc.freeze(): {frozen_count:,} objects frozen; MEASURED ~0.1 ms"),
    ):
        rows.append(
            row(
                "gc: full collection (gc.collect)",
                variant,
                med,
                "ms",
                lo=lo,
                hi=hi,
                ratio=med / unfrozen[0],
                peer="unfrozen",
                note=f"{note}; median of {runs}",
            )
        )
    return rows


class Pending:
    """A future-like object holding its own callback: a reference cycle, as asyncio futures,
    tasks and caught exceptions make. Only the cyclic collector frees it, so these are what
    drive the collections (a tick freed by refcount alone gives gen 0's count back)."""

    def __init__(self) -> None:
        self.callback: Pending = self


def steady_loop(seconds: float, ring: deque[list[int]]) -> int:
    """A tick loop: a ``[price, size]`` list per tick into a bounded ring (recent state that
    survives a few collections) and one reference cycle every ``CYCLE_EVERY`` ticks, until
    ``seconds`` have passed. Returns the number of ticks."""
    push = ring.append
    deadline = time.perf_counter() + seconds
    ticks = 0
    while time.perf_counter() < deadline:
        for i in range(10_000):
            push([i, 100])
            if i % CYCLE_EVERY == 0:
                Pending()
        ticks += 10_000
    return ticks


def bench_steady(heap_size: int, seconds: float) -> list[Row]:
    rows: list[Row] = []
    default = gc.get_threshold()
    variants: list[tuple[str, bool, tuple[int, int, int]]] = [
        ("unfrozen", False, default),
        ("frozen", True, default),
        ("frozen, gen-0 threshold x10", True, (default[0] * 10, default[1], default[2])),
    ]
    gen2_base: float | None = None
    for variant, freeze, threshold in variants:
        with gc_state():
            heap = build_heap(heap_size)
            ring: deque[list[int]] = deque(maxlen=RING)
            with GcMonitor(capacity=1_000_000) as mon:
                if freeze:
                    mon.freeze_after_warmup()
                    # gc.freeze() leaves CPython's long-lived total at the pre-freeze heap, so
                    # the first gen-2 waits for heap/4 promotions; one full collection of the
                    # (now tiny) unfrozen heap settles it to its steady state.
                    gc.collect()
                gc.set_threshold(*threshold)
                steady_loop(min(0.5, seconds / 4), ring)  # warm-up: the ring fills
                before = mon.counts()
                seen = len(mon.pauses())
                spent_before = {g: mon.histogram(g)[1] for g in (0, 1, 2)}
                t0 = time.perf_counter()
                ticks = steady_loop(seconds, ring)
                secs = time.perf_counter() - t0
                after = mon.counts()
                spent = {g: mon.histogram(g)[1] - spent_before[g] for g in (0, 1, 2)}
                window = mon.pauses()[seen:]
                gen2_max_ms = max((p.duration_ms for p in window if p.generation == 2), default=0.0)
                gen0_ms = sorted(p.duration_ms for p in window if p.generation == 0) or [0.0]
            del heap, ring
        per_min = {g: (after[g] - before[g]) / secs * 60 for g in (0, 1, 2)}
        per_m_ticks = (after[2] - before[2]) / ticks * 1e6
        gen2_ms_per_min = spent[2] * 1e3 / secs * 60
        all_ms_per_min = sum(spent.values()) * 1e3 / secs * 60
        if gen2_base is None:
            gen2_base = per_min[2] or None
        rows.append(
            row(
                "gc: steady ticks, gen-2 collections",
                variant,
                per_min[2],
                "per min",
                ratio=per_min[2] / gen2_base if gen2_base else None,
                peer="unfrozen",
                note=(
                    f"{per_m_ticks:.1f} per 1M ticks; gen-2 pause max {gen2_max_ms:.2f} ms, "
                    f"total {gen2_ms_per_min:.1f} ms/min; threshold {threshold}; "
                    f"{ticks:,} ticks in {secs:.1f} s over a {heap_size:,}-list heap"
                ),
            )
        )
        rows.append(
            row(
                "gc: steady ticks, all collections",
                variant,
                sum(per_min.values()),
                "per min",
                note=(
                    f"gen0/1/2 {per_min[0]:.0f}/{per_min[1]:.0f}/{per_min[2]:.1f} per min; "
                    f"gen-0 pause median {gen0_ms[len(gen0_ms) // 2]:.3f} ms, "
                    f"max {gen0_ms[-1]:.2f} ms; GC time {all_ms_per_min:.1f} ms/min "
                    f"({all_ms_per_min / 600:.2f}% of the loop)"
                ),
            )
        )
    return rows


def run(quick: bool = False) -> list[Row]:
    heap = HEAP // 10 if quick else HEAP
    rows = bench_callback(20_000 if quick else 200_000)
    rows += bench_full_collection(heap, 3 if quick else 7)
    rows += bench_steady(heap, 1.0 if quick else 6.0)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small heap, few runs")
    args = parser.parse_args()
    for r in run(args.quick):
        print(json.dumps(r, ensure_ascii=False))


if __name__ == "__main__":
    main()
