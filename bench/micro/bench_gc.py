"""CPython GC on monotape's terms: what the GcMonitor callback costs, what a full collection of a
large heap costs unfrozen vs frozen, and how often each generation runs under steady allocation
with and without ``gc.freeze()`` (the CPython GC trap: a full collection walks every tracked
object).

- ``callback pair``: the monitor's "start"+"stop" pair called directly, µs per collection;
  peer: an empty callback pair (the floor of any ``gc.callbacks`` entry).
- ``full collection``: a heap of ``HEAP`` tracked objects (lists; ~1.5M) aged
  into gen 2, then ``gc.collect()`` timed by the monitor itself; ``frozen`` runs after
  ``gc.freeze()``. Median of ``runs`` with min and max; ratio = frozen / unfrozen.
- ``steady ticks``: the same heap, then a tick loop (``steady_loop``: a ``[price, size]`` list
  per tick into a bounded 50k ring, so recent state survives a few collections, and one
  reference cycle per 20 ticks, as futures and caught exceptions make) for a fixed time;
  collections per minute of each generation, pause maxima and GC time per minute, unfrozen vs
  frozen vs frozen with a 10x gen-0 threshold. Per-minute figures scale with this machine's
  loop speed; the note also gives gen-2 runs per 1M ticks.
- ``writer trickle`` (issue #12 item 5): one writer's heap, 2,100 terminals (one of 2 writers of
  4,200), ~100 tracked objects each (``Terminal``), on a frozen warm-up heap; frames flow
  (``FPS`` a simulated second: a per-terminal write and a future-like cycle per 20 terminals),
  and a trickle of ``TRICKLE`` opens and as many closes every simulated second. The freeze
  policy decides once a simulated second (simulated time: the loop runs as fast as it can, so
  the figures are per simulated minute). ``old``: the settle-only policy as it was (freeze
  without collecting, only after ``settle_s`` without an open: the trickle never lets it);
  ``new``: ``FreezePolicy``'s defaults with ``GcMonitor.refreeze``. Longest and p99 gen-2 pause
  (reclaims included), frozen objects at the end, and the frozen garbage (what one final
  unfreeze + full collection frees). Variants interleave, ``runs`` times each.

    .venv/bin/python -m bench.micro.bench_gc [--quick] [--only writers|trickle|churn]
"""

from __future__ import annotations

import argparse
import functools
import gc
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from bench.common import Row, median_min_max, print_rows, row
from monotape.histograms.gc import GcMonitor, GcPause
from monotape.platform.core.gc_policy import FreezeAction, FreezePolicy

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
            note=f"start+stop called directly, {pairs:,} pairs x {runs} runs; "
            "an earlier measurement on this kind of box: ~0.3 µs",
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
        ("unfrozen", unfrozen, f"{tracked:,} tracked objects; earlier: ~220 ms at ~1.5M"),
        ("frozen", frozen, f"after gc.freeze(): {frozen_count:,} objects frozen; earlier: ~0.1 ms"),
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


WRITER_TERMINALS = 2_100  # one of 2 writers of 4,200
WRITER_BASE = 300_000  # the writer's warm-up heap (universe, tables, modules), frozen
SYMBOLS = 40
FPS = 25
TRICKLE = 5  # opens (and closes) a simulated second
RAMP_S = 20  # simulated seconds to connect the population
MEASURE_S = 1_100  # simulated seconds measured after the ramp (5,500 closes: one forced reclaim)
CHURN_MEASURE_S = 300
CHURN = 100  # the soak's shape: short sessions opened a simulated second...
CHURN_LIFE_S = 2  # ...each closed this many simulated seconds later
LEFTOVER = 28  # objects in the cycle a close leaves (measured ~30 per server-side close)


class Proto:
    """The terminal's transport/protocol: points back at its terminal (a reference cycle)."""

    def __init__(self, owner: Terminal) -> None:
        self.owner: Terminal | None = owner
        self.buffer = bytearray(64)


class Leftover:
    """What a closed connection leaves for the cyclic collector: on the node, ~59 objects per
    close with the clients in the same process (sockets, transports, futures, headers, lists),
    so ~30 for the server's side alone."""

    def __init__(self) -> None:
        self.parts = [[i] for i in range(LEFTOVER)]  # lists: always tracked
        self.me = self


class Terminal:
    """A writer's terminal, ~100 GC-tracked objects: watchlist set, per-symbol state, headers,
    protocol (a cycle), tasks (futures holding a callback to it), an outbox of bytes. ``close``
    tears the main cycle down as the server does, so reference counting frees most of it; the
    ``Leftover`` cycle is what only the cyclic collector (or a reclaim, once frozen) frees."""

    def __init__(self, tid: int) -> None:
        self.tid = tid
        self.watch = set(range(tid % 500, tid % 500 + SYMBOLS))
        self.state = {s: [0, 0] for s in self.watch}
        self.headers = [[i] for i in range(40)]
        self.proto = Proto(self)
        self.tasks = [Pending() for _ in range(4)]
        self.outbox: deque[bytes] = deque(maxlen=8)
        self.leftover = Leftover()
        self.last: list[int] = []

    def close(self) -> None:
        self.proto.owner = None
        self.tasks.clear()


def old_refreeze(mon: GcMonitor) -> int:
    """The policy's freeze as it was: gc.freeze() without collecting first."""
    gc.freeze()
    mon.freezes += 1
    return 0


def policy_for(variant: str) -> FreezePolicy:
    if variant == "old":  # settle-only, as before issue #12 item 5
        return FreezePolicy(
            settle_s=1.0,
            refreeze_opened=0,
            refreeze_every_s=0,
            pause_budget_ms=0,
            reclaim_forced_closed=0,
        )
    if variant == "new, no lifetime gate":
        return FreezePolicy(min_lifetime_s=0)
    return FreezePolicy()


def writer_heap(variant: str, scenario: str, measure_s: int, base: int) -> dict[str, float]:
    """One simulated writer: ramp to ``WRITER_TERMINALS``, then ``measure_s`` simulated seconds
    of the scenario (``trickle``: TRICKLE opens and closes of long-lived terminals a second;
    ``churn``: CHURN short sessions a second on top of the long-lived population)."""
    policy = policy_for(variant)
    with gc_state(), GcMonitor(capacity=1_000_000) as mon:
        warm = build_heap(base)
        mon.freeze_after_warmup()
        policy.start(0, 0, now_s=0.0)
        refreeze: Callable[[], int] = (
            functools.partial(old_refreeze, mon) if variant == "old" else mon.refreeze
        )
        terminals: dict[int, Terminal] = {}
        short: deque[tuple[int, list[Terminal]]] = deque()
        opened = closed = 0
        payload = b"x" * 200
        seen = 0
        t_cpu = 0.0
        reclaim_pauses: list[GcPause] = []
        unfrozen_max = 0  # tracked objects outside the permanent generation, before a decision
        for sec in range(RAMP_S + measure_s):
            if sec == RAMP_S:
                seen = len(mon.pauses())
                t_cpu = time.process_time()
            ramp = sec < RAMP_S
            opens = (
                WRITER_TERMINALS // RAMP_S if ramp else (TRICKLE if scenario == "trickle" else 0)
            )
            for _ in range(opens):
                terminals[opened] = Terminal(opened)
                opened += 1
            if not ramp and scenario == "trickle":
                for tid in list(terminals)[:TRICKLE]:  # the oldest close
                    terminals.pop(tid).close()
                    closed += 1
            if not ramp and scenario == "churn":
                batch = [Terminal(opened + i) for i in range(CHURN)]
                opened += CHURN
                short.append((sec + CHURN_LIFE_S, batch))
                while short and short[0][0] <= sec:
                    for t in short.popleft()[1]:
                        t.close()
                        closed += 1
            for frame in range(FPS):
                for i, t in enumerate(terminals.values()):
                    t.last = [frame, i]
                    t.outbox.append(payload)
                    if i % CYCLE_EVERY == 0:
                        Pending()
            if sec >= RAMP_S:  # what a gen-2 would walk now (a count: contention cannot skew it)
                unfrozen_max = max(unfrozen_max, len(gc.get_objects()))
            action = policy.decide(float(sec), opened, closed, mon.take_gen2_peak_ms())
            if action is FreezeAction.FREEZE:
                refreeze()
            elif action is FreezeAction.RECLAIM:
                mon.reclaim()
                reclaim_pauses.append([p for p in mon.pauses() if p.generation == 2][-1])
            if action is not FreezeAction.NONE:
                mon.take_gen2_peak_ms()
        cpu = time.process_time() - t_cpu
        window = [p for p in mon.pauses()[seen:] if p.generation == 2]
        gen2 = sorted(p.duration_ms for p in window if p not in reclaim_pauses)
        del short
        # What a gen-2 collection costs now: it walks the unfrozen heap, as a natural one would.
        gc.collect()
        probe_ms = [p for p in mon.pauses() if p.generation == 2][-1].duration_ms
        frozen = gc.get_freeze_count()
        gc.unfreeze()
        garbage = gc.collect()
        out = {
            "gen2_max_ms": gen2[-1] if gen2 else 0.0,
            "gen2_p99_ms": gen2[min(len(gen2) - 1, int(len(gen2) * 0.99))] if gen2 else 0.0,
            "gen2_per_min": len(gen2) / measure_s * 60,
            "probe_ms": probe_ms,
            "unfrozen_max": float(unfrozen_max),
            "reclaim_max_ms": max((p.duration_ms for p in reclaim_pauses), default=0.0),
            "frozen": float(frozen),
            "frozen_garbage": float(garbage),
            "refreezes": float(mon.freezes),
            "reclaims": float(mon.reclaims),
            "cpu_s": cpu,
        }
        del warm, terminals
    return out


def bench_writer_heap(scenario: str, runs: int, measure_s: int, base: int) -> list[Row]:
    variants = ("old", "new") if scenario == "trickle" else ("old", "new", "new, no lifetime gate")
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(runs):  # interleaved: old, new, old, new, ...
        for variant in variants:
            results[variant].append(writer_heap(variant, scenario, measure_s, base))
    rows: list[Row] = []
    old_max = median_min_max([r["gen2_max_ms"] for r in results["old"]])[0]
    shape = (
        f"{TRICKLE} opens+closes/s"
        if scenario == "trickle"
        else f"{CHURN} sessions/s of {CHURN_LIFE_S} s"
    )
    for variant, rs in results.items():
        med, lo, hi = median_min_max([r["gen2_max_ms"] for r in rs])

        def mid(key: str, rs: list[dict[str, float]] = rs) -> float:
            return median_min_max([r[key] for r in rs])[0]

        rows.append(
            row(
                f"gc: writer {scenario}, longest gen-2 pause (reclaims apart)",
                variant,
                med,
                "ms",
                lo=lo,
                hi=hi,
                ratio=med / old_max if old_max else None,
                peer="old",
                note=(
                    f"p99 {mid('gen2_p99_ms'):.2f} ms; {mid('gen2_per_min'):.1f} gen-2/sim-min; "
                    f"a gen-2 at the end {mid('probe_ms'):.2f} ms; at most "
                    f"{mid('unfrozen_max'):,.0f} objects unfrozen (what a gen-2 walks); "
                    f"{mid('reclaims'):.0f} reclaims, longest {mid('reclaim_max_ms'):.1f} ms; "
                    f"{mid('refreezes'):.0f} refreezes; frozen {mid('frozen'):,.0f} objects, "
                    f"frozen garbage {mid('frozen_garbage'):,.0f}; loop CPU {mid('cpu_s'):.1f} s; "
                    f"{WRITER_TERMINALS:,} terminals on a {base:,}-object frozen heap, {shape}, "
                    f"{FPS} frames/s, {measure_s} sim-s; raw max ms "
                    f"{[round(r['gen2_max_ms'], 2) for r in rs]}, raw end gen-2 ms "
                    f"{[round(r['probe_ms'], 2) for r in rs]}; median of {len(rs)}"
                ),
            )
        )
    return rows


def bench_writers(quick: bool, only: str) -> list[Row]:
    runs, measure_s = (1, 120) if quick else (3, MEASURE_S)
    rows: list[Row] = []
    for scenario in ("trickle", "churn"):
        if only in ("", "writers", scenario):
            seconds = measure_s if scenario == "trickle" or quick else CHURN_MEASURE_S
            rows += bench_writer_heap(scenario, runs, seconds, WRITER_BASE)
    return rows


def run(quick: bool = False, only: str = "") -> list[Row]:
    if only:
        return bench_writers(quick, only)
    heap = HEAP // 10 if quick else HEAP
    rows = bench_callback(20_000 if quick else 200_000)
    rows += bench_full_collection(heap, 3 if quick else 7)
    rows += bench_steady(heap, 1.0 if quick else 6.0)
    rows += bench_writers(quick, "")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small heap, few runs")
    parser.add_argument(
        "--only", choices=["writers", "trickle", "churn"], default="", help="writer heaps only"
    )
    args = parser.parse_args()
    print_rows(run(args.quick, args.only))


if __name__ == "__main__":
    main()
