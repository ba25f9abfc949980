"""When to freeze the heap again, and when to reclaim what frozen connections left behind.

A terminal connection is long-lived state: ~100-150 GC-tracked objects (the websockets
connection, its transport, tasks, futures, deques, our ``Connection`` and ``Outbox``), alive all
day. The warm-up ``gc.freeze()`` (``GcMonitor.freeze_after_warmup``) happens before the first
terminal, so every connection lands in the unfrozen heap, and every gen-2 collection walks all
of them: bench/e2e/bench_latency.py measured a 124 ms gen-2 pause at ~1,900 terminals (three
40 ms frames lost on every screen), recurring every few seconds.

``FreezePolicy`` is the pure decision; ``GcUpkeep.run`` (role/fanout_upkeep.py) feeds it once a
second with the lifetime open/close counts and the longest gen-2 pause since its previous call.
It runs in the one-process node and in every writer process (host/writer.py).

- **freeze** (``GcMonitor.refreeze``: collect gens 0-1, then ``gc.freeze()``) when

  - the population settled (nothing opened for ``settle_s``) and something opened since; or,
    while sessions are long-lived (below):
  - ``refreeze_opened`` connections opened since the last freeze (a batch: 64 are ~8k
    objects, well under a millisecond to walk); or
  - ``refreeze_every_s`` passed since the last freeze and at least one connection opened; or
  - a gen-2 pause reached ``pause_budget_ms`` (the heap grew by something the counts do not
    see), at most once per ``refreeze_every_s``.

  So the unfrozen long-lived heap, which is what a gen-2 pause walks, never holds more than a
  bounded batch of terminals. The settle rule alone (the policy before issue #12 item 5) let a
  trickle of opens (one a second is enough) postpone every freeze forever, and gen-2 pauses grew
  with the heap.
- **long-lived**: the triggers other than settling act only while the live population over the
  close rate since the last freeze is at least ``min_lifetime_s``. Under churn (the soak: 100
  sessions a second of 1.5 s) freezing froze sessions about to end; their cycles pile up frozen
  and need a full-heap reclaim (bench_gc ``churn``: without the gate, 5 reclaims of up to
  1.6 s in 300 simulated seconds on a busy box; with it, none). Short sessions are a small
  live heap anyway, and garbage never frozen needs no reclaim.
- **reclaim** (``gc.unfreeze(); gc.collect(); gc.freeze()``): a connection frozen while open
  and closed later is freed by reference counting, except for its reference cycles, which only
  the cyclic collector frees and which the freeze hides from it: measured on the node, ~30
  objects (~3 KB) per server-side close stay in the permanent generation. A reclaim frees them
  with one full collection of the whole heap (tens to hundreds of ms). It runs once
  ``reclaim_closed`` frozen connections may have closed and the population is settled (a quiet
  moment), or, settled or not, once ``reclaim_forced_closed`` may have: that bounds the frozen
  garbage at ~30 x ``reclaim_forced_closed`` objects (5,000: ~150k objects, ~16 MB), paid for by
  one long pause per that many closes (at 5 closes/s on a writer, one every ~17 minutes).
  ``frozen_closes`` is the upper bound it counts: closes since the last reclaim, but no more
  than the connections frozen while open since (a close of a never-frozen connection is
  counted as possibly frozen only while that cohort lasts).

Why gens 0-1 are collected before each freeze: ``gc.freeze()`` freezes everything tracked,
garbage included. The young collection frees the young cycles (short sessions, per-frame
futures) so they are not frozen; it walks gens 0 and 1 only, never the whole heap. Garbage
that already reached gen 2 is frozen with the rest; with a freeze every few seconds that is
little, and the reclaim bound covers it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["FreezeAction", "FreezePolicy"]


class FreezeAction(enum.Enum):
    NONE = "none"
    FREEZE = "freeze"
    RECLAIM = "reclaim"


@dataclass
class FreezePolicy:
    settle_s: float = 1.0
    reclaim_closed: int = 10_000
    refreeze_opened: int = 64  # 0: no batch trigger
    refreeze_every_s: float = 10.0  # 0: no cadence trigger (and no pause-budget trigger)
    pause_budget_ms: float = 2.0  # 0: no pause-budget trigger
    min_lifetime_s: float = 60.0  # 0: the triggers fire however short sessions are
    reclaim_forced_closed: int = 5_000  # 0: reclaim only when settled (no bound)

    def __post_init__(self) -> None:
        if (
            self.settle_s < 0
            or self.reclaim_closed < 1
            or self.refreeze_opened < 0
            or self.refreeze_every_s < 0
            or self.pause_budget_ms < 0
            or self.min_lifetime_s < 0
            or self.reclaim_forced_closed < 0
        ):
            raise ValueError(
                "FreezePolicy needs settle_s >= 0, reclaim_closed >= 1 and refreeze_opened, "
                "refreeze_every_s, pause_budget_ms, min_lifetime_s, reclaim_forced_closed "
                f">= 0, got settle_s={self.settle_s}, reclaim_closed={self.reclaim_closed}, "
                f"refreeze_opened={self.refreeze_opened}, "
                f"refreeze_every_s={self.refreeze_every_s}, "
                f"pause_budget_ms={self.pause_budget_ms}, "
                f"min_lifetime_s={self.min_lifetime_s}, "
                f"reclaim_forced_closed={self.reclaim_forced_closed}"
            )
        self._opened_at_freeze = 0  # connections opened, as of the last freeze
        self._closed_at_freeze = 0  # connections closed, as of the last freeze
        self._closed_at_reclaim = 0  # connections closed, as of the last reclaim
        self._cohort = 0  # connections frozen while open since the last reclaim (at most)
        self._last_opened = 0
        self._last_open_s = float("-inf")  # when the opened count last moved
        self._freeze_s = float("-inf")  # when the last freeze (or reclaim) was decided

    def start(self, opened: int, closed: int, now_s: float = float("-inf")) -> None:
        """The counts at the warm-up freeze: nothing before them needs freezing again. Without
        ``now_s`` the cadence counts from the first ``decide``."""
        self._opened_at_freeze = self._last_opened = opened
        self._closed_at_reclaim = self._closed_at_freeze = closed
        self._cohort = max(0, opened - closed)
        self._freeze_s = now_s

    def frozen_closes(self, closed: int) -> int:
        """At most how many connections closed after being frozen since the last reclaim: the
        closes since, but no more than were frozen while open. Each left its reference cycles
        in the permanent generation (~30 objects; docs/observability.md)."""
        return min(closed - self._closed_at_reclaim, self._cohort)

    def decide(
        self, now_s: float, opened: int, closed: int, gen2_pause_ms: float = 0.0
    ) -> FreezeAction:
        """``opened``/``closed``: lifetime connection counts; ``gen2_pause_ms``: the longest
        gen-2 pause since the previous call (0 if none). Call about once a second."""
        if self._freeze_s == float("-inf"):
            self._freeze_s = now_s
        if opened != self._last_opened:
            self._last_opened = opened
            self._last_open_s = now_s
        settled = now_s - self._last_open_s >= self.settle_s
        closes = self.frozen_closes(closed)
        forced = 0 < self.reclaim_forced_closed <= closes
        if forced or (settled and closes >= self.reclaim_closed):
            self._closed_at_reclaim = closed
            self._mark_frozen(now_s, opened, closed)  # the reclaim freezes too...
            self._cohort = max(0, opened - closed)  # ...every open connection
            return FreezeAction.RECLAIM
        fresh = opened - self._opened_at_freeze
        since = now_s - self._freeze_s
        if fresh and settled:
            self._mark_frozen(now_s, opened, closed)
            return FreezeAction.FREEZE
        if not self._long_lived(since, opened - closed, closed - self._closed_at_freeze):
            return FreezeAction.NONE  # short sessions: a freeze would freeze their garbage
        every = self.refreeze_every_s
        if (
            (self.refreeze_opened and fresh >= self.refreeze_opened)
            or (every and fresh and since >= every)
            or (
                every
                and self.pause_budget_ms
                and gen2_pause_ms >= self.pause_budget_ms
                and since >= every
            )
        ):
            self._mark_frozen(now_s, opened, closed)
            return FreezeAction.FREEZE
        return FreezeAction.NONE

    def _long_lived(self, since_s: float, live: int, closes: int) -> bool:
        """Do sessions last ``min_lifetime_s`` or more? The live population over the close
        rate since the last freeze (live / (closes / since_s)); no close: yes."""
        return closes * self.min_lifetime_s <= live * max(since_s, 0.0)

    def _mark_frozen(self, now_s: float, opened: int, closed: int) -> None:
        # the connections opened since the last freeze and still open (at most) are frozen now
        self._cohort += min(opened - self._opened_at_freeze, max(0, opened - closed))
        self._opened_at_freeze = opened
        self._closed_at_freeze = closed
        self._freeze_s = now_s
