"""When to freeze the heap again, and when to reclaim what frozen connections left behind.

A terminal connection is long-lived state: ~100 GC-tracked objects (the websockets connection,
its transport, tasks, futures, deques, our ``Connection`` and ``Outbox``), alive all day. The
warm-up ``gc.freeze()`` (``GcMonitor.freeze_after_warmup``) happens before the first terminal,
so every connection lands in the unfrozen heap, and every gen-2 collection walks all of them:
bench/e2e/bench_latency.py measured a 124 ms gen-2 pause at ~1,900 terminals (three 40 ms frames
lost on every screen), recurring every few seconds.

``FreezePolicy`` is the pure decision; ``GcUpkeep.run`` (node/pipeline.py) feeds it once a second.
It acts only once the population has **settled** (no connection opened for ``settle_s``):

- **freeze** after new connections: ``gc.freeze()`` moves the live connections to the
  permanent generation, which no collection walks. It does not collect first (that would be
  the very pause it avoids), so young garbage caught at that instant is frozen too.
- **reclaim**: a connection frozen while open and closed later is freed by reference counting,
  except for objects in reference cycles, which only the cyclic collector frees and which the
  freeze hides from it. Once ``reclaim_closed`` connections have closed,
  ``gc.unfreeze(); gc.collect(); gc.freeze()``: one full collection (measured 147 ms with
  ~150k objects on a busy core, freeing 6,661 after 10,000 closes), paid once per that many
  closes instead of every few seconds.

Why only when settled: under steady churn (the soak: 100 connects/s, 1.5 s sessions) freezing
on a timer froze every few seconds the garbage of sessions that were about to end, the frozen
heap grew ~1,200 objects/s, and the reclaim it then needed stalled the loop for 147 ms (the
node shed upgrades with 503). Short sessions are not worth freezing; while the population
churns nothing is frozen, so nothing leaks, and gen 2 collects as it would without the policy.
Every close counts toward ``reclaim_closed``, frozen or not (the policy sees counts, not
connections), so a storm of short sessions can bring a reclaim early.
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

    def __post_init__(self) -> None:
        if self.settle_s < 0 or self.reclaim_closed < 1:
            raise ValueError(
                "FreezePolicy needs settle_s >= 0 and reclaim_closed >= 1, got "
                f"settle_s={self.settle_s}, reclaim_closed={self.reclaim_closed}"
            )
        self._opened_at_freeze = 0  # connections opened, as of the last freeze
        self._closed_at_reclaim = 0  # connections closed, as of the last reclaim
        self._last_opened = 0
        self._last_open_s = float("-inf")  # when the opened count last moved

    def start(self, opened: int, closed: int) -> None:
        """The counts at the warm-up freeze: nothing before them needs freezing again."""
        self._opened_at_freeze = self._last_opened = opened
        self._closed_at_reclaim = closed

    def decide(self, now_s: float, opened: int, closed: int) -> FreezeAction:
        """``opened``/``closed``: lifetime connection counts. Call about once a second."""
        if opened != self._last_opened:
            self._last_opened = opened
            self._last_open_s = now_s
        if now_s - self._last_open_s < self.settle_s:
            return FreezeAction.NONE  # still churning: nothing worth freezing yet
        if closed - self._closed_at_reclaim >= self.reclaim_closed:
            self._closed_at_reclaim = closed
            self._opened_at_freeze = opened  # the reclaim freezes too
            return FreezeAction.RECLAIM
        if opened != self._opened_at_freeze:
            self._opened_at_freeze = opened
            return FreezeAction.FREEZE
        return FreezeAction.NONE
