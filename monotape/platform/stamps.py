"""Stage latency stamps: a value for every tick at each of the five stages (DESIGN: stages).

Values are gathered per batch (a handler's drain, a bus batch, a frame) into numpy arrays and
recorded with one vectorized call each (``StageRecorder.record_many_ns``), never per value:
per-value ``record_value()`` costs ~1 µs (MEASURED), too much at 190k ticks/s × 5 stages.

| stage      | from → to                                     | one value per                 |
|------------|-----------------------------------------------|-------------------------------|
| decode     | venue timestamp → decoded by the handler      | tick a handler delivered      |
| sequence   | decoded → admitted by the lane                | tick admitted                 |
| conflate   | admitted → the frame boundary that carries it | tick admitted (to its frame)  |
| encode     | frame boundary → payloads encoded, published  | tick admitted (to its frame)  |
| write      | published → handed to the kernel              | frame written to a connection |

``decode`` subtracts the venue's wall clock from ours, so it is only as good as the clocks'
agreement (negative values are clamped to 0 and counted). The rest is this host's monotonic
clock.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from monotape.histograms import Interval, Recorders, StageRecorder
from monotape.platform.model import Tick

__all__ = ["StageStamps"]

_PENDING_CAP = 1 << 17  # admitted ticks awaiting their frame: 190k/s × 40 ms is ~7,600
_BATCH = 1 << 14  # values gathered per stage before one vectorized record


class _Batch:
    """A fixed buffer in front of a StageRecorder: small batches (a 1 ms handler drain holds a
    few dozen ticks) are copied in, and recorded vectorized once it holds ``_BATCH`` values
    (MEASURED: ~20 ns/value in large batches, ~200 ns in batches of 256)."""

    __slots__ = ("_buf", "_n", "_recorder")

    def __init__(self, recorder: StageRecorder) -> None:
        self._recorder = recorder
        self._buf = np.empty(_BATCH, dtype=np.int64)
        self._n = 0

    def add(self, values: np.ndarray) -> None:
        n = len(values)
        if self._n + n > _BATCH:
            self.flush()
            if n > _BATCH:
                self._recorder.record_many_ns(values)
                return
        self._buf[self._n : self._n + n] = values
        self._n += n

    def flush(self) -> None:
        if self._n:
            self._recorder.record_many_ns(self._buf[: self._n])
            self._n = 0


class StageStamps:
    def __init__(self, recorders: Recorders) -> None:
        self.recorders = recorders
        self._decode = _Batch(recorders["decode"])
        self._sequence = _Batch(recorders["sequence"])
        self._conflate = _Batch(recorders["conflate"])
        self._encode = _Batch(recorders["encode"])
        self._write = _Batch(recorders["write"])
        # admitted_ns of every tick admitted since the last frame (fixed memory)
        self._pending = np.empty(_PENDING_CAP, dtype=np.int64)
        self._n = 0

    def decoded(self, ticks: Sequence[Tick], wall_now_ns: int) -> None:
        ts = np.fromiter((t.venue_ts_ns for t in ticks), dtype=np.int64, count=len(ticks))
        self._decode.add(wall_now_ns - ts)

    def admitted(self, applied: Sequence[Tick]) -> None:
        n = len(applied)
        admitted = np.fromiter((t.admitted_ns for t in applied), dtype=np.int64, count=n)
        decoded = np.fromiter((t.decoded_ns for t in applied), dtype=np.int64, count=n)
        self._sequence.add(admitted - decoded)
        if self._n + n > _PENDING_CAP:
            # Never reached at the seed's rates; if it is, these ticks' conflate values are
            # taken now (an undercount of their wait) rather than lost or grown without bound.
            self._conflate.add(np.zeros(self._n, dtype=np.int64))
            self._n = 0
        self._pending[self._n : self._n + n] = admitted
        self._n += n

    def framed(self, boundary_ns: int, published_ns: int) -> int:
        """The frame at ``boundary_ns`` carried every tick admitted since the last one."""
        n = self._n
        if n:
            self._conflate.add(boundary_ns - self._pending[:n])
            self._encode.add(np.full(n, published_ns - boundary_ns, dtype=np.int64))
        self._n = 0
        return n

    def written(self, latencies_ns: np.ndarray) -> None:
        self._write.add(latencies_ns)

    def rotate(self, wall_now_ms: int) -> list[Interval]:
        """Flush every batch and close the interval of every stage (the 10 s rotation)."""
        for batch in (self._decode, self._sequence, self._conflate, self._encode, self._write):
            batch.flush()
        return self.recorders.rotate_all(wall_now_ms)
