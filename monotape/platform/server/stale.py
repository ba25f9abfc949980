"""STALE's driver: tells a writer's terminals when their prices stop, and which.

core/staleness.py decides; this only moves its decisions to the terminals (the writer's
``publish_stale``, once framed for all of them) and runs the check on a cadence shorter than a
frame interval, so a stalled grid is announced within ~2.5 frame intervals of the last frame
(100 ms at 25 Hz; the design's bound is 200 ms). The down venues come from the ingest side,
through one call, ``set_down_venues`` (the one-process node: node/node.py; a writer process:
the frame ring's entries, host/ring_feed.py). docs/wire.md (STALE) says what terminals do.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence

from monotape.clock import Clock
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.staleness import StaleState
from monotape.platform.model import Instrument
from monotape.platform.server.connection import Connection
from monotape.platform.server.writer import Writer

__all__ = ["StaleNotices"]


class StaleNotices:
    def __init__(
        self, writer: Writer, index: SubscriptionIndex, universe: Sequence[Instrument], clock: Clock
    ) -> None:
        self.writer = writer
        self.watch = writer.stale
        self._index = index
        self._clock = clock
        iids: dict[str, list[int]] = defaultdict(list)
        for ins in universe:
            iids[ins.venue].append(ins.iid)
        self._venue_iids = dict(iids)
        # Where the loop asks for the down venues, when the ingest side is in this process
        # (node/venue_watch.py); None: someone calls ``set_down_venues`` (a writer process's
        # ring feed, from each frame's entry).
        self.venues: Callable[[], Collection[str]] | None = None

    def set_down_venues(self, venues: Collection[str]) -> bool:
        """The ingest side's call: ``venues`` are the venues whose feed handlers are all down
        now (an empty set: none). Cheap when nothing changed (a set comparison), so it may be
        called once per frame. Returns whether the terminals were told something new."""
        known = [v for v in venues if v in self._venue_iids]  # a venue this node streams
        state = self.watch.venues_down(known, self._clock.wall_ns() // 1_000_000)
        if state is None:
            return False
        self.writer.publish_stale(state)
        return True

    def check(self) -> bool:
        """Announce a stalled grid once (the next frame clears it at every terminal)."""
        state = self.watch.check(self._clock.now_ns())
        if state is None:
            return False
        self.writer.publish_stale(state)
        return True

    def greet(self, conn: Connection) -> None:
        """A terminal that connects while something is stale learns it right after HELLO."""
        state = self.watch.state
        if state.stale:
            self.writer.answer(conn, self.writer.stale_wire(state))

    async def run(self) -> None:
        """The grid check (and the down venues, from ``venues``), twice per frame interval."""
        interval_s = self.watch.frame_ns / 2e9
        while True:
            await asyncio.sleep(interval_s)
            if self.venues is not None:
                self.set_down_venues(self.venues())
            self.check()

    # -- what the collectors read -------------------------------------------------------------
    @property
    def state(self) -> StaleState:
        return self.watch.state

    def stale_terminals(self) -> int:
        """Terminals whose screen holds at least one stale symbol now: every terminal while
        the grid is stalled, else those subscribed to a symbol of a down venue."""
        state = self.watch.state
        index = self._index
        if state.grid_since_ms:
            return index.connection_count
        told: set[int] = set()
        for venue in state.venue_names:
            for iid in self._venue_iids.get(venue, ()):
                for sig in index.signatures_of(iid):
                    told.update(index.connections(sig))
        return len(told)
