"""Every CPython garbage collection, timed: a pause timeline, per-generation counters and a
pause histogram exported at scrape time (design: Observability, ``monotape_gc_pause_seconds``).

``GcMonitor.install()`` appends one callback to ``gc.callbacks``. CPython calls it with
``("start", info)`` before a collection and ``("stop", info)`` after it, while it holds the GIL
and refuses to start another collection, so the two calls of a pair never interleave with
another pair. The callback is a closure over local names (no attribute lookups): the "start"
phase stamps ``time.perf_counter_ns`` and the wall clock; the "stop" phase computes the
duration, appends one ``GcPause`` (``gc=False``: the timeline adds nothing for the collector to
walk) to a bounded deque and bumps plain lists of ints. A bare pair measured ~0.3 µs;
this one measured 1.0-1.5 µs per collection (an empty pair: 0.12 µs) in ``bench/micro/bench_gc.py``,
i.e. ~1 ms per second at ~1,000 gen-0 collections a second.

Nothing here is on the per-tick path; ``GcCollector`` (the node's collectors,
``monotape/platform/role/collectors.py``) turns the counters into a ``HistogramMetricFamily``
only when /metrics is read (prometheus_client costs ~0.7 µs per
``observe``, measured).
"""

from __future__ import annotations

import gc
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from monotape.clock import Clock

__all__ = [
    "GC_PAUSE_BUCKETS_S",
    "GENERATIONS",
    "GcMonitor",
    "GcPause",
]

GENERATIONS: tuple[int, ...] = (0, 1, 2)
# Upper bounds (seconds) of the pause histogram: 100 µs (a typical gen-0) up to 1 s (a full
# collection of a large unfrozen heap: ~220 ms at 1.5M tracked objects, measured).
GC_PAUSE_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)
_BOUNDS_NS: tuple[int, ...] = tuple(round(b * 1e9) for b in GC_PAUSE_BUCKETS_S)


class GcPause(msgspec.Struct, frozen=True, gc=False):
    """One collection: its generation, when it started (wall ms since the epoch), how long it
    paused the interpreter, and what it found."""

    generation: int
    start_ms: int
    duration_ns: int
    collected: int = 0
    uncollectable: int = 0

    @property
    def duration_ms(self) -> float:
        return self.duration_ns / 1e6

    @property
    def duration_s(self) -> float:
        return self.duration_ns / 1e9

    def overlay(self) -> dict[str, Any]:
        """The fields the latency timeline overlays (GET /admin/latency/timeline)."""
        return {
            "generation": self.generation,
            "start_ms": self.start_ms,
            "duration_ms": round(self.duration_ns / 1e6, 3),
        }


class GcMonitor:
    """Records every collection of this process once ``install()``-ed.

    ``capacity`` bounds the pause timeline (drop-oldest; ``dropped`` counts what fell off),
    once for gen 0 and once for gens 1-2: gen 0 runs hundreds of times a minute and would
    otherwise push the rare, long full collections out of a ten-minute overlay.
    The counters are cumulative since construction and never reset, as a Prometheus histogram
    must be. ``clock`` supplies the wall clock that dates each pause (durations always come
    from ``time.perf_counter_ns``, the finest monotonic clock).
    """

    def __init__(self, *, capacity: int = 10_000, clock: Clock | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._wall_ns: Callable[[], int] = clock.wall_ns if clock is not None else time.time_ns
        self._young: deque[GcPause] = deque(maxlen=capacity)  # gen 0
        self._old: deque[GcPause] = deque(maxlen=capacity)  # gens 1 and 2
        n = len(GENERATIONS)
        self._count = [0] * n
        self._total_ns = [0] * n
        self._max_ns = [0] * n
        # One list per generation; the last slot is the overflow (+Inf) bucket.
        self._buckets = [[0] * (len(_BOUNDS_NS) + 1) for _ in range(n)]
        self.frozen_objects = 0  # as recorded by freeze_after_warmup()
        self.freezes = 0  # refreeze() calls (gc_policy)
        self.reclaims = 0  # reclaim() calls (gc_policy)
        # The permanent generation's size as this monitor last counted it: what the scrape
        # exports. gc.get_freeze_count() walks the whole generation (18 ms at ~1M frozen
        # objects, measured): too slow for every scrape, dashboard sample and refreeze. Exact
        # after freeze_after_warmup() and reclaim(); each refreeze() adds what it froze (the
        # unfrozen heap's size just before, ``len(gc.get_objects())``: cheap, that heap is
        # small). Frozen objects freed later by reference counting are not subtracted, so
        # between reclaims this is an upper bound on what the frozen heap holds.
        self.frozen_now = 0
        self._gen2_peak = [0]  # longest gen-2 pause (ns) since take_gen2_peak_ms()
        self._callback = self._make_callback()

    # -- the callback --------------------------------------------------------------------------
    def _make_callback(self) -> Callable[[str, dict[str, int]], None]:
        perf = time.perf_counter_ns
        wall = self._wall_ns
        young, old = self._young.append, self._old.append
        count, total, peak, buckets = self._count, self._total_ns, self._max_ns, self._buckets
        bounds = _BOUNDS_NS
        gen2_peak = self._gen2_peak
        started = [0, 0]  # perf ns, wall ns of the collection in progress (0: none seen)

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = perf()
                started[1] = wall()
                return
            t0 = started[0]
            if not t0:  # installed during a collection: its "start" was never seen
                return
            d = perf() - t0
            started[0] = 0
            g = info["generation"]
            (old if g else young)(
                GcPause(g, started[1] // 1_000_000, d, info["collected"], info["uncollectable"])
            )
            count[g] += 1
            total[g] += d
            if d > peak[g]:
                peak[g] = d
            if g == 2 and d > gen2_peak[0]:
                gen2_peak[0] = d
            buckets[g][bisect_left(bounds, d)] += 1  # first bound >= d: Prometheus' `le`

        return on_gc

    @property
    def callback(self) -> Callable[[str, dict[str, int]], None]:
        """The function ``install()`` puts in ``gc.callbacks`` (tests drive it directly)."""
        return self._callback

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def installed(self) -> bool:
        return any(cb is self._callback for cb in gc.callbacks)

    def install(self) -> GcMonitor:
        """Start recording (idempotent: the callback is never registered twice)."""
        if not self.installed:
            gc.callbacks.append(self._callback)
        return self

    def uninstall(self) -> None:
        """Stop recording (idempotent). Removes every registration of this monitor's callback."""
        gc.callbacks[:] = [cb for cb in gc.callbacks if cb is not self._callback]

    def __enter__(self) -> GcMonitor:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def freeze_after_warmup(self) -> int:
        """Collect, then move every surviving object to the permanent generation; returns (and
        keeps in ``frozen_objects``) how many objects were frozen (``gc.get_freeze_count()``).

        Call once, after warm-up: the universe, the dictionary, the snapshot caches, the
        imported modules are built. Frozen objects are never traversed again, so a full
        collection no longer pays for them: measured ~220 ms -> ~0.1 ms for an explicit full
        collection with ~1.5M tracked objects. The trade-off: CPython runs a gen-2 collection
        when the objects that survived gen 1 since the last full collection exceed 25% of the
        (unfrozen) long-lived heap; freezing shrinks that heap, so gen 2 runs more often (~4x in
        measured) - each run is cheap, because it only walks what was not frozen.
        ``bench/micro/bench_gc.py`` measures both sides (2 vCPU, Python 3.11.7, one noisy run):

        - full collection, 1,527,715 tracked objects: 145 ms unfrozen (140-160 ms over 7 runs)
          vs 0.001 ms frozen;
        - a tick loop over that heap (a ``[price, size]`` list per tick into a 50k ring, one
          reference cycle per 20 ticks, ~4-5M ticks/s, far past production rates): gen 2 ran
          120/min unfrozen vs 170/min frozen (1.4x more often; ~4x was measured on another
          loop), but the worst gen-2 pause fell from 153 ms to 2.7 ms and gen-2 time from
          17.3 s/min to 0.36 s/min.

        So freezing trades rare ~150 ms stalls (four 40 ms frames) for more frequent
        sub-3 ms ones. The thresholds stay at CPython's defaults (700, 10, 10): the same loop
        with gen 0 at 7,000 halves total GC time but makes every gen-0 pause ~7x longer
        (median 0.46 -> 3.2 ms, max 2 -> 11 ms), which alone would spend the priority path's
        5 ms p99 budget. Note that ``gc.freeze()`` leaves CPython's long-lived total at the
        pre-freeze heap, so the first gen-2 after freezing waits for heap/4 promotions; the
        collections after it are the cheap, frequent ones. Hold hot state in untracked forms
        (ints, bytes, arrays, ``gc=False`` Structs) so the unfrozen heap stays small.
        """
        gc.collect()
        gc.freeze()
        self.frozen_objects = self.frozen_now = gc.get_freeze_count()
        return self.frozen_objects

    def refreeze(self) -> int:
        """Collect the young generations, then ``gc.freeze()`` (``gc_policy``: a batch of new
        connections, the cadence, or a gen-2 pause over budget); returns ``frozen_now``.

        ``gc.collect(1)`` frees young cycles so they are not frozen; it walks gens 0 and 1 only,
        so its pause is bounded whatever the heap (never a full collection: that is the pause
        this avoids). ``gc.get_freeze_count()`` is not called: it walks the whole permanent
        generation (5.3 ms at ~300k frozen objects on a busy core, measured), too slow to pay
        at every refreeze."""
        gc.collect(1)
        self.frozen_now += len(gc.get_objects())
        gc.freeze()
        self.freezes += 1
        return self.frozen_now

    def reclaim(self) -> int:
        """Unfreeze, collect everything, freeze again (``gc_policy``: frozen connections closed
        and left their reference cycles behind); returns the objects freed."""
        gc.unfreeze()
        freed = gc.collect()
        gc.freeze()
        self.reclaims += 1
        self.frozen_now = gc.get_freeze_count()
        return freed

    # -- queries -------------------------------------------------------------------------------
    def take_gen2_peak_ms(self) -> float:
        """The longest gen-2 pause since the previous call (0.0 if none), then forget it."""
        peak, self._gen2_peak[0] = self._gen2_peak[0], 0
        return peak / 1e6

    @property
    def dropped(self) -> int:
        """Pauses recorded but no longer in the bounded timeline."""
        return max(0, sum(self._count) - len(self._young) - len(self._old))

    def pauses(self) -> list[GcPause]:
        """The timeline, oldest first (at most ``capacity`` pauses of gen 0 and as many of
        gens 1-2). Copies: a collection may append while a reader iterates."""
        return sorted([*self._young, *self._old], key=_start)

    def pauses_between(
        self, start_ms: int, end_ms: int, *, min_generation: int = 0
    ) -> list[GcPause]:
        """Pauses that started in [start_ms, end_ms) wall ms (the window rule of
        ``query.timeline``: a pause belongs to the window its start lies in), oldest first."""
        return [
            p
            for p in self.pauses()
            if start_ms <= p.start_ms < end_ms and p.generation >= min_generation
        ]

    def counts(self) -> dict[int, int]:
        return {g: self._count[g] for g in GENERATIONS}

    def histogram(self, generation: int) -> tuple[list[tuple[str, int]], float, int]:
        """Cumulative ``(le, count)`` buckets ending with ``+Inf``, sum of seconds, count."""
        raw = list(self._buckets[generation])
        buckets: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip(GC_PAUSE_BUCKETS_S, raw, strict=False):
            running += n
            buckets.append((_le(bound), running))
        running += raw[-1]
        buckets.append(("+Inf", running))
        return buckets, self._total_ns[generation] / 1e9, running

    def snapshot(self, *, recent: int = 50) -> dict[str, Any]:
        """The body of GET /admin/gc."""
        generations = {}
        for g in GENERATIONS:
            n = self._count[g]
            generations[str(g)] = {
                "collections": n,
                "pause_total_s": self._total_ns[g] / 1e9,
                "pause_max_ms": self._max_ns[g] / 1e6,
                "pause_mean_ms": self._total_ns[g] / n / 1e6 if n else 0.0,
                "buckets": dict(self.histogram(g)[0]),
            }
        tail = self.pauses()[-recent:] if recent > 0 else []
        return {
            "installed": self.installed,
            "generations": generations,
            "threshold": list(gc.get_threshold()),
            "pending": list(gc.get_count()),
            "frozen_objects": gc.get_freeze_count(),
            "frozen_at_warmup": self.frozen_objects,
            "refreezes": self.freezes,
            "reclaims": self.reclaims,
            "timeline_capacity": self.capacity,
            "timeline_dropped": self.dropped,
            "recent": [msgspec.structs.asdict(p) for p in tail],
        }


def _start(p: GcPause) -> int:
    return p.start_ms


def _le(bound: float) -> str:
    return repr(float(bound))
