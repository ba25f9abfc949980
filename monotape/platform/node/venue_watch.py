"""The one-process node's ingest-side half of STALE for venues: which venues have all their
feed handlers down, asked by the fan-out's STALE loop (server/stale.py, ``StaleNotices.venues``).

In one process the handlers are objects beside the fan-out, so their ``up`` flag is the truth;
a host's sequencer knows handler liveness only through the bus and carries its verdict in the
frame ring's entries instead (ring/venues.py). A venue with no handler at all (a replay file)
is never down: nothing here could say its prices stopped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

__all__ = ["HandlerLike", "down_venues"]


class HandlerLike(Protocol):
    venue: str
    up: bool


def down_venues(handlers: Iterable[HandlerLike]) -> frozenset[str]:
    """The venues none of whose handlers is up (both of a redundant pair, as the design has)."""
    up: dict[str, bool] = defaultdict(bool)
    for h in handlers:
        up[h.venue] |= h.up
    return frozenset(v for v, alive in up.items() if not alive)
