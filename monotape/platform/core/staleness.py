"""Whether a writer's prices have stopped, and what its terminals must be told (docs/wire.md,
STALE). No I/O: fed frames and down-venue sets with the times they happened, asked for the
STALE state to announce.

Two causes, one state (design: never silently stale):

- the frame grid stalled: no frame reached this writer for more than two frame intervals (the
  sequencer is down, restarting or hung; a frozen ring). The next frame ends it: a FRAME clears
  it at a terminal, and the cleared state goes out once too, ahead of that frame, for the
  terminals whose symbols did not move (a frame carries only changes: they get no FRAME).
- venues whose feed handlers are all down (``venues_down``): the ingest side decides which, the
  writer only carries the set. A quiet symbol is never stale; a down venue's symbols are.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Final

__all__ = ["STALL_FRAMES", "StaleState", "StaleWatch"]

# More than two frame intervals without a frame: one late frame (a GC pause of a few ms, a
# boundary taken late on a busy loop) is not a stall; two missed boundaries are (design:
# terminals are told within 200 ms, and 80 ms at 25 Hz leaves room for the check's own cadence).
STALL_FRAMES: Final = 2


@dataclass(frozen=True, slots=True)
class StaleState:
    """What STALE says: ``grid_since_ms`` (0: frames flow) and the down venues with since when
    (server wall ms), sorted by venue."""

    grid_since_ms: int = 0
    venues: tuple[tuple[str, int], ...] = ()

    @property
    def stale(self) -> bool:
        return bool(self.grid_since_ms or self.venues)

    @property
    def venue_names(self) -> frozenset[str]:
        return frozenset(v for v, _ in self.venues)


@dataclass(slots=True)
class StaleWatch:
    """One writer's staleness. ``framed`` on every frame written, ``venues_down`` whenever the
    ingest side's set may have changed, ``check`` on a cadence shorter than a frame interval:
    each returns the new state when the terminals must be told (None: nothing to send)."""

    frame_ns: int
    last_frame_ns: int = 0  # monotonic; 0: no frame yet (a writer that just started)
    last_frame_wall_ms: int = 0
    state: StaleState = field(default_factory=StaleState)
    stalls: int = 0  # times the grid was found stalled (an episode each)
    venue_episodes: int = 0  # times a venue was found down

    def framed(self, now_ns: int, wall_ms: int) -> StaleState | None:
        """A frame is being written: the grid is live. The new state when it had stalled (to
        be told ahead of the frame), else None."""
        self.last_frame_ns = now_ns
        self.last_frame_wall_ms = wall_ms
        if not self.state.grid_since_ms:
            return None
        self.state = StaleState(0, self.state.venues)
        return self.state

    def venues_down(self, venues: Collection[str], wall_ms: int) -> StaleState | None:
        """The venues whose handlers are all down now; the new state if the set changed."""
        held = dict(self.state.venues)
        if frozenset(venues) == frozenset(held):
            return None
        self.venue_episodes += sum(1 for v in venues if v not in held)
        kept = tuple(sorted((v, held.get(v, wall_ms)) for v in set(venues)))
        self.state = StaleState(self.state.grid_since_ms, kept)
        return self.state

    def check(self, now_ns: int) -> StaleState | None:
        """The new state when the grid has just been found stalled, else None. A writer that
        has never had a frame is not stalled: it has shown nothing yet (its terminals' HELLO
        comes before any price)."""
        if self.state.grid_since_ms or not self.last_frame_ns:
            return None
        if now_ns - self.last_frame_ns <= STALL_FRAMES * self.frame_ns:
            return None
        self.stalls += 1
        self.state = StaleState(max(1, self.last_frame_wall_ms), self.state.venues)
        return self.state

    @property
    def grid_stalled(self) -> bool:
        return bool(self.state.grid_since_ms)
