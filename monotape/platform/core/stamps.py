"""Stage latency stamps: a value for every tick at each of the five stages (design: stages),
and for every priority write.

Batches are stamped whole and recorded vectorized once per frame, never per value (per-value
``record_value()`` costs ~1 µs, too much at 190k ticks/s × 5 stages); every value still lands:
a stage's count is the number of ticks (or writes) it covers. The recorders are the one way
values reach the histograms (the server's hydrate and glass samples too, ``record_ns``).

| stage         | from → to                                     | one value per                   |
|---------------|-----------------------------------------------|---------------------------------|
| decode        | venue timestamp → decoded by the handler      | tick a handler delivered        |
| sequence      | decoded → admitted by the lane                | tick admitted                   |
| conflate      | admitted → the frame boundary that carries it | tick admitted (to its frame)    |
| encode        | frame boundary → payloads encoded, published  | tick admitted (to its frame)    |
| write         | published → handed to the kernel              | frame written to a connection   |
| priority      | admitted → handed to the kernel, no frame     | tick written to a connection    |
| tick_to_write | decoded → its frame handed to the kernel      | tick in a payload written       |

``write`` counts every frame handed to the kernel for a terminal, from the fan-out or later out
of a slow terminal's ring (it keeps its publish time: the real, larger value; issue 12); a frame
dropped from a ring is a gap, not a write. ``priority`` counts order-ticket writes made at once
(one queued in a slow ring has no value), gathered by the server in a fixed buffer
(``FanoutServer.flush_priority``) and handed here once per frame or when the buffer fills.

``tick_to_write`` is the end-to-end figure a tick-to-glass alert reads: one value per tick that
reached a screen, from its decoding to the moment the frame carrying it was handed to the
kernel for the last terminal that got it straight from the fan-out (an upper bound over the
terminals). Only ticks of symbols whose record was in a payload actually written count
(``FanoutServer.written_iids``): a tick nobody was sent would dilute the p99. On the host a
writer never sees a tick: the sequencer puts the frame's ``frame_ticks`` (decode time per run,
instrument per tick) in the ring entry and each writer records ``written_frame`` for the ticks
it sent (a tick two writers sent has a value from each). docs/observability.md has the rest.

``decode`` subtracts the venue's wall clock from ours, so it is only as good as the clocks'
agreement (negative values are clamped to 0 and counted). The rest is this host's monotonic
clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from monotape.histograms import Interval, Recorders
from monotape.platform.core.fields import int64_field
from monotape.platform.model import Tick
from monotape.platform.wire.batch import TickBatch, column_bytes, column_ends

if TYPE_CHECKING:
    from monotape.platform.core.sequencer import Admission

__all__ = ["FrameTicks", "StageStamps"]

IntArray = npt.NDArray[np.int64]

_EMPTY: IntArray = np.empty(0, dtype=np.int64)
_EMPTY.setflags(write=False)  # shared by every empty frame: never written to
_VENUE_TS = Tick.__dict__["venue_ts_ns"]  # the member descriptors int64_field reads
_DECODED = Tick.__dict__["decoded_ns"]
_ADMITTED = Tick.__dict__["admitted_ns"]
_IID = Tick.__dict__["iid"]
_IID_SPACE = 65_536  # wire ids are uint16 (docs/wire.md): one flag per instrument


class FrameTicks(NamedTuple):
    """A frame's admitted ticks as a process that never saw them needs them for
    ``tick_to_write`` (a writer of the host, from the ring's tick ages): run ``i`` is ``runs[i]``
    consecutive ticks decoded at ``decoded[i]`` (monotonic ns); ``iids[j]`` is tick ``j``'s
    instrument, in the same order."""

    decoded: IntArray
    runs: IntArray
    iids: npt.NDArray[np.uint16]

    def without(self, iids: Sequence[int]) -> FrameTicks | None:
        """These ticks less those of ``iids`` (instruments the frame left out: they cannot
        encode), None when none is left: the ages say only what the entry's records carry."""
        keep = ~np.isin(self.iids, np.asarray(iids, dtype=np.int64))
        starts = np.zeros(len(self.runs), dtype=np.int64)
        np.cumsum(self.runs[:-1], out=starts[1:])
        kept = np.add.reduceat(keep, starts, dtype=np.int64)  # runs are never empty
        some = kept > 0
        if not some.any():
            return None
        return FrameTicks(self.decoded[some], kept[some], self.iids[keep])


class StageStamps:
    """Stamps per batch, records per frame, as runs: struct of arrays, not attributes per tick.

    A batch is stamped whole while it is at hand: the venue stamps (the one field that differs
    per tick) are copied out as int64s, the stamps a batch shares (a handler's drain has one
    decoded time, an admit one admitted time) are kept as runs ``(stamp, ticks)``. Once per
    40 ms frame the runs become arrays and each stage is recorded vectorized, a shared value
    with its count (``StageRecorder.add_counts_ns``). ``decoded_batch``/``admitted_batch`` take
    the columnar path's batches (issue 35); ``decoded``/``admitted`` take ``Tick`` lists (a
    caller with objects: a test, a tool), read in one native pass (``core/fields``). A batch
    whose ends differ in a stamp is taken apart into stretches of equal stamps: exact, only
    slower. tick_to_write reads no instrument when every one of the frame went out (the common
    case); otherwise once, through a flag table by id. Pending runs are bounded by the frame.
    Issue 12: recording per value cost 14% of throughput; bench/micro/bench_recording.py.
    """

    def __init__(self, recorders: Recorders) -> None:
        self.recorders = recorders
        self._decode = recorders["decode"]
        self._sequence = recorders["sequence"]
        self._conflate = recorders["conflate"]
        self._encode = recorders["encode"]
        self._write = recorders["write"]
        self._priority = recorders["priority"]
        self._tick_to_write = recorders["tick_to_write"]
        # Since the last frame, flat: delivered ticks' venue stamps (int64 bytes: copied out, a
        # kept list is a container the GC traverses again and again, measured) and their runs
        # (decoded, ticks); the admitted batches and their runs (admitted, decoded, ticks).
        self._venue_ts: list[bytes] = []  # per batch: its ticks' venue stamps as int64s
        self._decoded_runs: list[int] = []
        # read for their instruments only if written: ticks, or a batch's admitted iids
        self._admitted: list[Sequence[Tick] | Admission] = []
        self._admitted_runs: list[int] = []
        # The last frame's admitted ticks: written() closes the frame framed() opened.
        self._framed: list[Sequence[Tick] | Admission] = []
        self._framed_decoded = _EMPTY  # per run
        self._framed_n = _EMPTY
        self._framed_published = 0
        self._framed_symbols = -1  # the frame's record count, if the caller said (framed())
        self._written_flags = np.zeros(_IID_SPACE, dtype=np.bool_)  # reused: cleared after use

    def decoded(self, ticks: Sequence[Tick]) -> None:
        """A batch a handler delivered (one drain, or a replay step)."""
        n = len(ticks)
        if not n:
            return
        self._venue_ts.append(int64_field(ticks, _VENUE_TS))  # one C pass (core/fields.py)
        at = ticks[0].decoded_ns
        if ticks[-1].decoded_ns == at:
            self._decoded_runs += (at, n)
        else:  # not one stamp: a run per stretch of equal stamps
            self._decoded_runs += _runs(_column(ticks, _DECODED))

    def decoded_batch(self, batch: TickBatch) -> None:
        """A batch a handler delivered, from its columns: its venue stamps copied out (the
        buffer is not kept), its decode stamps as runs (one run: a handler's drain has one)."""
        n = batch.count
        if not n:
            return
        # the column's bytes and two stamps read off the buffer: no view to build (issue 35)
        self._venue_ts.append(column_bytes(batch, "venue_ts"))
        at, last = column_ends(batch, "recv_ts")
        if last == at:
            self._decoded_runs += (at, n)
        else:
            self._decoded_runs += _runs(batch.recv_ts)

    def admitted_batch(self, admission: Admission) -> None:
        """The ticks one ``Sequencer.on_batch`` call applied (their instruments kept for
        ``tick_to_write``, as an array: no object per tick)."""
        n = admission.count
        if not n:
            return
        self._admitted.append(admission)  # its iids are read only if a frame needs them
        recv = admission.batch.recv_ts
        decoded = int(recv[0])
        if int(recv[-1]) == decoded:  # a handler's drain: one stamp for the whole batch
            self._admitted_runs += (admission.admitted_ns, decoded, n)
        else:
            at = np.full(n, admission.admitted_ns, dtype=np.int64)
            self._admitted_runs += _runs(at, np.ascontiguousarray(recv[admission.at]))

    def admitted(self, applied: Sequence[Tick]) -> None:
        """The ticks one ``Sequencer.on_ticks`` call applied."""
        if not applied:
            return
        self._admitted.append(applied)
        first, last = applied[0], applied[-1]
        at = first.admitted_ns
        decoded = first.decoded_ns
        if last.admitted_ns == at and last.decoded_ns == decoded:
            self._admitted_runs += (at, decoded, len(applied))
        else:  # not one stamp: a run per stretch of equal stamps
            self._admitted_runs += _runs(_column(applied, _ADMITTED), _column(applied, _DECODED))

    def _take(self, wall_offset_ns: int) -> tuple[IntArray, IntArray, IntArray]:
        """Record decode and sequence for everything pending; return the admitted runs:
        admitted times, decoded times and tick counts (their ticks: ``_framed``)."""
        venue_ts = self._venue_ts
        if venue_ts:
            runs = np.array(self._decoded_runs, dtype=np.int64).reshape(-1, 2)
            # decoded_ns is monotonic; the venue stamps wall time: one offset per frame joins them
            decoded = np.repeat(runs[:, 0] + wall_offset_ns, runs[:, 1])
            decoded -= np.frombuffer(
                venue_ts[0] if len(venue_ts) == 1 else b"".join(venue_ts), np.int64
            )
            self._decode.add_ns(decoded)
            venue_ts.clear()
            self._decoded_runs.clear()
        self._framed, self._admitted = self._admitted, []
        if not self._admitted_runs:
            return _EMPTY, _EMPTY, _EMPTY
        runs = np.array(self._admitted_runs, dtype=np.int64).reshape(-1, 3)
        self._admitted_runs.clear()
        admitted, decoded, counts = runs[:, 0], runs[:, 1], runs[:, 2]
        self._sequence.add_counts_ns(admitted - decoded, counts)
        return admitted, decoded, counts

    def frame_ticks(self) -> FrameTicks | None:
        """The ticks the next ``framed()`` frame carries (everything admitted since the last
        one), for the host's FRAME entry, whose writers record their ``tick_to_write``
        (``written_frame``). None when there are none, or when an instrument is not a wire id
        (a u16: the entry's ages have no room for it; that frame gets no end-to-end value)."""
        if not self._admitted_runs:
            return None
        runs = np.array(self._admitted_runs, dtype=np.int64).reshape(-1, 3)
        iids = _iids(self._admitted)
        if int(iids.min()) < 0 or int(iids.max()) >= _IID_SPACE:
            return None
        return FrameTicks(runs[:, 1], runs[:, 2], iids.astype(np.uint16))

    def framed(
        self,
        boundary_ns: int,
        published_ns: int,
        wall_offset_ns: int,
        symbols: int | None = None,
    ) -> int:
        """The frame at ``boundary_ns`` carried every tick admitted since the last one.

        ``wall_offset_ns`` is wall minus monotonic time now (the decode stage's venue stamps are
        wall clock). ``symbols``: the frame's record count (``frame.count``), when the
        caller took that frame right before, with nothing admitted in between: then it is the
        number of instruments the frame's ticks have (conflation keeps one record per admitted
        instrument), and ``written`` needs no pass over the ticks when all of them went out.
        Returns how many admitted ticks the frame carried."""
        admitted, decoded, counts = self._take(wall_offset_ns)
        self._framed_decoded = decoded
        self._framed_n = counts
        self._framed_published = published_ns
        self._framed_symbols = -1 if symbols is None else symbols
        if not len(counts):
            return 0
        # An overdue frame (the previous publish overran) carries ticks admitted after its
        # boundary: for them conflation took no time, and encoding starts at admission.
        framed = np.maximum(admitted, boundary_ns)
        self._conflate.add_counts_ns(framed - admitted, counts)
        self._encode.add_counts_ns(published_ns - framed, counts)
        return int(counts.sum())

    def written(
        self,
        latencies_ns: IntArray,
        written_iids: IntArray = _EMPTY,
        direct: int | None = None,
    ) -> None:
        """The writes of the last ``framed()`` frame's fan-out, published → handed to the kernel.

        ``latencies_ns``: one value per frame handed to the kernel for a terminal: the first
        ``direct`` (all if None) are this frame's direct writes, the rest frames that had waited
        in a slow terminal's ring and went out since (``Writer.flush_behind``), each from its own
        publish. All are ``write`` values; only the direct ones say when this frame's ticks
        reached a socket.

        ``written_iids``: the instruments whose record was in a payload handed to the kernel
        for at least one terminal (the fan-out's ``written_iids``: distinct, and among the
        frame's). Only the frame's ticks of those instruments get a ``tick_to_write`` value;
        none without it. When they are as many as the frame's records (``framed(symbols=)``),
        every instrument went out: each run counts whole, read from no tick (the common case:
        every payload written, ``planner.written_iids``)."""
        self._write.add_ns(latencies_ns)
        runs = self._framed_n
        decoded = self._framed_decoded
        framed, self._framed = self._framed, []
        self._framed_decoded = self._framed_n = _EMPTY
        symbols, self._framed_symbols = self._framed_symbols, -1
        mine = latencies_ns if direct is None else latencies_ns[:direct]
        # the frame's ticks' instruments are read only when not every one of them went out
        self._end_to_end(
            mine,
            self._framed_published,
            written_iids,
            symbols,
            decoded,
            runs,
            lambda: _iids(framed),
        )

    def written_frame(
        self,
        latencies_ns: IntArray,
        direct: int,
        published_ns: int,
        written_iids: IntArray,
        symbols: int,
        ticks: FrameTicks | None,
    ) -> None:
        """``written`` for a process that never saw the frame's ticks (a writer of the host):
        ``ticks`` comes with the frame (the ring entry's ages: ``frame_ticks`` in the process
        that admitted them), ``published_ns`` is the frame's publish time that
        ``latencies_ns`` count from, ``symbols`` its record count. The same values as the
        one-process node records for the same writes.

        With several writers, each records the ticks its own terminals were sent, up to its
        own slowest direct write: a tick two writers carried has a value from each (docs/
        observability.md)."""
        self._write.add_ns(latencies_ns)
        if ticks is None:
            return
        iids = ticks.iids
        self._end_to_end(
            latencies_ns[:direct],
            published_ns,
            written_iids,
            symbols,
            ticks.decoded,
            ticks.runs,
            lambda: iids,
        )

    def _end_to_end(
        self,
        direct_ns: IntArray,
        published_ns: int,
        written_iids: IntArray,
        symbols: int,
        decoded: IntArray,
        runs: IntArray,
        iids_of: Callable[[], npt.NDArray[np.integer]],
    ) -> None:
        """tick_to_write for a frame's ticks (runs of ``runs`` ticks decoded at ``decoded``):
        up to the frame's slowest direct write, for the ticks of ``written_iids`` (``iids_of``
        names every tick's instrument; read only when not every instrument went out)."""
        if not (len(direct_ns) and len(runs) and len(written_iids)):
            return
        last_write = published_ns + int(direct_ns.max())
        if len(written_iids) == symbols:  # all of the frame's instruments: every tick carried
            self._tick_to_write.add_counts_ns(last_write - decoded, runs)
            return
        iids = iids_of()
        flags = self._written_flags
        if int(written_iids.max()) < _IID_SPACE and int(iids.max()) < _IID_SPACE:
            flags[written_iids] = True
            carried = flags[iids]
            flags[written_iids] = False
        else:  # not a wire id: the general membership test
            carried = np.isin(iids, written_iids)
        starts = np.zeros(len(runs), dtype=np.int64)
        np.cumsum(runs[:-1], out=starts[1:])
        self._tick_to_write.add_counts_ns(
            last_write - decoded, np.add.reduceat(carried, starts, dtype=np.int64)
        )

    def prioritized(self, latencies_ns: IntArray) -> None:
        """Admitted → written values of priority writes. ``latencies_ns`` is read during the call
        only (copied into the batch): the server reuses its buffer."""
        self._priority.add_ns(latencies_ns)

    def rotate(
        self, wall_now_ms: int, wall_offset_ns: int, *, final: bool = False
    ) -> list[Interval]:
        """Close the interval of every stage (the 10 s rotation). Between frames, ticks already
        decoded or admitted wait for their frame (the next interval records them); at the
        ``final`` rotation of a stop no frame will carry them, so they are recorded at their
        first stages now and have no conflate or encode value."""
        if final:
            self._take(wall_offset_ns)
            self._framed = []
        return self.recorders.rotate_all(wall_now_ms)  # each recorder flushes its buffer first


def _iids(batches: Sequence[Sequence[Tick] | Admission]) -> IntArray:
    """Every tick's instrument, batch after batch: an admission's from its batch's iid column,
    a list of ticks in one native pass (core/fields.py)."""
    parts = [
        int64_field(b, _IID) if isinstance(b, Sequence) else b.iids.astype(np.int64).tobytes()
        for b in batches
    ]
    return np.frombuffer(b"".join(parts), np.int64)


def _column(ticks: Sequence[Tick], member: object) -> IntArray:
    """One int field of every tick (one native pass, core/fields.py)."""
    return np.frombuffer(int64_field(ticks, member), np.int64)


def _runs(*columns: IntArray) -> list[int]:
    """Stretches of consecutive ticks equal in every column, flat: each stretch's values, then
    its length. A batch of several stamps (a caller's mix) costs a few numpy calls, not a
    Python pass per tick."""
    n = len(columns[0])
    change = np.zeros(n, dtype=np.bool_)
    change[0] = True
    for c in columns:
        change[1:] |= c[1:] != c[:-1]
    starts = np.flatnonzero(change)
    lengths = np.diff(starts, append=n)
    out: list[int] = np.column_stack([c[starts] for c in columns] + [lengths]).ravel().tolist()
    return out
