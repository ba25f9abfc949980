"""The frame ring in /dev/shm: one segment per node, written by the sequencer process, read by
every writer process (docs/ring.md). The segment itself (name, header words, lifecycle, sweep)
is ``segment``; the producer and the reader are here.

Segment: a header page (fixed words, then the reader table: one pid per reader index), the
snapshot table (two fixed slots per iid: its last two puts), then the frame slots.

Seqlock (publish): slot word := 2n - 1 (odd: writing), used length, entry bytes, slot word := 2n
(even: published), then the header's head := n and the doorbells. A reader checks the word is
2n, copies ``used`` bytes, and checks the word again: changed means the copy may be torn, a lap.
This relies on stores becoming visible in program order and loads not passing loads, which
x86-64 (TSO) gives; CPython cannot express fences, so on a weakly ordered CPU the re-check is not
a proof. The producer is the only writer of every word except a reader's own pid word. The
snapshot table uses the same protocol per slot (a put bumps the slot's word odd, writes, even);
a reader takes both of an iid's words, picks a slot by their tags, copies that one, and
re-checks that slot's word only (``table.copy_slot``): a moved word means a put overwrote the
copy, so it reads again. The other slot may change meanwhile; that is harmless, since only the
chosen slot's record is returned, and it was whole when the word was even both times.

The snapshot table's slots (two per iid, tagged with their frame's entry) are ``table``'s.

Fence: the header's producer word names the one process that may write (``reopen`` sets it); a
producer checks it before every publish and put and raises ``ProducerFenced`` once another
process took the ring over, so a sequencer that was stopped (SIGSTOP) and replaced never writes
again when it resumes. The host also kills a replaced sequencer and waits for its exit before
the next one attaches; the check covers a producer resumed between those two steps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from monotape.platform.ring import table as snapshot_table
from monotape.platform.ring.doorbell import SocketBell, SocketBells
from monotape.platform.ring.layout import (
    SLOT_HEAD,
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
    fit_entry,
)
from monotape.platform.ring.segment import (
    SHM_DIR,
    W_GENERATION,
    W_HEAD,
    W_PRODUCER,
    W_READERS,
    Segment,
    segment_name,
)

__all__ = ["ProducerFenced", "ShmReader", "ShmRing"]

_SNAPSHOT_SPINS = 64  # a put copies < 100 bytes: a reader racing it retries, then yields
# ... then waits this long for a put the producer was preempted in the middle of (a busy box
# deschedules it for milliseconds): a symbol read as absent is left out of a terminal's
# snapshot while the frames after it carry deltas on a base that terminal never got. A slot
# still odd by then belongs to a producer that is stopped or dead (a restart clears it): that
# slot version is read as absent at once from then on, so it costs one wait, not one a read.
_SNAPSHOT_WAIT_S = 0.1
_SNAPSHOT_NAP_S = 0.0002


class ProducerFenced(RuntimeError):
    """Another process took the ring over (its producer word): this one must not write."""


class ShmRing:
    """The producer: creates the segment, publishes, owns unlink."""

    def __init__(self, segment: Segment) -> None:
        self._seg = segment
        self._pid = int(segment.words[W_PRODUCER])
        self._bells = SocketBells(segment.name, segment.geometry.max_readers)
        self._counters = ProducerCounters()

    @classmethod
    def create(
        cls,
        config: RingConfig | None = None,
        *,
        node_pid: int | None = None,
        tag: str = "ring",
        directory: Path = SHM_DIR,
    ) -> ShmRing:
        """A new segment for the node ``node_pid`` (default: this process); FileExistsError if
        that node already has one under ``tag``."""
        g = (config or RingConfig()).geometry()
        path = directory / segment_name(os.getpid() if node_pid is None else node_pid, tag)
        seg = Segment.create(path, g)
        return cls(seg)

    @classmethod
    def reopen(cls, name: str, *, directory: Path = SHM_DIR) -> ShmRing:
        """A restarted producer takes the segment over: numbering continues after the last
        published entry, the generation moves so every reader reports ``Gap(RESTARTED)``, and a
        snapshot slot the dead producer left half-written (odd word) is cleared (absent)."""
        path = directory / name
        seg = Segment.open(path)
        snapshot_table.clear_torn(seg)
        w = seg.words
        w[W_PRODUCER] = os.getpid()
        w[W_GENERATION] += 1
        return cls(seg)

    @property
    def name(self) -> str:
        return self._seg.name

    @property
    def path(self) -> Path:
        return self._seg.path

    @property
    def geometry(self) -> Geometry:
        return self._seg.geometry

    @property
    def counters(self) -> ProducerCounters:
        return self._counters

    @property
    def head(self) -> int:
        return int(self._seg.words[W_HEAD])

    def _fence(self) -> None:
        owner = int(self._seg.words[W_PRODUCER])
        if owner != self._pid:
            raise ProducerFenced(f"ring {self.name} belongs to pid {owner} now, not {self._pid}")

    def publish(self, entry: Entry) -> PublishOutcome:
        seg = self._seg
        g = seg.geometry
        data, outcome = fit_entry(entry, g.max_entry, self._counters)
        w = seg.words
        self._fence()
        no = w[W_HEAD] + 1
        off = g.slot_offset(no)
        k = off >> 3
        w[k] = 2 * no - 1
        w[k + 1] = len(data)
        seg.mm[off + SLOT_HEAD : off + SLOT_HEAD + len(data)] = data
        w[k] = 2 * no
        w[W_HEAD] = no
        c = self._counters
        c.published += 1
        c.bells_dropped += self._bells.ring(seg.reader_pids())
        return outcome

    def put_snapshot(self, iid: int, version: tuple[int, int], chunk: bytes) -> SnapshotPut:
        g = self._seg.geometry
        if not 0 <= iid < g.snapshot_iids:
            self._counters.snapshots_refused += 1
            return SnapshotPut.OUT_OF_RANGE
        epoch, seq = version
        if not (0 <= epoch < 1 << 64 and 0 <= seq < 1 << 64):
            raise ValueError(f"version {version} is not two u64")
        too_large = len(chunk) > g.max_chunk
        self._fence()
        # tagged with the entry the frame that carries it will be
        tag = self._seg.words[W_HEAD] + 1
        snapshot_table.put(self._seg, iid, tag, (epoch, seq), None if too_large else chunk)
        if too_large:
            self._counters.snapshots_refused += 1
            return SnapshotPut.TOO_LARGE
        return SnapshotPut.STORED

    def put_snapshots(self, puts: Sequence[Put]) -> int:
        # one call for the frame (table.put_many: native when built), tagged as put_snapshot's
        self._fence()
        refused = snapshot_table.put_many(self._seg, self._seg.words[W_HEAD] + 1, puts)
        self._counters.snapshots_refused += refused
        return refused

    def table(self) -> Iterator[tuple[int, SnapshotChunk]]:
        """Every iid the snapshot table holds a chunk for, ascending, with its version (the
        newer of its two slots): what a restarted producer seeds its admit state from
        (terminals may have been shown these versions, so nothing at or below them may be
        published again). Only the producer calls it, so no put races the read (``reopen``
        cleared half-written slots)."""
        return snapshot_table.newest(self._seg)

    def recent(self) -> Iterator[RingFrame]:
        """The entries still in the ring, newest first, until one is missing or overwritten:
        a restarted producer reads back what the dead one published last (the priority records
        since its last frame were shown to terminals too). Only the producer calls it."""
        seg = self._seg
        g = seg.geometry
        w = seg.words
        head = int(w[W_HEAD])
        for no in range(head, max(0, head - g.slots), -1):
            off = g.slot_offset(no)
            k = off >> 3
            if w[k] != 2 * no:
                return
            used = min(w[k + 1], g.max_entry)
            yield decode_entry(seg.mm[off + SLOT_HEAD : off + SLOT_HEAD + used], no)

    def close(self, unlink: bool = True) -> None:
        """Unmap, and (the owner's duty) remove the segment: readers keep their mappings."""
        self._bells.close()
        self._seg.close()
        if unlink:
            self._seg.path.unlink(missing_ok=True)


class ShmReader:
    """One writer process's view: claims reader ``index`` (its doorbell) and follows the ring."""

    def __init__(self, segment: Segment, index: int) -> None:
        g = segment.geometry
        if not 0 <= index < g.max_readers:
            raise ValueError(f"reader index {index} is outside 0..{g.max_readers - 1}")
        self._seg = segment
        self.index = index
        self._bell = SocketBell(segment.name, index)
        w = segment.words
        w[W_READERS + index] = os.getpid()
        self._generation = w[W_GENERATION]
        self._next = w[W_HEAD] + 1
        self._counters = ReaderCounters()
        self._stuck: tuple[int, int] | None = None  # (iid, odd word) a wait gave up on
        # The copy out of a slot: an attribute so a test can race a slow copy with the producer.
        self.copy: Callable[[int, int], bytes] = self._copy

    def _copy(self, start: int, end: int) -> bytes:
        return self._seg.mm[start:end]

    @classmethod
    def attach(cls, name: str, index: int, *, directory: Path = SHM_DIR) -> ShmReader:
        path = directory / name
        seg = Segment.open(path)
        try:
            return cls(seg, index)
        except BaseException:
            seg.close()
            raise

    @property
    def name(self) -> str:
        return self._seg.name

    @property
    def counters(self) -> ReaderCounters:
        return self._counters

    def poll(self) -> RingRead | None:
        seg = self._seg
        w = seg.words
        c = self._counters
        if w[W_GENERATION] != self._generation:
            self._generation = w[W_GENERATION]
            self._next = w[W_HEAD] + 1
            c.gaps += 1
            return Gap(GapCause.RESTARTED)
        no = self._next
        g = seg.geometry
        off = g.slot_offset(no)
        k = off >> 3
        seq = w[k]
        state = slot_state(no, seq)
        if state is SlotState.NOT_YET:
            return None
        if state is SlotState.READY:
            used = min(w[k + 1], g.max_entry)
            data = self.copy(off + SLOT_HEAD, off + SLOT_HEAD + used)
            if w[k] == seq:
                self._next = no + 1
                frame = decode_entry(data, no)
                if frame.kind is EntryKind.GAP:
                    c.gaps += 1
                    return Gap(GapCause.OVERSIZE, frame.frame_no)
                c.frames += 1
                return frame
            c.torn += 1  # overwritten while it was copied
        resume = int(w[W_HEAD])
        self._next = resume
        c.laps += 1
        c.missed += resume - no
        return Lapped(no, resume)

    @property
    def position(self) -> int:
        return self._next - 1

    def snapshot(self, iid: int, at_most: int | None = None) -> SnapshotChunk | None:
        """The newest stored record of ``iid`` whose frame's entry is ``<= at_most``.

        A put in progress (odd word) is always for the frame after the head (the producer puts,
        then publishes), so with ``at_most <= head`` (a reader's ``position``) the record asked
        for is never the one being written: that slot is skipped, no wait. The other slot is
        read under its own seqlock; a put can only reach it after a publish and a second put,
        which moves its word (read again). Only ``at_most=None`` (the newest) waits for a put."""
        g = self._seg.geometry
        if not 0 <= iid < g.snapshot_iids:
            return None
        w = self._seg.words
        k0 = g.snapshot_offset(iid) >> 3
        k1 = k0 + (g.snapshot_slot_bytes >> 3)
        limit = (1 << 64) - 1 if at_most is None else at_most
        deadline = 0.0
        spin = 0
        while True:
            s0, s1 = w[k0], w[k1]
            # the newest written, settled slot whose frame is at most ``limit`` (k == 0: none)
            k, best, s = 0, -1, 0
            if s0 and not s0 & 1 and w[k0 + 1] <= limit:
                k, best, s = k0, w[k0 + 1], s0
            if s1 and not s1 & 1 and best < w[k1 + 1] <= limit:
                k, s = k1, s1
            busy = at_most is None and (s0 | s1) & 1
            if busy and self._stuck == (iid, s0 | s1):  # a wait gave up on this put already
                return None
            if k and not busy:
                settled, got = snapshot_table.copy_slot(self._seg, k, s)
                if settled:
                    return got
            elif not busy:
                if s0 or s1:  # stored, but only newer than what this reader has read
                    self._counters.snapshot_ahead += 1
                return None
            spin += 1
            if spin < _SNAPSHOT_SPINS:
                if spin >= 8:
                    os.sched_yield()  # let the producer finish if it shares our core
                continue
            # the producer was preempted mid-put (a busy box deschedules it for milliseconds)
            now = time.monotonic()
            if not deadline:
                deadline = now + _SNAPSHOT_WAIT_S
            elif now > deadline:
                self._counters.snapshot_busy += 1
                self._stuck = (iid, s0 | s1)
                return None
            time.sleep(_SNAPSHOT_NAP_S)

    def fileno(self) -> int:
        return self._bell.fileno()

    def drain_bell(self) -> int:
        return self._bell.drain()

    def close(self) -> None:
        """Leave the reader table and unmap; the segment stays (the producer owns it)."""
        seg = self._seg
        if not seg.mm.closed:
            k = W_READERS + self.index
            if seg.words[k] == os.getpid():
                seg.words[k] = 0
        self._bell.close()
        seg.close()
