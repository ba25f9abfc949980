"""Stage latency stamps: a value for every tick at each of the five stages (design: stages),
and for every priority write.

Values are gathered per batch (a handler's drain, a bus batch, a frame) into numpy arrays and
appended to each stage's recorder buffer (``StageRecorder.add_ns``), recorded vectorized when it
fills, never per value: per-value ``record_value()`` costs ~1 µs (MEASURED), too much at 190k
ticks/s × 5 stages. The recorder's buffer is the one way values reach the histograms: the
server's hydrate and glass samples go into the same buffers (``record_ns``).

| stage         | from → to                                     | one value per                   |
|---------------|-----------------------------------------------|---------------------------------|
| decode        | venue timestamp → decoded by the handler      | tick a handler delivered        |
| sequence      | decoded → admitted by the lane                | tick admitted                   |
| conflate      | admitted → the frame boundary that carries it | tick admitted (to its frame)    |
| encode        | frame boundary → payloads encoded, published  | tick admitted (to its frame)    |
| write         | published → handed to the kernel              | frame written to a connection   |
| priority      | admitted → handed to the kernel, no frame     | tick written to a connection    |
| tick_to_write | decoded → its frame handed to the kernel      | tick in a payload written       |

``write`` counts frames handed to the kernel straight from the fan-out; a frame that waited in a
slow terminal's ring is counted in ``monotape_slow_consumer_drops_total`` / the ring gauges, not
here (the ring holds bytes, not their publish time). ``priority`` (the order-ticket path: an
admitted tick sent at once to the connections that marked it) follows the same rule: a
priority update queued in a slow terminal's ring has no value (it is still counted in
``monotape_priority_updates_sent_total``). Its values are gathered by the server in a fixed
buffer (``FanoutServer.flush_priority``) and handed here once per frame, before each rotation,
and early whenever that buffer fills.

``tick_to_write`` is the end-to-end figure a tick-to-glass alert reads: one value per tick
that reached a screen, from its decoding to the moment the frame that carries it was handed to
the kernel for the last terminal that got that frame straight from the fan-out (the frame's
slowest direct write: an upper bound over the terminals). Only ticks of symbols whose record was
in a payload the fan-out actually handed to the kernel count (``FanoutServer.written_iids``): a
tick of a symbol nobody watches, or whose watchers were all behind, never went out, and a value
for it would dilute the alert's p99 with ticks that cost no write. A p99 of this stage is a real
p99 per tick; a sum of stage p99s is not one.

``decode`` subtracts the venue's wall clock from ours, so it is only as good as the clocks'
agreement (negative values are clamped to 0 and counted). The rest is this host's monotonic
clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import attrgetter

import numpy as np

from monotape.histograms import Interval, Recorders
from monotape.platform.model import Tick

__all__ = ["StageStamps"]

_EMPTY = np.empty(0, dtype=np.int64)
_EMPTY.setflags(write=False)  # shared by every empty frame: never written to


class StageStamps:
    """Stamps per batch, records per frame.

    The hot path only appends the batch lists it already has (a handler's drain, the ticks a
    lane applied): about 50 ns per batch. Values are extracted once per 40 ms frame over every
    tick of the frame together (``map(attrgetter)`` into ``np.fromiter``, then vectorized
    arithmetic), which is what keeps recording within a few percent of the pipeline's cost.
    Pending batches are bounded by the frame: at most 40 ms of ticks.
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
        # decoded times of the ticks the last frame carried, and its publish time: written()
        # closes the frame that framed() opened
        self._framed_decoded = _EMPTY
        self._framed_iids = _EMPTY
        self._framed_published = 0
        self._decoded: list[Sequence[Tick]] = []  # batches since the last frame
        self._admitted: list[Sequence[Tick]] = []

    def decoded(self, ticks: Sequence[Tick]) -> None:
        self._decoded.append(ticks)

    def admitted(self, applied: Sequence[Tick]) -> None:
        self._admitted.append(applied)

    def _take(self, wall_offset_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Record decode and sequence for every pending batch; return the admitted ticks'
        admitted and decoded times and their instruments."""
        if self._decoded:
            ticks = list(chain.from_iterable(self._decoded))
            self._decoded.clear()
            n = len(ticks)
            venue = np.fromiter(map(_VENUE_TS, ticks), dtype=np.int64, count=n)
            decoded = np.fromiter(map(_DECODED, ticks), dtype=np.int64, count=n)
            # decoded_ns is monotonic; the venue stamps wall time: one offset per frame joins them
            self._decode.add_ns(decoded + wall_offset_ns - venue)
        if not self._admitted:
            return _EMPTY, _EMPTY, _EMPTY
        ticks = list(chain.from_iterable(self._admitted))
        self._admitted.clear()
        n = len(ticks)
        admitted = np.fromiter(map(_ADMITTED, ticks), dtype=np.int64, count=n)
        decoded = np.fromiter(map(_DECODED, ticks), dtype=np.int64, count=n)
        iids = np.fromiter(map(_IID, ticks), dtype=np.int64, count=n)
        self._sequence.add_ns(admitted - decoded)
        return admitted, decoded, iids

    def framed(self, boundary_ns: int, published_ns: int, wall_offset_ns: int) -> int:
        """The frame at ``boundary_ns`` carried every tick admitted since the last one.

        ``wall_offset_ns`` is wall minus monotonic time now (the decode stage's venue stamps are
        wall clock). Returns how many admitted ticks the frame carried."""
        admitted, decoded, iids = self._take(wall_offset_ns)
        self._framed_decoded = decoded
        self._framed_iids = iids
        self._framed_published = published_ns
        n = len(admitted)
        if n:
            # An overdue frame (the previous publish overran) carries ticks admitted after its
            # boundary: for them conflation took no time, and encoding starts at admission.
            framed = np.maximum(admitted, boundary_ns)
            self._conflate.add_ns(framed - admitted)
            self._encode.add_ns(published_ns - framed)
        return n

    def written(self, latencies_ns: np.ndarray, written_iids: np.ndarray = _EMPTY) -> None:
        """The last ``framed()`` frame's direct writes, published → handed to the kernel.

        ``written_iids``: the instruments whose record was in a payload handed to the kernel
        for at least one terminal (the fan-out's ``written_iids``). Only the frame's ticks of
        those instruments get a ``tick_to_write`` value; none without it."""
        self._write.add_ns(latencies_ns)
        decoded = self._framed_decoded
        if len(latencies_ns) and len(decoded) and len(written_iids):
            last_write = self._framed_published + int(latencies_ns.max())
            # one vectorized membership test per frame, no per-tick Python work
            carried = np.isin(self._framed_iids, written_iids)
            self._tick_to_write.add_ns(last_write - decoded[carried])
        self._framed_decoded = self._framed_iids = _EMPTY

    def prioritized(self, latencies_ns: np.ndarray) -> None:
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
        return self.recorders.rotate_all(wall_now_ms)  # each recorder flushes its buffer first


_VENUE_TS = attrgetter("venue_ts_ns")
_DECODED = attrgetter("decoded_ns")
_ADMITTED = attrgetter("admitted_ns")
_IID = attrgetter("iid")
