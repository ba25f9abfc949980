"""Which symbols on a terminal's screen are stale, and since when. Sans-I/O: fed every server
message with the time it arrived, asked per symbol (docs/sdk.md, Stale prices).

Three causes, each cleared by its own kind of record (docs/wire.md, STALE):

- the **watchdog**: no message at all for ``stale_after_ms`` (the server heartbeats every
  second, so silence means the writer, the host or the network is gone; no server can say
  that). The next message clears it.
- the **grid**: a STALE with ``grid_since_ms``: the writer has had no frame for more than two
  frame intervals. The next FRAME clears it.
- a **venue**: a STALE listing the venue (its handlers are all down). A STALE without it
  clears it; records of that venue do not (a snapshot on subscribe carries the last prices).

"Since" is a wall-clock time in ms: the server's for the grid and venues (when the last frame
reached it, when the venue went down), the terminal's own for the watchdog (the last message).
"""

from __future__ import annotations

from typing import Final

from monotape.clock import Clock
from monotape.platform.wire import codec

__all__ = ["STALE_AFTER_MS", "Staleness"]

# Two and a half heartbeats (server.heartbeat_s = 1 s): one late heartbeat on a busy link is
# not a dead writer; two missed ones are.
STALE_AFTER_MS: Final = 2500


class Staleness:
    def __init__(self, clock: Clock, stale_after_ms: int = STALE_AFTER_MS) -> None:
        self._clock = clock
        self.stale_after_ns = stale_after_ms * 1_000_000
        self._last_ns = 0  # monotonic ns of the last message (0: none yet: nothing shown)
        self._last_wall_ms = 0
        self.grid_since_ms = 0
        self.venues: dict[str, int] = {}  # venue -> since_ms (server wall)

    def heard(self) -> None:
        """A message of any kind arrived: the watchdog's only input (the driver calls it for
        every message, answers too; the view calls ``on_message`` for what it reads)."""
        self._last_ns = self._clock.now_ns()
        self._last_wall_ms = self._clock.wall_ns() // 1_000_000

    def on_message(self, msg: codec.ServerMessage) -> None:
        self.heard()
        if isinstance(msg, codec.Frame):
            self.grid_since_ms = 0
        elif isinstance(msg, codec.Stale):
            self.grid_since_ms = msg.grid_since_ms
            self.venues = {v.venue: v.since_ms for v in msg.venues}
        elif isinstance(msg, codec.Hello):
            # A new connection starts from what its writer says (a STALE follows the HELLO
            # if anything is stale there); another writer's verdicts do not carry over.
            self.grid_since_ms = 0
            self.venues = {}

    @property
    def silent(self) -> bool:
        """The watchdog: no message for longer than ``stale_after_ms``."""
        return bool(self._last_ns) and self._clock.now_ns() - self._last_ns > self.stale_after_ns

    def since_ms(self, key: str) -> int | None:
        """When ``key``'s price went stale (wall ms), or None while it is live. With several
        causes, the earliest."""
        times = []
        if self.silent:
            times.append(self._last_wall_ms)
        if self.grid_since_ms:
            times.append(self.grid_since_ms)
        venue, sep, _ = key.partition(":")
        if sep and venue in self.venues:
            times.append(self.venues[venue])
        return min(times) if times else None

    def is_stale(self, key: str) -> bool:
        return self.since_ms(key) is not None
