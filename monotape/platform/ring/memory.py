"""The frame ring inside one process: the same slots, bytes and outcomes as the /dev/shm ring,
held in Python lists. Used by tests and by the one-process node, where a writer follows the
sequencer in the same process.

Entries are stored encoded (``layout.encode_entry``), so a reader gets the same views a
/dev/shm reader does and the byte budget is the same; only the copy out of shared memory and the
re-check after it are missing (one thread at a time: a read can never be torn here).
"""

from __future__ import annotations

from monotape.platform.ring.doorbell import EventfdBell
from monotape.platform.ring.layout import (
    Entry,
    EntryKind,
    Geometry,
    RingConfig,
    SlotState,
    decode_entry,
    encode_entry,
    gap_entry,
    slot_state,
)
from monotape.platform.ring.protocol import (
    Gap,
    GapCause,
    Lapped,
    ProducerCounters,
    PublishOutcome,
    ReaderCounters,
    RingRead,
    SnapshotChunk,
    SnapshotPut,
)

__all__ = ["MemoryReader", "MemoryRing"]


class MemoryRing:
    """The producer, and the factory of this process's readers."""

    def __init__(self, config: RingConfig | None = None) -> None:
        self._geometry = (config or RingConfig()).geometry()
        n = self._geometry.slots
        self._seqs = [0] * n  # the slot's sequence word: 2 * entry number once published
        self._slots: list[bytes] = [b""] * n
        self._snapshots: dict[int, SnapshotChunk] = {}
        self._readers: dict[int, MemoryReader] = {}
        self.head = 0
        self._counters = ProducerCounters()

    @property
    def geometry(self) -> Geometry:
        return self._geometry

    @property
    def counters(self) -> ProducerCounters:
        return self._counters

    def reader(self, index: int) -> MemoryReader:
        if not 0 <= index < self._geometry.max_readers or index in self._readers:
            raise ValueError(f"reader index {index} is out of range or taken")
        reader = MemoryReader(self, index)
        self._readers[index] = reader
        return reader

    def publish(self, entry: Entry) -> PublishOutcome:
        data = encode_entry(entry)
        outcome = PublishOutcome.PUBLISHED
        if len(data) > self._geometry.max_entry:
            data = gap_entry(entry.frame_no, entry.boundary_ns, entry.published_ns)
            outcome = PublishOutcome.OVERSIZE
            self._counters.oversize += 1
        no = self.head + 1
        slot = (no - 1) % self._geometry.slots
        self._slots[slot] = data
        self._seqs[slot] = 2 * no
        self.head = no
        self._counters.published += 1
        for reader in self._readers.values():
            if not reader.bell.ring():
                self._counters.bells_dropped += 1
        return outcome

    def put_snapshot(self, iid: int, version: tuple[int, int], chunk: bytes) -> SnapshotPut:
        if not 0 <= iid < self._geometry.snapshot_iids:
            self._counters.snapshots_refused += 1
            return SnapshotPut.OUT_OF_RANGE
        if len(chunk) > self._geometry.max_chunk:
            self._snapshots.pop(iid, None)
            self._counters.snapshots_refused += 1
            return SnapshotPut.TOO_LARGE
        self._snapshots[iid] = SnapshotChunk(version, bytes(chunk))
        return SnapshotPut.STORED

    def close(self) -> None:
        for reader in list(self._readers.values()):
            reader.close()

    # -- what readers see ----------------------------------------------------------------------
    def _read(self, no: int) -> tuple[SlotState, bytes]:
        slot = (no - 1) % self._geometry.slots
        state = slot_state(no, self._seqs[slot])
        return state, self._slots[slot] if state is SlotState.READY else b""

    def _snapshot(self, iid: int) -> SnapshotChunk | None:
        return self._snapshots.get(iid)

    def _forget(self, index: int) -> None:
        self._readers.pop(index, None)


class MemoryReader:
    def __init__(self, ring: MemoryRing, index: int) -> None:
        self._ring = ring
        self.index = index
        self.bell = EventfdBell()
        self._next = ring.head + 1
        self._counters = ReaderCounters()

    @property
    def counters(self) -> ReaderCounters:
        return self._counters

    def poll(self) -> RingRead | None:
        no = self._next
        state, data = self._ring._read(no)
        if state is SlotState.NOT_YET:
            return None
        c = self._counters
        if state is SlotState.LAPPED:
            resume = self._ring.head
            self._next = resume
            c.laps += 1
            c.missed += resume - no
            return Lapped(no, resume)
        self._next = no + 1
        frame = decode_entry(data, no)
        if frame.kind is EntryKind.GAP:
            c.gaps += 1
            return Gap(GapCause.OVERSIZE, frame.frame_no)
        c.frames += 1
        return frame

    def snapshot(self, iid: int) -> SnapshotChunk | None:
        return self._ring._snapshot(iid)

    def fileno(self) -> int:
        return self.bell.fileno()

    def drain_bell(self) -> int:
        return self.bell.drain()

    def close(self) -> None:
        self._ring._forget(self.index)
        self.bell.close()
