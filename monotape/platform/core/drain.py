"""A staggered drain: close every terminal, a small share at a time, with spread-out hints.

design (Connections): a drain closes 2% of connections every 250 ms with staggered
``reconnect_after_ms``. Closing everyone at once turns one restart into a reconnect storm on the
neighbours; 2% per 250 ms spreads N terminals over 12.5 s whatever N is, and each closed
terminal is told to wait a random 0..spread ms before it comes back (full jitter), so the
second wave is flat too. A pure state machine: the server's driver asks it what to close when.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections import deque
from collections.abc import Iterable

__all__ = ["Drain"]


class Drain:
    def __init__(
        self,
        conn_ids: Iterable[int],
        *,
        started_ns: int,
        fraction: float = 0.02,
        interval_ns: int = 250_000_000,
        hint_spread_ms: int = 5_000,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        self._rng = rng or random.Random()
        ids = list(conn_ids)
        self._rng.shuffle(ids)  # not oldest-first: no desk is always the first to be moved
        self._pending = deque(ids)
        self.total = len(ids)
        self.batch = max(1, math.ceil(self.total * fraction))
        self.interval_ns = interval_ns
        self.hint_spread_ms = hint_spread_ms
        self.started_ns = started_ns
        self._next_ns = started_ns
        self.closed = 0
        self.finished_ns = 0  # set by the driver when the last batch was closed

    @property
    def done(self) -> bool:
        return not self._pending

    @property
    def remaining(self) -> int:
        return len(self._pending)

    def expected_duration_ns(self) -> int:
        """About total / (fraction per interval) intervals: the figure an operator plans with."""
        return max(0, math.ceil(self.total / self.batch) - 1) * self.interval_ns

    def step(self, now_ns: int) -> list[tuple[int, int]]:
        """The connections to close now, each with its reconnect_after_ms hint."""
        out: list[tuple[int, int]] = []
        while self._pending and now_ns >= self._next_ns:
            for _ in range(min(self.batch, len(self._pending))):
                hint = self._rng.randint(1, max(1, self.hint_spread_ms))  # never "at once"
                out.append((self._pending.popleft(), hint))
            self._next_ns += self.interval_ns
        self.closed += len(out)
        return out

    def forget(self, conn_id: int) -> None:
        """A connection that left by itself needs no closing."""
        with contextlib.suppress(ValueError):
            self._pending.remove(conn_id)
