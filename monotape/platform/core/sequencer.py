"""The sequencer: admits whole tick batches, holds the latest state per symbol, takes frames.

design (Ordering): every symbol has exactly one writer and a tick whose version ``(epoch, seq)``
is at or below the symbol's current one is never applied: an exact repeat is a *duplicate* (the
redundant twin's copy, about half of all input), anything older a *regression*. Wall clocks
never arbitrate. design (Conflation): the latest state per symbol plus a dirty set; a frame
carries each changed symbol once, naming what the previous frame showed as its base.

Issue 35: ticks arrive as columnar batches (``wire/batch.py``) and are admitted a batch at a
time (``core/admit_batch.admit_batch``: the per-tick rule in one native pass, in batch order,
writing each applied tick's values into its instrument's row of the state arrays). A frame's
records are encoded from those arrays in one native pass too (``wire.records.encode_rows``), so
a ``Tick`` object is built only where one is wanted: a priority update, a snapshot, a frame's
records when something reads ``Frame.records``. ``monotape.testing.per_tick`` keeps the per-tick
model the property tests hold this to.

Lanes: symbols hash to ``lanes`` lanes (``iid % lanes``), the unit a multi-node split would
move; in one process they share the arrays, each row written only for its own symbol. The
counts are plain ints exported at scrape time (``SequencerCollector``). No I/O, no clock reads:
the caller passes ``now_ns`` (monotonic) in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from monotape.platform.core.admit_batch import VERDICT_SUPERSEDED, VersionTable, admit_batch
from monotape.platform.core.conflation import FRAME_NS, Frame, FrameRecord
from monotape.platform.model import Tick
from monotape.platform.wire.batch import TickBatch, batch_from_ticks
from monotape.platform.wire.records import encode_rows

__all__ = ["Admission", "Sequencer", "VenueCounters"]

IID_SPACE = 1 << 16  # wire ids are uint16 (docs/wire.md)
_ENCODED = (
    0,
    1,
    3,
    4,
    5,
    6,
)  # of a row's columns, what a record carries: epoch seq bid ask last size


class VenueCounters:
    """What one venue's ticks came to. Plain ints: added per batch, exported at scrape."""

    __slots__ = ("admitted", "duplicates", "regressions")

    def __init__(self, admitted: int = 0, duplicates: int = 0, regressions: int = 0) -> None:
        self.admitted = admitted
        self.duplicates = duplicates
        self.regressions = regressions

    def __repr__(self) -> str:
        return (
            f"VenueCounters(admitted={self.admitted}, duplicates={self.duplicates}, "
            f"regressions={self.regressions})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VenueCounters):
            return NotImplemented
        return (self.admitted, self.duplicates, self.regressions) == (
            other.admitted,
            other.duplicates,
            other.regressions,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable


class Admission:
    """What one batch came to: how many of its ticks were applied, and (read only when asked:
    the priority path with an order ticket open, a frame some instrument of which went
    unwritten) their positions and instruments. ``verdict`` is this admission's own copy."""

    __slots__ = ("_at", "admitted_ns", "batch", "count", "verdict")

    def __init__(
        self, batch: TickBatch, verdict: npt.NDArray[np.uint8], count: int, admitted_ns: int
    ) -> None:
        self.batch = batch
        self.verdict = verdict
        self.count = count
        self.admitted_ns = admitted_ns
        self._at: npt.NDArray[np.intp] | None = None

    @property
    def at(self) -> npt.NDArray[np.intp]:
        """Positions of the applied ticks in the batch, in order."""
        if self._at is None:
            self._at = np.flatnonzero(self.verdict <= VERDICT_SUPERSEDED)
        return self._at

    @property
    def iids(self) -> npt.NDArray[np.uint16]:
        if self.count == self.batch.count:
            return self.batch.iid
        return self.batch.iid[self.at]


class Sequencer:
    """All lanes of one process: ``on_batch`` admits, ``take_frame`` conflates."""

    def __init__(self, lanes: int = 4, frame_ns: int = FRAME_NS, space: int = IID_SPACE) -> None:
        if lanes < 1:
            raise ValueError(f"lanes must be >= 1, got {lanes}")
        if frame_ns <= 0:
            raise ValueError(f"frame_ns must be positive, got {frame_ns}")
        self.lanes = lanes
        self.frame_ns = frame_ns
        self.space = space
        self.versions = VersionTable(space)
        # The latest admitted state per instrument (a row per wire id): what the next frame and
        # a snapshot show. ``handler``/``venue`` index the names below.
        self._bid = np.zeros(space, dtype=np.int64)
        self._ask = np.zeros(space, dtype=np.int64)
        self._last = np.zeros(space, dtype=np.int64)
        self._size = np.zeros(space, dtype=np.uint64)
        self._venue_ts = np.zeros(space, dtype=np.int64)
        self._decoded = np.zeros(space, dtype=np.int64)
        self._admitted = np.zeros(space, dtype=np.int64)
        self._venue = np.zeros(space, dtype=np.uint16)
        self._handler = np.zeros(space, dtype=np.uint16)
        self._dirty = np.zeros(space, dtype=np.bool_)
        # the rows ``admit_into`` writes, in its order
        self._state = (
            self.versions.epoch, self.versions.seq, self._bid, self._ask, self._last,
            self._size, self._venue_ts, self._decoded, self._admitted, self._venue,
            self._handler, self._dirty.view(np.uint8),
        )  # fmt: skip
        self._names: list[str] = [""]
        self._name_ids: dict[str, int] = {"": 0}
        # A tick's fields as columns, in ``Tick``'s order (after iid)
        self._row = (
            self.versions.epoch, self.versions.seq, self._venue_ts, self._bid, self._ask,
            self._last, self._size, self._decoded, self._admitted, self._venue, self._handler,
        )  # fmt: skip
        # What the last frame that carried each symbol showed, as the same columns (epoch -1:
        # no frame yet): its next record's base, what a snapshot shows.
        self._shown = tuple(np.zeros_like(c) for c in self._row)
        self._shown[0].fill(-1)
        # ``published`` as Tick objects, made on first ask and kept until the symbol is shown
        # again: the snapshot cache keys its encoded chunk on the object (core/snapshots.py),
        # so a symbol that did not change hydrates from the cached chunk
        self._shown_ticks: dict[int, Tick] = {}
        self._last_boundary: int | None = None
        self._counters: dict[str, VenueCounters] = {}

    # -- admit ---------------------------------------------------------------------------------
    def counter(self, venue: str) -> VenueCounters:
        c = self._counters.get(venue)
        if c is None:
            c = self._counters[venue] = VenueCounters()
        return c

    def _name(self, name: str) -> int:
        code = self._name_ids.get(name)
        if code is None:
            code = self._name_ids[name] = len(self._names)
            self._names.append(name)
        return code

    def on_batch(self, batch: TickBatch, now_ns: int) -> Admission:
        """Admit one batch in order (``admit_batch``: the rule and the state rows in one pass);
        each applied tick becomes its symbol's state and marks it dirty for the next frame.
        Raises ``IndexError`` (nothing changed) on an instrument outside the table: the gate
        refuses those first."""
        n = batch.count
        verdict = np.empty(n, dtype=np.uint8)
        if not n:
            return Admission(batch, verdict, 0, now_ns)
        applied, duplicates, regressions = admit_batch(
            batch.epoch, self._name(batch.venue), self._name(batch.handler), now_ns,
            batch.buffer, n, verdict, self._state,
        )  # fmt: skip
        c = self.counter(batch.venue)
        c.admitted += applied
        c.duplicates += duplicates
        c.regressions += regressions
        return Admission(batch, verdict, applied, now_ns)

    def on_ticks(self, ticks: Sequence[Tick], now_ns: int) -> list[Tick]:
        """``Tick`` objects through the batch path (a replay step, a test): each stretch of
        one venue, handler and epoch is one batch. Returns the applied ticks, ``admitted_ns``
        stamped, in order."""
        applied: list[Tick] = []
        start = 0
        for batch in batch_from_ticks(ticks):
            got = self.on_batch(batch, now_ns)
            for i in got.at.tolist():
                t = ticks[start + i]
                t.admitted_ns = now_ns
                applied.append(t)
            start += batch.count
        return applied

    def seed(self, tick: Tick) -> bool:
        """Hold ``tick`` as its symbol's current state unless a newer version is held (a
        restarted sequencer's seed from what screens were shown): no frame carries it, so the
        next record of the symbol is a full one. True if it was taken."""
        if not self.versions.raise_to(tick.iid, tick.epoch, tick.seq):
            return False
        self._set_row(tick)
        return True

    def _set_row(self, t: Tick) -> None:
        i = t.iid
        self._bid[i], self._ask[i], self._last[i], self._size[i] = t.bid, t.ask, t.last, t.size
        self._venue_ts[i], self._decoded[i], self._admitted[i] = (
            t.venue_ts_ns, t.decoded_ns, t.admitted_ns,
        )  # fmt: skip
        self._venue[i] = self._name(t.venue)
        self._handler[i] = self._name(t.handler)

    # -- frames --------------------------------------------------------------------------------
    def _ticks(self, iids: npt.NDArray[Any]) -> list[Tick]:
        """The current state of ``iids`` as ``Tick`` objects (one native gather per column)."""
        return self._as_ticks(iids, [c[iids] for c in self._row])

    def _as_ticks(self, iids: npt.NDArray[Any], rows: Sequence[npt.NDArray[Any]]) -> list[Tick]:
        """``Tick`` objects of ``iids`` from their rows of the columns (``_row``'s order)."""
        names = self._names
        cols = [c.tolist() for c in rows]
        return [
            Tick(iid, names[v], e, s, ts, b, a, la, sz, names[h], dec, adm)
            for iid, e, s, ts, b, a, la, sz, dec, adm, v, h in zip(
                iids.tolist(), *cols, strict=True
            )
        ]

    def take_frame(self, boundary_ns: int) -> Frame:
        """Close the frame at ``boundary_ns``: one record per symbol changed since the last
        one, by ascending iid, encoded from the state arrays in one native pass
        (``encode_rows``: the delta from what the last frame showed, and the full record);
        ``Frame.records`` is built only if read. Raises ``ValueError`` if ``boundary_ns`` is not
        after the previous boundary (bases would chain backwards, a frame number repeat on the
        wire)."""
        last = self._last_boundary
        if last is not None and boundary_ns <= last:
            raise ValueError(f"boundary {boundary_ns} is not after the previous one ({last})")
        self._last_boundary = boundary_ns
        frame_no = boundary_ns // self.frame_ns
        dirty = np.flatnonzero(self._dirty)
        if not len(dirty):
            return Frame(frame_no, boundary_ns, [])
        self._dirty[dirty] = False
        shown = self._shown
        e, q, _, b, a, la, sz, *_ = self._row
        encoded = encode_rows(dirty, (e, q, b, a, la, sz), tuple(shown[i] for i in _ENCODED))
        bases = [c[dirty] for c in shown]
        news = [c[dirty] for c in self._row]
        for column, rows in zip(shown, news, strict=True):
            column[dirty] = rows
        kept = self._shown_ticks
        if kept:  # the symbols shown anew: their published tick is another one now
            pop = kept.pop
            for iid in dirty.tolist():
                pop(iid, None)
        return Frame(
            frame_no, boundary_ns, encoded=encoded, make=lambda: self._records(dirty, bases, news)
        )

    def _records(
        self,
        iids: npt.NDArray[Any],
        bases: Sequence[npt.NDArray[Any]],
        news: Sequence[npt.NDArray[Any]],
    ) -> list[FrameRecord]:
        """A frame's records as ``Tick`` objects (``Frame.records``, when read)."""
        shown = self._as_ticks(iids, bases)
        return [
            FrameRecord(new.iid, None if base.epoch < 0 else base, new)
            for base, new in zip(shown, self._as_ticks(iids, news), strict=True)
        ]

    # -- reads ---------------------------------------------------------------------------------
    def current(self, iid: int) -> Tick | None:
        """The last applied tick for ``iid`` (may be newer than any frame has shown)."""
        if not 0 <= iid < self.space or self.versions.epoch[iid] < 0:
            return None
        return self._tick_at(iid, self._row)

    def _tick_at(self, iid: int, row: Sequence[npt.NDArray[Any]]) -> Tick:
        """One instrument's ``Tick`` from the columns ``row`` (``_row``'s order): a scalar read
        per column, not a gather (a snapshot asks for one symbol at a time, thousands a second
        under a reconnect storm)."""
        e, s, ts, b, a, la, sz, dec, adm, v, h = (c.item(iid) for c in row)
        names = self._names
        return Tick(iid, names[v], e, s, ts, b, a, la, sz, names[h], dec, adm)

    def latest(self, iids: Iterable[int]) -> list[Tick]:
        """The current ticks of ``iids`` (each must hold one), ascending iid: the priority
        path's records."""
        return self._ticks(np.array(sorted(iids), dtype=np.int64))

    def published(self, iid: int) -> Tick | None:
        """What the last frame showed for ``iid``: its next record's base; what snapshots show."""
        tick = self._shown_ticks.get(iid)
        if tick is not None:
            return tick
        if not 0 <= iid < self.space or self._shown[0][iid] < 0:
            return None
        tick = self._shown_ticks[iid] = self._tick_at(iid, self._shown)
        return tick

    @property
    def dirty_count(self) -> int:
        return int(np.count_nonzero(self._dirty))

    def symbols(self) -> Iterable[int]:
        """Every iid that has a current tick."""
        out: list[int] = np.flatnonzero(self.versions.epoch >= 0).tolist()
        return out

    def counters(self) -> dict[str, VenueCounters]:
        """Per-venue counts (a fresh snapshot; safe to read off-thread)."""
        out: dict[str, VenueCounters] = {}
        # dict() copies in one C step; list(d.items()) makes a tuple per item, and on 3.11 one
        # can start a collection whose gc callback lets the loop's thread in
        for venue, c in dict(self._counters).items():
            out[venue] = VenueCounters(c.admitted, c.duplicates, c.regressions)
        return out

    @property
    def admitted_total(self) -> int:
        return sum(c.admitted for c in self.counters().values())

    @property
    def duplicates_total(self) -> int:
        return sum(c.duplicates for c in self.counters().values())

    @property
    def regressions_total(self) -> int:
        return sum(c.regressions for c in self.counters().values())
