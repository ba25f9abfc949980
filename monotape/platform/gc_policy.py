"""When to freeze the heap again, and when to reclaim what frozen connections left behind.

A terminal connection is long-lived state: ~100 GC-tracked objects (the websockets connection,
its transport, tasks, futures, deques, our ``Connection`` and ``Outbox``), alive all day. The
warm-up ``gc.freeze()`` (``GcMonitor.freeze_after_warmup``) happens before the first terminal,
so every connection lands in the unfrozen heap, and every gen-2 collection walks all of them:
bench/bench_latency.py measured a 124 ms gen-2 pause at ~1,900 terminals (three 40 ms frames
lost on every screen), recurring every few seconds.

``FreezePolicy`` is the pure decision; ``Node._gc_policy_loop`` feeds it once a second:

- **freeze** once the population has settled (no connection opened for ``settle_s``) after new
  connections, or at the latest ``max_wait_s`` after the first of them under a steady trickle:
  ``gc.freeze()`` moves the live connections to the permanent generation, which no collection
  walks. It does not collect first (that would be the very pause it avoids), so young garbage
  caught at that instant is frozen too.
- **reclaim**: a connection frozen while open and closed later is freed by reference counting,
  except for any objects in reference cycles, which only the cyclic collector frees and which
  the freeze hides from it (measured in-process: a reclaim after 3,000 terminals closed freed
  0 objects, i.e. today's close path leaves no cycles; the reclaim is the bound should a
  library change that). Once ``reclaim_closed`` frozen connections have closed (and the
  population is settled, or at the latest ``max_wait_s`` later), ``gc.unfreeze();
  gc.collect(); gc.freeze()``: one full collection,
  as long as the unfrozen gen-2 pause used to be, paid once per that many closes instead of
  every few seconds. Bounded leak: at most ``reclaim_closed`` connections' cycles, plus what
  closes in the ``max_wait_s`` after. Every close counts, frozen or not (the policy sees
  counts, not connections): a storm of short sessions can bring a reclaim early.
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
    max_wait_s: float = 5.0
    reclaim_closed: int = 10_000

    def __post_init__(self) -> None:
        if self.settle_s < 0 or self.max_wait_s < self.settle_s or self.reclaim_closed < 1:
            raise ValueError(
                "FreezePolicy needs 0 <= settle_s <= max_wait_s and reclaim_closed >= 1, got "
                f"settle_s={self.settle_s}, max_wait_s={self.max_wait_s}, "
                f"reclaim_closed={self.reclaim_closed}"
            )
        self._opened_at_freeze = 0  # connections opened, as of the last freeze
        self._closed_at_reclaim = 0  # connections closed, as of the last reclaim
        self._last_opened = 0
        self._last_open_s = float("-inf")  # when the opened count last moved
        self._first_unfrozen_s: float | None = None  # first open since the last freeze
        self._reclaim_due_s: float | None = None  # when reclaim_closed was reached
        self.freezes = 0
        self.reclaims = 0

    def start(self, opened: int, closed: int) -> None:
        """The counts at the warm-up freeze: nothing before them needs freezing again."""
        self._opened_at_freeze = self._last_opened = opened
        self._closed_at_reclaim = closed

    def decide(self, now_s: float, opened: int, closed: int) -> FreezeAction:
        """``opened``/``closed``: lifetime connection counts. Call about once a second."""
        if opened != self._last_opened:
            self._last_opened = opened
            self._last_open_s = now_s
            if self._first_unfrozen_s is None:
                self._first_unfrozen_s = now_s
        settled = now_s - self._last_open_s >= self.settle_s
        if closed - self._closed_at_reclaim < self.reclaim_closed:
            self._reclaim_due_s = None
        elif self._reclaim_due_s is None:
            self._reclaim_due_s = now_s
        due = self._reclaim_due_s
        # Settled, or at the latest max_wait_s after the threshold: under steady reconnects
        # the population never settles, and the leak must stay bounded anyway.
        if due is not None and (settled or now_s - due >= self.max_wait_s):
            self._reclaim_due_s = None
            self._closed_at_reclaim = closed
            self._opened_at_freeze = opened
            self._first_unfrozen_s = None
            self.reclaims += 1
            return FreezeAction.RECLAIM
        if opened == self._opened_at_freeze:
            return FreezeAction.NONE
        first = self._first_unfrozen_s if self._first_unfrozen_s is not None else now_s
        if settled or now_s - first >= self.max_wait_s:
            self._opened_at_freeze = opened
            self._first_unfrozen_s = None
            self.freezes += 1
            return FreezeAction.FREEZE
        return FreezeAction.NONE
