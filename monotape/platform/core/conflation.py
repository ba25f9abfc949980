"""Conflation: latest state per symbol, a dirty set, and frames on a fixed 40 ms grid.

design (Conflation and the priority channel): per lane, the latest state per symbol plus a dirty
set; frame boundaries sit on a fixed 40 ms grid of the monotonic clock (25 Hz) and a frame carries
only the symbols changed since the previous frame. At 120,000 ticks/s a 40 ms frame absorbs about
4,800 ticks; each symbol appears in it once, however many ticks it saw.

Every record names its *base*: what the previous frame published for that symbol. The encoder
writes a delta against that base, and a terminal applies it only if it holds exactly that base
(design: Wire, "a delta names its base version, so it is never applied to a different base").

A pure state machine: no I/O, no clock reads. The caller passes boundaries in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from monotape.platform.model import Tick
from monotape.platform.wire.records import EncodedRows

__all__ = [
    "FRAME_NS",
    "Conflator",
    "Frame",
    "FrameRecord",
    "due_boundary",
    "frame_no_at",
    "next_boundary",
]

FRAME_NS = 40_000_000  # design: 40 ms conflation frames (25 Hz)


class FrameRecord(NamedTuple):
    """One symbol's change in one frame."""

    iid: int
    base: Tick | None  # what the previous frame published for ``iid``; None on first appearance
    new: Tick  # the latest admitted tick at the boundary


class Frame:
    """One boundary's changes: ``records`` (ascending iid), and, from the sequencer, ``encoded``:
    the same records already encoded from its state arrays (``wire.records.encode_rows``), so
    the hot path never builds a ``Tick`` per record; ``records`` is then built on first read
    (a test, a tool, a symbol that cannot encode)."""

    __slots__ = ("_make", "_records", "boundary_ns", "encoded", "frame_no")

    def __init__(
        self,
        frame_no: int,
        boundary_ns: int,
        records: list[FrameRecord] | None = None,
        *,
        encoded: EncodedRows | None = None,
        make: Callable[[], list[FrameRecord]] | None = None,
    ) -> None:
        if records is None and make is None:
            raise ValueError("a frame has its records, or a way to make them")
        self.frame_no = frame_no  # boundary_ns // frame_ns: the grid slot, gaps visible
        self.boundary_ns = boundary_ns
        self.encoded = encoded
        self._records = records
        self._make = make

    @property
    def records(self) -> list[FrameRecord]:
        if self._records is None:
            assert self._make is not None
            self._records = self._make()
            self._make = None
        return self._records

    @property
    def count(self) -> int:
        """How many symbols changed (records), without building them."""
        if self._records is None and self.encoded is not None:
            deltas, _, refused = self.encoded
            return len(deltas) + len(refused)
        return len(self.records)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return (self.frame_no, self.boundary_ns, self.records) == (
            other.frame_no, other.boundary_ns, other.records,
        )  # fmt: skip

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Frame(frame_no={self.frame_no}, boundary_ns={self.boundary_ns}, records={self.count})"
        )


def frame_no_at(boundary_ns: int, frame_ns: int = FRAME_NS) -> int:
    """The grid slot a boundary sits on."""
    return boundary_ns // frame_ns


def next_boundary(now_ns: int, frame_ns: int = FRAME_NS) -> int:
    """The next multiple of ``frame_ns`` strictly after ``now_ns``.

    Boundaries are computed from the grid, never as "40 ms after the last frame": a late wake-up
    delays one frame but never shifts the ones after it, so jitter cannot accumulate (design:
    "a fixed 40 ms grid of the monotonic clock").
    """
    if frame_ns <= 0:
        raise ValueError(f"frame_ns must be positive, got {frame_ns}")
    return (now_ns // frame_ns + 1) * frame_ns


def due_boundary(now_ns: int, last_ns: int, frame_ns: int = FRAME_NS) -> int:
    """The boundary the frame loop publishes next, after the one at ``last_ns``.

    On time, that is the next grid point (the loop sleeps until it). Overdue - the previous
    frame took longer than a frame to publish, or the loop woke late - it is the latest grid
    point already passed, published at once: waiting for the next grid point instead would
    leave the loop idle for up to a frame while terminals wait (measured: a 47 ms publish at
    4,200 terminals halved the frame rate to 12.5 Hz with the core 40% idle). Boundaries
    skipped in between are conflated into it, so lateness never accumulates either way.
    """
    if frame_ns <= 0:
        raise ValueError(f"frame_ns must be positive, got {frame_ns}")
    latest = now_ns - now_ns % frame_ns
    if latest > last_ns:
        return latest
    return max(latest, last_ns) + frame_ns


class Conflator:
    """Latest tick per symbol since the last frame, collapsed to one record per symbol per frame.

    ``offer`` is on the per-tick path: it is one dict store. The dict doubles as the dirty set
    (its keys) and the latest state (its values), so many ticks for a symbol between boundaries
    cost one entry.
    """

    __slots__ = ("_last_boundary", "_pending", "_published", "frame_ns")

    def __init__(self, frame_ns: int = FRAME_NS) -> None:
        if frame_ns <= 0:
            raise ValueError(f"frame_ns must be positive, got {frame_ns}")
        self.frame_ns = frame_ns
        # iid -> latest tick offered since the previous frame (keys: the dirty set). The
        # sequencer's hot loop writes into this dict directly (it is the same operation as
        # ``offer``, minus a method call per tick).
        self._pending: dict[int, Tick] = {}
        # iid -> what the last frame that carried the symbol showed: the base of its next record
        # and what a snapshot shows.
        self._published: dict[int, Tick] = {}
        self._last_boundary: int | None = None

    def offer(self, tick: Tick) -> None:
        """Record ``tick`` as its symbol's latest state. The caller has already admitted it."""
        self._pending[tick.iid] = tick

    def take_frame(self, boundary_ns: int) -> Frame:
        """Close the frame at ``boundary_ns``: one record per symbol changed since the last one.

        Raises ``ValueError`` if ``boundary_ns`` is not after the previous boundary: frames leave
        in grid order, once per boundary, or bases would chain backwards (or a frame number
        would repeat on the wire).
        """
        last = self._last_boundary
        if last is not None and boundary_ns <= last:
            raise ValueError(f"boundary {boundary_ns} is not after the previous one ({last})")
        self._last_boundary = boundary_ns
        pending = self._pending
        published = self._published
        records: list[FrameRecord] = []
        if pending:
            append = records.append
            get_base = published.get
            for iid in sorted(pending):
                new = pending[iid]
                append(FrameRecord(iid, get_base(iid), new))
                published[iid] = new
            pending.clear()
        return Frame(boundary_ns // self.frame_ns, boundary_ns, records)

    def published(self, iid: int) -> Tick | None:
        """What the last frame showed for ``iid`` (None if no frame carried it yet)."""
        return self._published.get(iid)

    def pending(self, iid: int) -> Tick | None:
        """The tick waiting for the next boundary for ``iid``, if it changed since the last one."""
        return self._pending.get(iid)

    @property
    def dirty_count(self) -> int:
        """Symbols changed since the previous frame (the size of the next frame)."""
        return len(self._pending)

    @property
    def published_count(self) -> int:
        return len(self._published)
