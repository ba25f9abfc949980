"""The frame ring's boundary: one producer (the sequencer) publishes entries, many readers (the
writers) follow them, and a shared snapshot table holds each symbol's last two full records,
each tagged with the entry of the frame that carries it.

Two implementations keep these guarantees: ``memory.MemoryRing`` (one process: tests and the
one-process node) and ``shm.ShmRing`` (a segment in /dev/shm shared by processes).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Protocol, TypeAlias

from monotape.platform.ring.layout import Entry, Geometry, RingFrame, encode_entry, gap_entry

__all__ = [
    "Gap",
    "GapCause",
    "Lapped",
    "ProducerCounters",
    "PublishOutcome",
    "Put",
    "ReaderCounters",
    "RingProducer",
    "RingRead",
    "RingReader",
    "SnapshotChunk",
    "SnapshotPut",
    "check_puts",
    "fit_entry",
]


class PublishOutcome(Enum):
    PUBLISHED = "published"
    # Published without the frame's tick ages: with them it did not fit a slot (the writers
    # record no tick_to_write for it; everything else is as PUBLISHED)
    AGES_DROPPED = "ages_dropped"
    # The entry did not fit a slot: a GAP entry went out in its place, so every reader
    # snapshots next (the snapshot table already holds the frame's symbols, see below).
    OVERSIZE = "oversize"


class SnapshotPut(Enum):
    STORED = "stored"
    TOO_LARGE = "too_large"  # chunk over the table's chunk size: the iid reads as absent
    OUT_OF_RANGE = "out_of_range"  # iid at or past the table's capacity: nothing stored


# One snapshot put of a frame's batch (``put_snapshots``): (iid, epoch, seq, chunk)
Put: TypeAlias = "tuple[int, int, int, bytes]"


class GapCause(Enum):
    OVERSIZE = "oversize"  # the producer published a frame that did not fit a slot as a gap
    RESTARTED = "restarted"  # the producer restarted: what it published before may be lost


@dataclass(frozen=True, slots=True)
class Lapped:
    """The producer overwrote entries ``first`` .. ``resume - 1`` before this reader read them
    (it fell more than a ring behind, or a copy was overwritten while it was taken: a torn read).
    The reader continues at ``resume``, the newest entry published; for its terminals this is a
    gap: snapshot next."""

    first: int
    resume: int

    @property
    def missed(self) -> int:
        return self.resume - self.first


@dataclass(frozen=True, slots=True)
class Gap:
    """An entry every reader sees as a gap (snapshot next); ``frame_no`` when it names one."""

    cause: GapCause
    frame_no: int | None = None


RingRead = RingFrame | Lapped | Gap


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    version: tuple[int, int]  # (epoch, seq) of the record, as the producer stored it
    chunk: bytes


@dataclass(slots=True)
class ProducerCounters:
    """Plain ints on the publish path; exported at scrape time as ``metric_names.RING_*``."""

    published: int = 0  # entries, gaps included
    oversize: int = 0  # frames published as a gap
    ages_dropped: int = 0  # frames published without their tick ages (they did not fit)
    bells_dropped: int = 0  # a reader's doorbell full (it is stopped or behind) or gone
    snapshots_refused: int = 0  # TOO_LARGE or OUT_OF_RANGE


@dataclass(slots=True)
class ReaderCounters:
    """Plain ints on the read path; exported at scrape time as ``metric_names.RING_*{writer}``."""

    frames: int = 0  # entries read (FRAME and PRIORITY)
    laps: int = 0
    missed: int = 0  # entries lost to laps
    torn: int = 0  # laps found by the re-check after a copy (counted in laps too)
    gaps: int = 0  # GAP entries and producer restarts
    snapshot_busy: int = 0  # a snapshot read that kept racing its writer: read as absent
    # a symbol left out of a snapshot: both stored records are newer than this reader's
    # position (it is more than a frame behind the producer); its terminal resyncs on a gap
    snapshot_ahead: int = 0


def check_puts(puts: Sequence[Put]) -> None:
    """What ``put_snapshots`` checks before it stores anything: each item a tuple (iid, epoch,
    seq, chunk), the iid an index, the version two u64, the chunk a buffer. Raises TypeError or
    ValueError naming the item (ring/_table.c checks the same in C)."""
    for i, item in enumerate(puts):
        if type(item) is not tuple or len(item) != 4:
            raise TypeError(f"put {i} must be a tuple (iid, epoch, seq, chunk)")
        iid, epoch, seq, chunk = item
        operator.index(iid)
        for what, v in (("epoch", epoch), ("seq", seq)):
            if not isinstance(v, int):
                raise TypeError(f"put {i}: {what} must be an int")
            if not 0 <= v < 1 << 64:
                raise ValueError(f"put {i}: {what} is not a u64")
        memoryview(chunk).release()  # a buffer, as the native put holds


def fit_entry(
    entry: Entry, max_entry: int, counters: ProducerCounters
) -> tuple[bytes, PublishOutcome]:
    """The bytes a producer writes into a slot of ``max_entry`` bytes for ``entry``, and the
    outcome, counted. The tick ages never cost a frame its records: they are the first thing
    left out; a frame too large even without them goes out as a GAP entry."""
    data = encode_entry(entry)
    if len(data) <= max_entry:
        return data, PublishOutcome.PUBLISHED
    if entry.ages is not None:
        data = encode_entry(replace(entry, ages=None))
        if len(data) <= max_entry:
            counters.ages_dropped += 1
            return data, PublishOutcome.AGES_DROPPED
    counters.oversize += 1
    return gap_entry(entry.frame_no, entry.boundary_ns, entry.published_ns), PublishOutcome.OVERSIZE


class RingProducer(Protocol):
    """The one writer of a ring.

    Guarantees: entries are numbered 1, 2, ... in publish order and a reader receives them in
    that order, each exactly once and byte for byte, or learns which it lost (``Lapped``). The
    ring is bounded in bytes (``geometry``), so a slow or stopped reader never holds the
    producer back: ``publish`` never waits, it overwrites the oldest slot, and it rings each
    reader's doorbell without blocking (a full doorbell is dropped: that reader already has a
    wake-up pending). An entry larger than a slot is never a crash: ``PublishOutcome.OVERSIZE``.

    Snapshot table: ``put_snapshot`` before publishing the frame that carries the change. The
    table keeps an iid's last two puts, each tagged with the number the next ``publish`` gets
    (the entry of the frame that carries it; two puts with one tag: the second replaces the
    first), so a reader asks for the version of the frames it has read (``at_most``), never a
    newer one its next delta would go backwards from."""

    @property
    def geometry(self) -> Geometry: ...

    @property
    def counters(self) -> ProducerCounters: ...

    def publish(self, entry: Entry) -> PublishOutcome: ...

    def put_snapshot(self, iid: int, version: tuple[int, int], chunk: bytes) -> SnapshotPut: ...

    def put_snapshots(self, puts: Sequence[Put]) -> int:
        """``put_snapshot`` of each (iid, epoch, seq, chunk), in order, in one call (a frame's
        puts): the same table, the same counters. Returns how many were refused. Every item
        is checked first (``check_puts``): a malformed one (a version that is not two u64:
        ValueError) raises, and nothing of the batch is stored."""
        ...

    def table(self) -> Iterator[tuple[int, SnapshotChunk]]:
        """What the snapshot table holds, by ascending iid: a restarted producer's seed."""
        ...

    def recent(self) -> Iterator[RingFrame]:
        """The entries still in the ring, newest first: a restarted producer's seed too."""
        ...

    def close(self) -> None: ...


class RingReader(Protocol):
    """One follower of a ring (a writer process). Starts after the newest entry at attach.

    ``poll`` never blocks: the next entry, a ``Lapped`` or ``Gap`` outcome, or None when
    nothing new is published. Sleep on ``fileno()`` (readable when the producer rang this
    reader's doorbell: ``driver.RingFollower`` does it with ``loop.add_reader``), then
    ``drain_bell`` and ``poll`` until None: a publish after the drain rings again, so no
    wake-up is lost."""

    @property
    def counters(self) -> ReaderCounters: ...

    def poll(self) -> RingRead | None: ...

    @property
    def position(self) -> int:
        """The entry this reader has read up to: the last one ``poll`` returned, ``resume - 1``
        after a ``Lapped`` (entry ``resume`` is read next), the head after a restart."""
        ...

    def snapshot(self, iid: int, at_most: int | None = None) -> SnapshotChunk | None:
        """The newest stored record of ``iid`` whose frame's entry is ``<= at_most`` (None: the
        newest of all). None when the table holds none such (absent, refused, or both stored
        records newer: counted as ``snapshot_ahead``)."""
        ...

    def fileno(self) -> int: ...

    def drain_bell(self) -> int: ...

    def close(self) -> None: ...
