"""The frame ring -> a writer process's server: what each ring read becomes for its terminals.

A writer process holds no sequencer: the sequencer process encoded every changed record once
and published the frame in the ring (docs/ring.md). Here, per read (``RingFeed.on_read``, driven
by ``ring.driver.RingFollower``):

- a FRAME: keep the records of symbols this writer's terminals watch, plan one payload per
  signature from those bytes (``core/planner.plan_chunks``: nothing re-encoded) and write it;
  its writes are this process's ``write`` values, and its tick ages give the ``tick_to_write``
  of the ticks its terminals were sent (``StageStamps.written_frame``);
- a PRIORITY entry: each full record to the terminals of this writer that hold it in an order
  ticket, framed once for them all;
- every FRAME's ``stale_venues`` (the sequencer's venues whose handlers are all down, as
  ring/venues.py bits) to ``StaleNotices.set_down_venues``: STALE at the terminals on a change;
- ``Lapped`` or ``Gap``: this writer cannot know which deltas its terminals missed, so every
  terminal is in a gap: the next thing it gets is a snapshot of its subscriptions, joined from
  the ring's shared snapshot table (``RingSnapshots``, a memcpy per symbol: nothing encoded).

Every snapshot (hydration, gap, lap, restart) is at the versions of the frames this writer has
read, as the one-process node's is at the last frame written: the sequencer puts a symbol's
record before it publishes the frame that carries the change, so the table's newest record may
be a frame ahead of this writer; a terminal hydrated from it would then get that frame's delta,
on a base it does not hold and at or below the version it holds, which every SDK counts as a
regression. The table keeps each symbol's last two records, tagged with their frame's ring
entry, and ``RingSnapshots`` asks for the newest at or before the reader's ``position``. A
symbol whose two records are both newer (this writer is more than a frame behind) is left out:
its terminal gets a gap on the next delta and asks for it again, never a regression.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.planner import Pacer, plan_chunks
from monotape.platform.core.stamps import FrameTicks, StageStamps
from monotape.platform.ring.ages import TickAges
from monotape.platform.ring.layout import EntryKind, Records, RingFrame
from monotape.platform.ring.protocol import Gap, Lapped, RingRead, RingReader
from monotape.platform.ring.venues import VenueBits
from monotape.platform.server.stale import StaleNotices
from monotape.platform.server.writer import Writer
from monotape.platform.wire import codec

__all__ = ["FeedCounters", "RingFeed", "RingSnapshots", "ticks_of", "watched"]


class RingSnapshots:
    """``core.snapshots.Snapshots`` over the ring's shared table: the full record the sequencer
    stored per symbol at the frames this writer has read (``reader.position``), copied out
    (never encoded here)."""

    def __init__(self, reader: RingReader) -> None:
        self._reader = reader

    def chunk(self, iid: int) -> bytes | None:
        reader = self._reader
        stored = reader.snapshot(iid, at_most=reader.position)
        return None if stored is None else stored.chunk

    def snapshot(self, frame_no: int, iids: Iterable[int]) -> bytes:
        """A WebSocket-framed SNAPSHOT of ``iids`` (ascending, symbols with no chunk left out)."""
        chunks = [c for c in map(self.chunk, sorted(iids)) if c is not None]
        return codec.ws_binary_frame(
            codec.snapshot_header(frame_no, len(chunks)) + b"".join(chunks)
        )


@dataclass(slots=True)
class FeedCounters:
    """What the feed did, in plain ints (the writer's collector exports them)."""

    frames: int = 0  # FRAME entries planned and written
    priority_entries: int = 0
    priority_writes: int = 0
    gaps: int = 0  # laps and gaps that put every terminal into a gap
    gapped_terminals: int = 0  # terminals put into a gap by them


class RingFeed:
    """Turns ring reads into the writer's calls. ``stamps`` records each frame's writes (the
    ``write`` stage, from the sequencer's publish, so the ring hop and the plan count) and the
    ``tick_to_write`` of the frame's ticks this writer sent."""

    def __init__(
        self,
        writer: Writer,
        index: SubscriptionIndex,
        pacer: Pacer | None = None,
        stamps: StageStamps | None = None,
        stale: tuple[StaleNotices, VenueBits] | None = None,
    ) -> None:
        self.writer = writer
        self.index = index
        self.pacer = pacer
        self._stamps = stamps
        self._stale = stale  # where each frame's down venues go, and how to read their bits
        self._stale_mask = 0
        self.counters = FeedCounters()

    def on_read(self, read: RingRead) -> None:
        if isinstance(read, RingFrame):
            if len(read.priority):
                self._priority(read)
            if read.kind is EntryKind.FRAME:
                self._frame(read)
        elif isinstance(read, (Lapped, Gap)):
            self.gap()

    def gap(self) -> int:
        """Every terminal of this writer into a gap (snapshot next, from the shared table)."""
        c = self.counters
        c.gaps += 1
        n = self.writer.gap_all()
        c.gapped_terminals += n
        return n

    def _frame(self, read: RingFrame) -> None:
        if self._stale is not None and read.stale_venues != self._stale_mask:
            # before the frame: a venue that recovered is cleared ahead of its first prices
            notices, bits = self._stale
            notices.set_down_venues(bits.names(read.stale_venues))
            self._stale_mask = read.stale_venues
        chunks = watched(read.records, self.index)
        plan = plan_chunks(read.frame_no, chunks, self.index, self.pacer)
        published = self.writer.publish_plan(plan)
        self.counters.frames += 1
        stamps, writer = self._stamps, self.writer
        if stamps is not None and writer.write_latencies_ns:
            # The sequencer published at read.published_ns (the same system-wide monotonic
            # clock); the writer's latencies start at its own publish.
            hop = max(0, published - read.published_ns)
            stamps.written_frame(
                np.asarray(writer.write_latencies_ns, dtype=np.int64) + hop,
                writer.direct_writes,
                read.published_ns,
                writer.written_iids,
                len(read.records),
                ticks_of(read.ages),
            )

    def _priority(self, read: RingFrame) -> None:
        records = read.priority
        has_priority = self.index.has_priority
        wanted = {iid: records.chunk(i) for i, iid in enumerate(records.iids) if has_priority(iid)}
        self.counters.priority_entries += 1
        if wanted:
            self.counters.priority_writes += self.writer.publish_priority_chunks(
                wanted, read.published_ns
            )


def ticks_of(ages: TickAges | None) -> FrameTicks | None:
    """The entry's tick ages as arrays (views of the read's copy: nothing copied)."""
    if ages is None:
        return None
    return FrameTicks(
        np.frombuffer(ages.decoded, np.int64),
        np.frombuffer(ages.ticks, np.uint32).astype(np.int64),
        np.frombuffer(ages.iids, np.uint16),
    )


def watched(records: Records, index: SubscriptionIndex) -> dict[int, bytes]:
    """The records of symbols some terminal of this writer watches (iid -> record), sliced out
    of the ring's copy; the others are never touched."""
    has = index.has_subscribers
    body = records.body  # one copy of the section; the index as lists: no per-item views
    out: dict[int, bytes] = {}
    start = 0
    for iid, end in zip(records.iids.tolist(), records.ends.tolist(), strict=True):
        if has(iid):
            out[iid] = body[start:end]
        start = end
    return out
