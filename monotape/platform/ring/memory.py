"""The frame ring inside one process: the same slots, bytes and outcomes as the /dev/shm ring,
held in Python lists. Used by tests and by the one-process node, where a writer follows the
sequencer in the same process.

Entries are stored encoded (``layout.encode_entry``), so a reader gets the same views a
/dev/shm reader does and the byte budget is the same; only the copy out of shared memory and the
re-check after it are missing (one thread at a time: a read can never be torn here).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from monotape.platform.ring.doorbell import EventfdBell
from monotape.platform.ring.layout import (
    Entry,
    EntryKind,
    Geometry,
    RingConfig,
    RingFrame,
    SlotState,
    decode_entry,
    slot_state,
)
from monotape.platform.ring.protocol import (
    Gap,
    GapCause,
    Lapped,
    ProducerCounters,
    PublishOutcome,
    Put,
    ReaderCounters,
    RingRead,
    SnapshotChunk,
    SnapshotPut,
    check_puts,
    fit_entry,
)

__all__ = ["MemoryReader", "MemoryRing"]


class MemoryRing:
    """The producer, and the factory of this process's readers."""

    def __init__(self, config: RingConfig | None = None) -> None:
        self._geometry = (config or RingConfig()).geometry()
        n = self._geometry.slots
        self._seqs = [0] * n  # the slot's sequence word: 2 * entry number once published
        self._slots: list[bytes] = [b""] * n
        # per iid the last two puts, oldest first: (entry of the frame that carries it, record;
        # None for a refused one, which reads as absent)
        self._snapshots: dict[int, list[tuple[int, SnapshotChunk | None]]] = {}
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
        data, outcome = fit_entry(entry, self._geometry.max_entry, self._counters)
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
        too_large = len(chunk) > self._geometry.max_chunk
        stored = None if too_large else SnapshotChunk(version, bytes(chunk))
        tag = self.head + 1  # the entry the frame that carries it will be
        held = self._snapshots.setdefault(iid, [])
        if held and held[-1][0] == tag:
            held[-1] = (tag, stored)  # the same frame's record again: replaces it
        else:
            held.append((tag, stored))
            del held[:-2]
        if too_large:
            self._counters.snapshots_refused += 1
            return SnapshotPut.TOO_LARGE
        return SnapshotPut.STORED

    def put_snapshots(self, puts: Sequence[Put]) -> int:
        check_puts(puts)
        stored = SnapshotPut.STORED
        return sum(self.put_snapshot(iid, (e, s), c) is not stored for iid, e, s, c in puts)

    def table(self) -> Iterator[tuple[int, SnapshotChunk]]:
        """Every iid the snapshot table holds a chunk for, ascending (``ShmRing.table``)."""
        for iid in sorted(self._snapshots):
            newest = self._snapshots[iid][-1][1]
            if newest is not None:
                yield iid, newest

    def recent(self) -> Iterator[RingFrame]:
        """The entries still in the ring, newest first (``ShmRing.recent``)."""
        for no in range(self.head, max(0, self.head - self._geometry.slots), -1):
            state, data = self._read(no)
            if state is not SlotState.READY:
                return
            yield decode_entry(data, no)

    def close(self) -> None:
        for reader in list(self._readers.values()):
            reader.close()

    # -- what readers see ----------------------------------------------------------------------
    def _read(self, no: int) -> tuple[SlotState, bytes]:
        slot = (no - 1) % self._geometry.slots
        state = slot_state(no, self._seqs[slot])
        return state, self._slots[slot] if state is SlotState.READY else b""

    def _snapshot(self, iid: int, at_most: int | None) -> tuple[SnapshotChunk | None, bool]:
        """The newest record tagged ``<= at_most``, and whether both were too new."""
        held = self._snapshots.get(iid)
        if not held:
            return None, False
        for tag, stored in reversed(held):
            if at_most is None or tag <= at_most:
                return stored, False
        return None, True

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

    @property
    def position(self) -> int:
        return self._next - 1

    def snapshot(self, iid: int, at_most: int | None = None) -> SnapshotChunk | None:
        stored, ahead = self._ring._snapshot(iid, at_most)
        if ahead:
            self._counters.snapshot_ahead += 1
        return stored

    def fileno(self) -> int:
        return self.bell.fileno()

    def drain_bell(self) -> int:
        return self.bell.drain()

    def close(self) -> None:
        self._ring._forget(self.index)
        self.bell.close()
