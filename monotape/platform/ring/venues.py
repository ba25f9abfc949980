"""Venues as bits of a frame ring entry: how a host's sequencer tells its writers which venues
have all their feed handlers down (the ``stale_venues`` word of every entry, docs/ring.md).

Both sides derive the same bit for a venue from the same universe (the venues sorted by name),
so nothing but one u32 crosses the ring. 32 venues at most carry a bit (the design's workload
has 6); a venue past the 32nd is never marked stale through the ring (``VenueBits.of`` says
which ones were left out).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_VENUE_BITS", "VenueBits"]

MAX_VENUE_BITS: Final = 32  # the entry header's u32 (its former padding: old writers read 0)


@dataclass(frozen=True, slots=True)
class VenueBits:
    venues: tuple[str, ...]  # bit i is venues[i]
    left_out: tuple[str, ...] = ()

    @classmethod
    def of(cls, venues: Iterable[str]) -> VenueBits:
        """From the venues of a universe (any order, repeats allowed)."""
        names = sorted(set(venues))
        return cls(tuple(names[:MAX_VENUE_BITS]), tuple(names[MAX_VENUE_BITS:]))

    def mask(self, down: Collection[str]) -> int:
        """The word for the venues in ``down`` (unknown or left-out venues: no bit)."""
        return sum(1 << i for i, v in enumerate(self.venues) if v in down)

    def names(self, mask: int) -> frozenset[str]:
        """The venues a word names (bits past the known venues are ignored)."""
        return frozenset(v for i, v in enumerate(self.venues) if mask >> i & 1)
