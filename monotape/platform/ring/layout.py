"""The frame ring's bytes, no I/O: sizes derived from one byte budget, the entry a slot holds,
and what a slot's sequence word says to a reader (docs/ring.md).

An entry is laid out so a writer slices it without decoding anything (no pickling): a fixed
header, then per section (the frame's records, then its priority records) an array of iids and
an array of end offsets (struct of arrays: record ``i`` is ``body[ends[i-1]:ends[i]]``, the
(iid, offset, len) index in two flat u32 arrays that ``array``/``memoryview`` read at C speed),
then the frame's tick ages (``TickAges``: when its ticks were decoded, for the writers'
``tick_to_write`` stage), then the two bodies. The records are opaque bytes here: the wire codec
encodes them.

Native byte order throughout: the ring never leaves the host that wrote it.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import accumulate
from types import MappingProxyType
from typing import Final

from monotape.platform.ring.ages import TickAges

__all__ = [
    "ENTRY_HEAD",
    "HEADER_BYTES",
    "LAYOUT_VERSION",
    "MAGIC",
    "NO_RECORDS",
    "SLOT_HEAD",
    "SNAPSHOT_HEAD",
    "Entry",
    "EntryKind",
    "Geometry",
    "LayoutError",
    "Records",
    "RingConfig",
    "RingFrame",
    "SlotState",
    "TickAges",
    "decode_entry",
    "encode_entry",
    "gap_entry",
    "slot_state",
]

MAGIC: Final = int.from_bytes(b"MTRING01", "little")
# 2: two snapshot slots per iid, each tagged with its frame's entry; 3: an entry's tick ages
LAYOUT_VERSION: Final = 3
HEADER_BYTES: Final = 4096  # the segment header and the reader table: one page
SLOT_HEAD: Final = 16  # seq u64, used u64
# seq u64, entry u64 (the ring entry of the frame that carries it), epoch u64, version seq u64,
# len u64
SNAPSHOT_HEAD: Final = 40
MAX_READERS: Final = 64  # reader table words that fit the header page beside the 16 fixed ones
_MIB: Final = 1 << 20

# frame_no, boundary_ns, published_ns, records, records body bytes, priority records, priority
# body bytes, age runs, aged ticks, kind, stale venues (a bit per venue whose handlers are all
# down, ring/venues.py: it sits in what was padding, so an entry without it reads 0, none);
# 56 bytes keeps the u32 arrays after it 4-byte aligned, and the ages' i64 array after those
# (8 bytes per record) 8-byte aligned.
ENTRY_HEAD: Final = struct.Struct("=qqqIIIIIIB3xI")
_U32: Final = "I"  # array typecode: 4 bytes on every platform CPython supports on Linux
_U32_MAX: Final = 0xFFFFFFFF
assert array(_U32).itemsize == 4


class LayoutError(ValueError):
    """Bytes that are not an entry of this layout (a truncated or foreign buffer)."""


class EntryKind(IntEnum):
    FRAME = 1  # a frame boundary: its changed records (plus priority records, if any)
    PRIORITY = 2  # order-ticket updates published at once, between boundaries
    GAP = 3  # a frame that did not fit a slot: every reader treats it as a gap (snapshot next)


NO_RECORDS: Final[Mapping[int, bytes]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class RingConfig:
    """The ring's byte budget; slot count and table size follow from it (``Geometry``).

    Defaults: 64 MiB in all. A slot of 256 KiB holds a frame of every one of the design's 2,400
    instruments (a delta record is at most 54 bytes, a full record 61, plus 8 bytes of index),
    so at 25 frames/s the ring holds ~9 s of frames, well past a writer's GC pause or a 3 s
    SIGSTOP. The snapshot table covers the whole uint16 wire id space with two slots per id
    (the last two puts, so a writer one frame behind still finds the version it is at:
    65,536 × 2 × 104 B = 13 MiB, pages of unused ids are never touched, so never resident)."""

    total_bytes: int = 64 * _MIB
    slot_bytes: int = 256 * 1024
    snapshot_iids: int = 65_536
    snapshot_chunk_bytes: int = 64  # a full record is at most 61 bytes (tests/ring/test_layout)
    max_readers: int = 16

    def geometry(self) -> Geometry:
        return Geometry.of(self)


@dataclass(frozen=True, slots=True)
class Geometry:
    """Where everything sits in a segment of ``total_bytes``: header page, snapshot table, slots.
    Every region starts 8-byte aligned, so each u64 word is one aligned load or store."""

    total_bytes: int
    slot_bytes: int
    slots: int
    snapshot_iids: int
    snapshot_slot_bytes: int  # one of an iid's two snapshot slots
    max_readers: int
    table_offset: int = field(default=HEADER_BYTES)

    @classmethod
    def of(cls, config: RingConfig) -> Geometry:
        if not 1 <= config.max_readers <= MAX_READERS:
            raise ValueError(f"max_readers must be 1..{MAX_READERS}, got {config.max_readers}")
        if config.slot_bytes < SLOT_HEAD + ENTRY_HEAD.size or config.slot_bytes % 64:
            raise ValueError(f"slot_bytes must be a multiple of 64 >= 128: {config.slot_bytes}")
        if config.snapshot_iids < 1 or config.snapshot_chunk_bytes < 8:
            raise ValueError("the snapshot table needs at least one iid of at least 8 bytes")
        snap = SNAPSHOT_HEAD + -(-config.snapshot_chunk_bytes // 8) * 8
        table = -(-(config.snapshot_iids * 2 * snap) // 4096) * 4096
        slots = (config.total_bytes - HEADER_BYTES - table) // config.slot_bytes
        if slots < 2:
            raise ValueError(
                f"{config.total_bytes} bytes leave {slots} slot(s) of {config.slot_bytes} after "
                f"the {table}-byte snapshot table: a ring needs at least 2"
            )
        return cls(
            total_bytes=config.total_bytes,
            slot_bytes=config.slot_bytes,
            slots=slots,
            snapshot_iids=config.snapshot_iids,
            snapshot_slot_bytes=snap,
            max_readers=config.max_readers,
        )

    @property
    def slots_offset(self) -> int:
        return (
            self.table_offset
            + -(-(self.snapshot_iids * 2 * self.snapshot_slot_bytes) // 4096) * 4096
        )

    @property
    def max_entry(self) -> int:
        """The largest entry a slot holds; a larger frame is published as a gap."""
        return self.slot_bytes - SLOT_HEAD

    @property
    def max_chunk(self) -> int:
        return self.snapshot_slot_bytes - SNAPSHOT_HEAD

    def slot_offset(self, no: int) -> int:
        """Entry ``no`` (1, 2, ...) lives in slot ``(no - 1) % slots``."""
        return self.slots_offset + ((no - 1) % self.slots) * self.slot_bytes

    def snapshot_offset(self, iid: int, which: int = 0) -> int:
        """Slot ``which`` (0 or 1) of ``iid``: the two are side by side."""
        return self.table_offset + (2 * iid + which) * self.snapshot_slot_bytes


@dataclass(frozen=True, slots=True)
class Entry:
    """What the producer publishes: one frame, or the priority records of a moment between two
    frames. Records are ``iid -> encoded record`` (the planner's ``chunks``), kept in order."""

    kind: EntryKind
    frame_no: int
    boundary_ns: int
    published_ns: int
    records: Mapping[int, bytes] = field(default_factory=dict)
    priority: Mapping[int, bytes] = field(default_factory=dict)
    ages: TickAges | None = None  # a FRAME's; None: the writers record no tick_to_write for it
    stale_venues: int = 0  # the venues whose handlers are all down (ring/venues.py bits)


class Records:
    """One section of an entry, read in place: ``iids`` and ``ends`` are views of the copied
    slot, a record is a slice of it. Nothing is decoded; ``as_dict`` is the one loop in Python."""

    __slots__ = ("_base", "_buf", "ends", "iids")

    def __init__(self, buf: bytes, iids: memoryview, ends: memoryview, base: int) -> None:
        self._buf = buf
        self._base = base
        self.iids = iids
        self.ends = ends

    def __len__(self) -> int:
        return len(self.iids)

    @property
    def body(self) -> bytes:
        """All records of the section, back to back (one copy)."""
        n = len(self.ends)
        return self._buf[self._base : self._base + (self.ends[n - 1] if n else 0)]

    def chunk(self, i: int) -> bytes:
        """The ``i``-th record (by position)."""
        start = self.ends[i - 1] if i else 0
        return self._buf[self._base + start : self._base + self.ends[i]]

    def items(self) -> Iterator[tuple[int, bytes]]:
        buf, base, start = self._buf, self._base, 0
        for iid, end in zip(self.iids, self.ends, strict=True):
            yield iid, buf[base + start : base + end]
            start = end

    def as_dict(self) -> dict[int, bytes]:
        """``iid -> record`` as the producer gave it (a later iid wins, as in a dict)."""
        ends = self.ends.tolist()
        if not ends:
            return {}
        body = self.body
        chunks = [body[s:e] for s, e in zip([0, *ends[:-1]], ends, strict=True)]
        return dict(zip(self.iids.tolist(), chunks, strict=True))


def _section(records: Mapping[int, bytes]) -> tuple[array[int], array[int], int]:
    try:
        iids = array(_U32, records.keys())
        ends = array(_U32, accumulate(map(len, records.values())))
    except OverflowError as exc:
        raise LayoutError(f"an iid or a section's size does not fit u32: {exc}") from exc
    return iids, ends, ends[-1] if ends else 0


def _ages(ages: TickAges | None) -> tuple[int, int, tuple[bytes | memoryview, ...]]:
    if ages is None:
        return 0, 0, ()
    runs = ages.runs
    if len(ages.decoded) != 8 * runs or len(ages.ticks) != 4 * runs or len(ages.iids) % 2:
        raise LayoutError(
            f"tick ages of {len(ages.decoded)}, {len(ages.ticks)} and {len(ages.iids)} bytes "
            "are not runs of i64 + u32 and ticks of u16"
        )
    _check_runs(memoryview(ages.ticks).cast(_U32), ages.count)  # the producer fails, not readers
    return runs, ages.count, (ages.decoded, ages.ticks, ages.iids)


def _check_runs(counts: memoryview, ticks: int) -> None:
    """Every run holds ticks, and they add up to the ages' ticks: O(runs), a few per bus batch
    of the frame."""
    if sum(counts) != ticks or (len(counts) and min(counts) == 0):
        raise LayoutError(f"the tick ages' runs are empty or do not add up to their {ticks} ticks")


def encode_entry(entry: Entry) -> bytes:
    """The entry's bytes: header, iids and ends of each section, the tick ages, then the two
    bodies."""
    r_iids, r_ends, r_len = _section(entry.records)
    p_iids, p_ends, p_len = _section(entry.priority)
    runs, aged, ages = _ages(entry.ages)
    try:
        head = ENTRY_HEAD.pack(
            entry.frame_no,
            entry.boundary_ns,
            entry.published_ns,
            len(r_iids),
            r_len,
            len(p_iids),
            p_len,
            runs,
            aged,
            entry.kind,
            entry.stale_venues,
        )
    except struct.error as exc:
        raise LayoutError(f"entry header out of range: {exc}") from exc
    return b"".join(
        (
            head,
            r_iids,
            r_ends,
            p_iids,
            p_ends,
            *ages,
            *entry.records.values(),
            *entry.priority.values(),
        )
    )


def gap_entry(frame_no: int, boundary_ns: int, published_ns: int) -> bytes:
    """What the producer publishes in place of a frame larger than a slot."""
    return encode_entry(Entry(EntryKind.GAP, frame_no, boundary_ns, published_ns))


@dataclass(frozen=True, slots=True)
class RingFrame:
    """An entry as a reader gets it: ``no`` is its place in the ring (1, 2, ...), consecutive
    for a reader that is never lapped; the sections are views of the reader's own copy."""

    no: int
    kind: EntryKind
    frame_no: int
    boundary_ns: int
    published_ns: int
    records: Records
    priority: Records
    ages: TickAges | None = None  # None: the frame carried no ticks, or its ages were dropped
    stale_venues: int = 0  # the producer's down venues as of this entry (ring/venues.py)


def decode_entry(buf: bytes, no: int = 0) -> RingFrame:
    """Read an entry in place (views of ``buf``). O(1): the header's sizes are checked against
    the buffer and each section's last end against its body; a writer slices without trusting
    anything else, and a slice past the end is short, never a crash."""
    if len(buf) < ENTRY_HEAD.size:
        raise LayoutError(f"{len(buf)} bytes is shorter than an entry header")
    head = ENTRY_HEAD.unpack_from(buf)
    frame_no, boundary, published, nr, r_len, np_, p_len, runs, aged, kind, stale = head
    try:
        kind = EntryKind(kind)
    except ValueError as exc:
        raise LayoutError(f"unknown entry kind {kind}") from exc
    arrays = ENTRY_HEAD.size
    ages_at = arrays + 8 * (nr + np_)
    bodies = ages_at + 12 * runs + 2 * aged  # a run: i64 + u32; a tick: u16
    if bodies + r_len + p_len != len(buf):
        raise LayoutError(
            f"entry claims {bodies + r_len + p_len} bytes ({nr} + {np_} records, {runs} age "
            f"runs of {aged} ticks), has {len(buf)}"
        )
    view = memoryview(buf)
    words = view[arrays:ages_at].cast(_U32)
    r_ends, p_ends = words[nr : 2 * nr], words[2 * nr + np_ :]
    if (r_ends[nr - 1] if nr else 0) != r_len or (p_ends[np_ - 1] if np_ else 0) != p_len:
        raise LayoutError("a section's last end is not its body's length")
    ages = None
    if runs or aged:
        counts_at = ages_at + 8 * runs
        iids_at = counts_at + 4 * runs
        counts = view[counts_at:iids_at]
        _check_runs(counts.cast(_U32), aged)
        ages = TickAges(view[ages_at:counts_at], counts, view[iids_at:bodies])
    return RingFrame(
        no,
        kind,
        frame_no,
        boundary,
        published,
        Records(buf, words[:nr], r_ends, bodies),
        Records(buf, words[2 * nr : 2 * nr + np_], p_ends, bodies + r_len),
        ages,
        stale,
    )


class SlotState(IntEnum):
    """What a slot's sequence word says about the entry a reader wants next."""

    NOT_YET = 0  # an older entry, or the wanted one being written (odd): nothing to read
    READY = 1  # the wanted entry, published
    LAPPED = 2  # a newer entry: the wanted one was overwritten


def slot_state(want: int, seq: int) -> SlotState:
    """Entry ``n`` is being written while its slot's word is ``2n - 1`` and published at ``2n``
    (a seqlock: odd while writing, even when done; the word only grows)."""
    if seq == 2 * want:
        return SlotState.READY
    return SlotState.LAPPED if seq > 2 * want else SlotState.NOT_YET
