"""The snapshot table of a /dev/shm segment: per iid two fixed slots, each with its own
sequence word, holding the iid's last two puts (docs/ring.md, Snapshot chunks).

Slot words: seq (odd while a put writes it), entry (the ring entry of the frame that carries the
record: the producer's head + 1 at the put), epoch, version seq, length, then the chunk. The
producer writes with ``put`` (one) or ``put_many`` (a frame's) and reads back with ``newest``;
a reader copies one slot with ``copy_slot`` (the choice of slot and the waiting are
``ShmReader.snapshot``'s).

``put_many`` is native when ring/_table.c was built: a frame at 120k ticks/s puts ~2,400
records, and the Python ``put`` costs ~0.85 µs each (2.0 ms of the sequencer's 2.8 ms frame
publish, bench_ring). ``python_put_many`` is its twin, word for word (tests/ring/test_table.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import ModuleType

from monotape.platform.ring.layout import SNAPSHOT_HEAD
from monotape.platform.ring.protocol import Put, SnapshotChunk, check_puts
from monotape.platform.ring.segment import Segment

__all__ = [
    "NATIVE",
    "Put",
    "clear_torn",
    "copy_slot",
    "native_module",
    "newest",
    "put",
    "put_many",
    "python_put_many",
]


def put(seg: Segment, iid: int, tag: int, version: tuple[int, int], chunk: bytes | None) -> None:
    """Store ``chunk`` (None: a refused one, read as absent) at ``version`` for entry ``tag``,
    in the slot holding that entry (the same frame's record again), else the older one. Only
    the producer writes these words, so reading them here races nothing."""
    g = seg.geometry
    w = seg.words
    half = g.snapshot_slot_bytes >> 3
    k = (g.table_offset >> 3) + 2 * half * iid
    k1 = k + half
    t0, t1 = w[k + 1], w[k1 + 1]
    if (t1 == tag and w[k1]) or (t0 != tag and t1 < t0):
        k = k1
    n = 0 if chunk is None else len(chunk)
    s = w[k]
    odd = s + 1 if s % 2 == 0 else s + 2
    w[k] = odd
    w[k + 1] = tag
    w[k + 2], w[k + 3] = version
    w[k + 4] = n
    if chunk is not None and n:
        off = (k << 3) + SNAPSHOT_HEAD
        seg.mm[off : off + n] = chunk
    w[k] = odd + 1


def python_put_many(seg: Segment, tag: int, puts: Sequence[Put]) -> int:
    """``put`` each (iid, epoch, seq, chunk) in order for entry ``tag``; returns how many were
    refused: an iid outside the table (nothing written) or a chunk over ``max_chunk`` (stored
    as absent). Every item is checked first: a malformed one raises and nothing is written."""
    check_puts(puts)
    g = seg.geometry
    iids, cap = g.snapshot_iids, g.max_chunk
    refused = 0
    for iid, epoch, seq, chunk in puts:
        if not 0 <= iid < iids:
            refused += 1
            continue
        large = len(chunk) > cap
        put(seg, iid, tag, (epoch, seq), None if large else chunk)
        refused += large
    return refused


_native: ModuleType | None
try:
    from monotape.platform.ring import _table as _native
except ImportError:  # no compiler at install time: the twin runs
    _native = None


def native_module() -> ModuleType | None:
    """The extension, or None when it was not built."""
    return _native


NATIVE: bool = _native is not None


def put_many(seg: Segment, tag: int, puts: Sequence[Put]) -> int:
    """``python_put_many``, in C when it was built."""
    if _native is None:
        return python_put_many(seg, tag, puts)
    g = seg.geometry
    return int(
        _native.put_many(
            seg.mm, g.table_offset, g.snapshot_slot_bytes, g.snapshot_iids, g.max_chunk, tag, puts
        )
    )


def newest(seg: Segment) -> Iterator[tuple[int, SnapshotChunk]]:
    """Every iid with a chunk, ascending, with the newer of its two records (the producer's
    own read: no put races it)."""
    g = seg.geometry
    w = seg.words
    mm = seg.mm
    cap = g.max_chunk
    half = g.snapshot_slot_bytes >> 3
    step = 2 * half
    first = g.table_offset >> 3
    end = first + step * g.snapshot_iids
    # every slot's sequence word in two strided slices: a word of 0 was never put
    for iid, (s0, s1) in enumerate(
        zip(w[first:end:step], w[first + half : end : step], strict=True)
    ):
        if s0 == 0 and s1 == 0:
            continue
        k = first + iid * step
        if s1 and w[k + half + 1] > w[k + 1]:
            k += half
        n = min(w[k + 4], cap)
        if n:
            off = k << 3
            chunk = mm[off + SNAPSHOT_HEAD : off + SNAPSHOT_HEAD + n]
            yield iid, SnapshotChunk((int(w[k + 2]), int(w[k + 3])), chunk)


def clear_torn(seg: Segment) -> None:
    """A restarted producer's first act: a slot the dead one left half-written (odd word) is
    cleared to entry 0 with no chunk: absent, and the slot the next put takes."""
    g = seg.geometry
    w = seg.words
    step = g.snapshot_slot_bytes >> 3
    first = g.table_offset >> 3
    for i, s in enumerate(w[first : first + step * 2 * g.snapshot_iids : step]):
        if s & 1:
            k = first + i * step
            w[k + 1] = 0
            w[k + 4] = 0
            w[k] += 1


def copy_slot(seg: Segment, k: int, s: int) -> tuple[bool, SnapshotChunk | None]:
    """The slot at word ``k``, read as ``s`` before: (False, None) if a put moved the word
    since (read again), else (True, its record; None for a refused chunk)."""
    w = seg.words
    epoch, seq, n = w[k + 2], w[k + 3], min(w[k + 4], seg.geometry.max_chunk)
    off = (k << 3) + SNAPSHOT_HEAD
    chunk = seg.mm[off : off + n]
    if w[k] != s:
        return False, None
    return True, SnapshotChunk((epoch, seq), chunk) if n else None
