"""Injectable clocks: nothing on the hot path reads ``time`` directly (STYLE habit 4).

Two readings, because they answer different questions:
- ``now_ns()``: the monotonic clock. Frame boundaries (the 40 ms grid), stage latencies and
  delay lines use it; it never jumps.
- ``wall_ns()``: the wall clock. Venue timestamps are wall time; it is never used to order ticks
  (design: "Wall clocks never arbitrate").
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    def now_ns(self) -> int:
        """Monotonic nanoseconds."""
        ...

    def wall_ns(self) -> int:
        """Wall-clock nanoseconds since the Unix epoch."""
        ...


class SystemClock:
    """The real clocks."""

    now_ns = staticmethod(time.monotonic_ns)
    wall_ns = staticmethod(time.time_ns)


class FakeClock:
    """A clock tests move by hand; wall time keeps a fixed offset from monotonic time."""

    def __init__(self, start_ns: int = 1_000_000_000, wall_offset_ns: int = 1_764_460_800 * 10**9):
        self._now = start_ns
        self._wall_offset = wall_offset_ns

    def now_ns(self) -> int:
        return self._now

    def wall_ns(self) -> int:
        return self._now + self._wall_offset

    def advance(self, ns: int) -> None:
        if ns < 0:
            raise ValueError("a monotonic clock never goes back")
        self._now += ns

    def advance_ms(self, ms: float) -> None:
        self.advance(int(ms * 1_000_000))
