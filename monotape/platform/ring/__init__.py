"""The frame ring (docs/ring.md): the sequencer publishes each frame's encoded records once, every
writer reads them. ``protocol`` is the boundary and its guarantees; ``layout`` the bytes (pure);
``memory`` the in-process ring; ``shm`` the /dev/shm ring over a ``segment`` (name, lifecycle,
sweep); ``doorbell`` the wake-ups; ``driver`` the reader's asyncio driver."""

from monotape.platform.ring.ages import TickAges
from monotape.platform.ring.driver import RingFollower
from monotape.platform.ring.layout import Entry, EntryKind, Records, RingConfig, RingFrame
from monotape.platform.ring.memory import MemoryReader, MemoryRing
from monotape.platform.ring.protocol import (
    Gap,
    GapCause,
    Lapped,
    ProducerCounters,
    PublishOutcome,
    ReaderCounters,
    RingProducer,
    RingRead,
    RingReader,
    SnapshotChunk,
    SnapshotPut,
)
from monotape.platform.ring.segment import segment_name, sweep_leftovers
from monotape.platform.ring.shm import ShmReader, ShmRing

__all__ = [
    "Entry",
    "EntryKind",
    "Gap",
    "GapCause",
    "Lapped",
    "MemoryReader",
    "MemoryRing",
    "ProducerCounters",
    "PublishOutcome",
    "ReaderCounters",
    "Records",
    "RingConfig",
    "RingFollower",
    "RingFrame",
    "RingProducer",
    "RingRead",
    "RingReader",
    "ShmReader",
    "ShmRing",
    "SnapshotChunk",
    "SnapshotPut",
    "TickAges",
    "segment_name",
    "sweep_leftovers",
]
