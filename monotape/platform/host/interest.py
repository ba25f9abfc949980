"""The priority interest: which symbols some writer's terminal holds in an order ticket, so the
sequencer publishes a PRIORITY entry for those (and only those) right after a bus batch.

A small segment in /dev/shm created by the host beside the frame ring: a header (with one change
counter per writer), then one row per writer of one byte per iid (65,536 iids: the whole uint16
wire id space, 64 KiB a writer).
Writer ``w`` is the only one that writes row ``w`` (a byte 0 or 1: it counts its terminals' marks
itself, core/fanout.py's index, and says whether any holds the iid); the sequencer only reads.
Single bytes need no seqlock: a store of one byte is never seen half-done, and a mark seen one
batch late costs one priority update going by the conflated frame instead (the order ticket's
terminal still gets it 0-40 ms later, never out of order: the frame carries the same version).

Why not a message to the sequencer per mark: a writer that dies would leave its marks behind in
the sequencer; here the host (or a restarted writer, ``clear_row``) resets the row, and a
stale 1 only costs the sequencer an encoded record nobody takes.

The sequencer asks once per bus batch (``wanted_among``), not once per tick: it keeps the union
of every row as a set of iids, refreshed when the writers' change counters move (one uint64 per
writer in the header, bumped by that writer after each byte it flips; the sequencer sums them),
and at least every ``REFRESH_EVERY`` calls (a counter read ahead of a byte on a weakly ordered
CPU, or an increment lost when the host clears a dead writer's row as its successor starts, costs
a few batches late, never a mark lost for good). With no mark anywhere, the common case,
a batch costs one header read. Measured (``python -m bench.micro.bench_interest``: a 256-tick
batch, 2 writers; 3 runs of the script, medians; 2 cores shared with other work, load ~17):
``wanted`` per tick 151 µs a batch, ``wanted_among`` 0.36 µs with no mark anywhere; 151 µs vs
9.2 µs with 16 marked symbols (8 of them in the batch).

Plain ``os.open`` + ``mmap`` (not ``multiprocessing.shared_memory``: its resource tracker
unlinks on a reader's exit in 3.11, docs/ring.md). The creator (the host) owns unlink.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import numpy as np

from monotape.platform.ring.segment import SHM_DIR

__all__ = ["HEAD_BYTES", "INTEREST_IIDS", "MAX_WRITERS", "REFRESH_EVERY", "PriorityInterest"]

INTEREST_IIDS: Final = 65_536  # the uint16 wire id space
MAX_WRITERS: Final = 64
REFRESH_EVERY: Final = 256  # wanted_among re-reads the rows at least this often
_MAGIC: Final = int.from_bytes(b"MTPRIO02", "little")
_HEAD: Final = struct.Struct("=QQQ")  # magic, writers, iids
_CHANGES_AT: Final = 64  # then one uint64 change counter per writer
_CHANGE: Final = struct.Struct("=Q")
HEAD_BYTES: Final = _CHANGES_AT + 8 * MAX_WRITERS  # 576: rows start cache-line aligned


class PriorityInterest:
    """One mapping of the interest segment: ``set`` a writer's byte, ask ``wanted``."""

    def __init__(self, path: Path, mm: mmap.mmap, writers: int, iids: int) -> None:
        self.path = path
        self.name = path.name
        self._mm = mm
        self.writers = writers
        self.iids = iids
        self._rows = tuple(HEAD_BYTES + w * iids for w in range(writers))
        self._changes = struct.Struct(f"={writers}Q")  # every writer's change counter
        self._seen_changes = -1  # the counters' sum at the last refresh (-1: never refreshed)
        self._calls = 0
        self._union: frozenset[int] = frozenset()  # iids some row marks, as of the refresh

    @classmethod
    def create(
        cls, name: str, writers: int, *, iids: int = INTEREST_IIDS, directory: Path = SHM_DIR
    ) -> PriorityInterest:
        """A new segment, every byte 0 (FileExistsError if ``name`` is taken)."""
        if not 1 <= writers <= MAX_WRITERS:
            raise ValueError(f"writers must be 1..{MAX_WRITERS}, got {writers}")
        if iids < 1:
            raise ValueError(f"iids must be >= 1, got {iids}")
        path = directory / name
        size = HEAD_BYTES + writers * iids
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)  # ENOSPC now, never SIGBUS at a mark
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        _HEAD.pack_into(mm, 0, 0, writers, iids)
        struct.pack_into("=Q", mm, 0, _MAGIC)  # last: an attacher never sees half a header
        return cls(path, mm, writers, iids)

    @classmethod
    def attach(cls, name: str, *, directory: Path = SHM_DIR) -> PriorityInterest:
        path = directory / name
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size < HEAD_BYTES:
                raise ValueError(f"{path} is not a priority-interest segment")
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        magic, writers, iids = _HEAD.unpack_from(mm, 0)
        if magic != _MAGIC or size != HEAD_BYTES + writers * iids:
            mm.close()
            raise ValueError(f"{path} is not a priority-interest segment")
        return cls(path, mm, writers, iids)

    def set(self, writer: int, iid: int, marked: bool) -> None:
        """Writer ``writer`` says whether any of its terminals holds ``iid`` in an order ticket.
        An iid outside the table is ignored (the wire's ids are uint16: it cannot happen)."""
        if 0 <= iid < self.iids:
            at = self._rows[writer] + iid
            byte = 1 if marked else 0
            if self._mm[at] != byte:
                self._mm[at] = byte
                self._bump(writer)  # after the byte: a reader that sees the count sees the byte

    def wanted(self, iid: int) -> bool:
        """Some writer's terminal holds ``iid`` in an order ticket (the sequencer, per iid of a
        bus batch: a few byte reads)."""
        if not 0 <= iid < self.iids:
            return False
        mm = self._mm
        return any(mm[row + iid] for row in self._rows)

    def wanted_among(self, iids: Iterable[int]) -> frozenset[int]:
        """The iids among ``iids`` some writer's terminal holds in an order ticket: one call per
        bus batch. With no mark anywhere ``iids`` is not even iterated."""
        self._calls += 1
        changes = sum(self._changes.unpack_from(self._mm, _CHANGES_AT))
        if changes != self._seen_changes or self._calls >= REFRESH_EVERY:
            self._refresh(changes)
        union = self._union
        if not union:
            return union
        return union.intersection(iids)

    def _refresh(self, changes: int) -> None:
        rows = np.frombuffer(self._mm, np.uint8, self.writers * self.iids, HEAD_BYTES)
        try:
            marked = np.flatnonzero(rows.reshape(self.writers, self.iids).any(axis=0))
        finally:
            del rows  # no view may outlive the call: close() needs the mapping unexported
        self._union = frozenset(marked.tolist())
        self._seen_changes = changes
        self._calls = 0

    def _bump(self, writer: int) -> None:
        at = _CHANGES_AT + 8 * writer
        (n,) = _CHANGE.unpack_from(self._mm, at)
        _CHANGE.pack_into(self._mm, at, n + 1)  # only writer ``writer`` writes its counter

    def marked(self, writer: int) -> list[int]:
        """The iids writer ``writer``'s row holds (tests, the admin API)."""
        start = self._rows[writer]
        row = self._mm[start : start + self.iids]
        return [i for i, b in enumerate(row) if b]

    def clear_row(self, writer: int) -> None:
        """Forget writer ``writer``'s marks: a writer (re)starting has no terminals yet."""
        start = self._rows[writer]
        self._mm[start : start + self.iids] = bytes(self.iids)
        self._bump(writer)

    def close(self) -> None:
        if not self._mm.closed:
            self._mm.close()

    def unlink(self) -> None:
        """The creator's duty (the host, at stop); mappings elsewhere stay valid."""
        self.path.unlink(missing_ok=True)
