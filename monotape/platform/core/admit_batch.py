"""The admit rule over a batch's columns: ``admit_run`` (issue 35).

``admit_into`` is the sequencer's form: the same rule, and every applied tick's values written
into its instrument's row of the lanes' state in the same pass.

One call admits one batch (one handler's ticks of one venue at one epoch) against per-instrument
versions held in two arrays, in batch order, with exactly the per-tick rule of ``core/admit.py``;
it says per tick what became of it (``VERDICT_*``) and returns the counts. The sequencer's lanes
admit with it and the feed handler counts its own stream going backwards with it.

Native (``_admit.c``) when it was built; ``python_admit_run`` is the pure-Python twin with the
same results and exceptions, run when the extension is missing and by the tests beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np

__all__ = [
    "NATIVE",
    "VERDICT_APPLIED",
    "VERDICT_DUPLICATE",
    "VERDICT_REGRESSION",
    "VERDICT_SUPERSEDED",
    "AdmitBatch",
    "AdmitInto",
    "AdmitRun",
    "VersionTable",
    "admit_batch",
    "admit_into",
    "admit_run",
    "python_admit_batch",
    "python_admit_into",
    "python_admit_run",
]

VERDICT_APPLIED = 0  # applied, and the latest of its instrument in the batch
VERDICT_SUPERSEDED = 1  # applied, then superseded by a later tick of the same batch
VERDICT_DUPLICATE = 2  # the version already held
VERDICT_REGRESSION = 3  # older than the version held

AdmitRun: TypeAlias = Callable[[int, Any, Any, Any, Any, Any, Any], tuple[int, int, int]]
_I64_MAX = (1 << 63) - 1


def python_admit_run(
    epoch: int, seq: Any, iid: Any, held_epoch: Any, held_seq: Any, verdict: Any, seen: Any
) -> tuple[int, int, int]:
    """The pure-Python ``admit_run``: same arguments, same results, same exceptions."""
    if not 0 <= epoch <= (1 << 64) - 1:
        raise OverflowError("admit_run: epoch is a uint64")
    if epoch > _I64_MAX:
        raise OverflowError("admit_run: epoch beyond int64")
    seqs = memoryview(seq).cast("B").cast("Q")
    iids = memoryview(iid).cast("B").cast("H")
    he = memoryview(held_epoch).cast("B").cast("q")
    hs = memoryview(held_seq).cast("B").cast("Q")
    out = memoryview(verdict).cast("B")
    mark = memoryview(seen).cast("B")
    if he.readonly or hs.readonly or out.readonly or mark.readonly:
        raise TypeError("admit_run: the held tables, verdict and scratch must be writable")
    n, space = len(iids), len(mark)
    if len(seqs) != n or len(out) != n or len(he) != space or len(hs) != space:
        raise ValueError("admit_run: the columns and tables disagree in length")
    ids = iids.tolist()
    for i, k in enumerate(ids):
        if k >= space:
            raise IndexError(f"admit_run: iid {k} at {i} is outside {space}")
    applied = duplicates = regressions = 0
    for i, (k, s) in enumerate(zip(ids, seqs.tolist(), strict=True)):
        ce = he[k]
        if epoch > ce or (epoch == ce and s > hs[k]):
            he[k] = epoch
            hs[k] = s
            out[i] = VERDICT_APPLIED
            applied += 1
        elif epoch == ce and s == hs[k]:
            out[i] = VERDICT_DUPLICATE
            duplicates += 1
        else:
            out[i] = VERDICT_REGRESSION
            regressions += 1
    latest: set[int] = set()
    for i in range(n - 1, -1, -1):
        if out[i] == VERDICT_APPLIED:
            k = ids[i]
            if k in latest:
                out[i] = VERDICT_SUPERSEDED
            else:
                latest.add(k)
    return applied, duplicates, regressions


AdmitInto: TypeAlias = Callable[
    [int, int, int, int, tuple[Any, ...], tuple[Any, ...]], tuple[int, int, int]
]
_STATE_CODES: tuple[Any, ...] = ("q", "Q", "q", "q", "q", "Q", "q", "q", "q", "H", "H", "B")
_IN_CODES: tuple[Any, ...] = ("Q", "H", "q", "q", "q", "Q", "q", "q", "B")


def python_admit_into(
    epoch: int,
    venue: int,
    handler: int,
    now: int,
    columns: tuple[Any, ...],
    state: tuple[Any, ...],
) -> tuple[int, int, int]:
    """The pure-Python ``admit_into`` (see ``_admit.c``): same arguments, same results."""
    if type(columns) is not tuple or type(state) is not tuple:
        raise TypeError("admit_into: columns and state are tuples")
    if len(columns) != 9 or len(state) != 12:
        raise TypeError("admit_into: 9 columns (verdict last), 12 state arrays")
    if not 0 <= epoch <= _I64_MAX or not 0 <= venue <= 0xFFFF or not 0 <= handler <= 0xFFFF:
        raise OverflowError("admit_into: epoch beyond int64 or a code beyond u16")
    cols = [memoryview(c).cast("B").cast(code) for c, code in zip(columns, _IN_CODES, strict=True)]
    st = [memoryview(c).cast("B").cast(code) for c, code in zip(state, _STATE_CODES, strict=True)]
    if any(v.readonly for v in (cols[8], *st)):
        raise TypeError("admit_into: the state and the verdict must be writable")
    n, space = len(cols[1]), len(st[11])
    if any(len(c) != n for c in cols) or any(len(c) != space for c in st):
        raise ValueError("admit_into: the columns or the state arrays disagree in length")
    ids = cols[1].tolist()
    for i, k in enumerate(ids):
        if k >= space:
            raise IndexError(f"admit_into: iid {k} at {i} is outside {space}")
    he, hs = st[0], st[1]
    out = cols[8]
    applied = duplicates = regressions = 0
    for i, k in enumerate(ids):
        s = cols[0][i]
        ce = he[k]
        if epoch > ce or (epoch == ce and s > hs[k]):
            he[k] = epoch
            hs[k] = s
            for c in range(6):  # bid ask last size venue_ts recv_ts -> decoded
                st[2 + c][k] = cols[2 + c][i]
            st[8][k] = now
            st[9][k] = venue
            st[10][k] = handler
            st[11][k] = 1
            out[i] = VERDICT_APPLIED
            applied += 1
        elif epoch == ce and s == hs[k]:
            out[i] = VERDICT_DUPLICATE
            duplicates += 1
        else:
            out[i] = VERDICT_REGRESSION
            regressions += 1
    return applied, duplicates, regressions


AdmitBatch: TypeAlias = Callable[
    [int, int, int, int, bytes, int, Any, tuple[Any, ...]], tuple[int, int, int]
]
_BATCH_COLUMNS = (
    ("Q", 0),
    ("H", 64),
    ("q", 16),
    ("q", 24),
    ("q", 32),
    ("Q", 40),
    ("q", 48),
    ("q", 56),
)  # fmt: skip (admit_into's column order: the byte offset per tick)


def python_admit_batch(
    epoch: int,
    venue: int,
    handler: int,
    now: int,
    buffer: bytes,
    n: int,
    verdict: Any,
    state: tuple[Any, ...],
) -> tuple[int, int, int]:
    """The pure-Python ``admit_batch`` (see ``_admit.c``): ``admit_into`` over the columns of
    a tick batch's ``buffer`` (``n`` ticks, wire/batch.py's layout)."""
    if n < 0 or len(buffer) != 64 + 67 * n or len(memoryview(verdict).cast("B")) != n:
        raise ValueError("admit_batch: the buffer or verdict disagrees with n")
    view = memoryview(buffer)
    columns = tuple(view[64 + at * n : 64 + (at + (2 if code == "H" else 8)) * n]
                    for code, at in _BATCH_COLUMNS)  # fmt: skip
    return python_admit_into(epoch, venue, handler, now, (*columns, verdict), state)


_native: AdmitRun | None
_native_into: AdmitInto | None
_native_batch: AdmitBatch | None
try:
    from monotape.platform.core import _admit
except ImportError:  # no compiler at install time: the twins run
    _native = _native_into = _native_batch = None
else:
    _native = _admit.admit_run
    _native_into = _admit.admit_into
    _native_batch = _admit.admit_batch

NATIVE: bool = _native is not None
admit_run: AdmitRun = _native if _native is not None else python_admit_run
admit_into: AdmitInto = _native_into if _native_into is not None else python_admit_into
admit_batch: AdmitBatch = _native_batch if _native_batch is not None else python_admit_batch


class VersionTable:
    """The held version of every instrument (``space`` wire ids), as two arrays ``admit_run``
    updates in place: ``epoch`` -1 means nothing held yet (epochs are >= 0)."""

    __slots__ = ("_run", "_seen", "_verdict", "epoch", "seq", "space")

    def __init__(self, space: int = 1 << 16, run: AdmitRun | None = None) -> None:
        self.space = space
        self.epoch = np.full(space, -1, dtype=np.int64)
        self.seq = np.zeros(space, dtype=np.uint64)
        self._seen = np.zeros(space, dtype=np.uint8)
        self._verdict = np.empty(0, dtype=np.uint8)
        self._run = run or admit_run

    def admit(
        self, epoch: int, seq: np.ndarray[Any, Any], iid: np.ndarray[Any, Any]
    ) -> tuple[np.ndarray[Any, np.dtype[np.uint8]], int, int, int]:
        """Admit one run at ``epoch``: (verdict per tick, applied, duplicates, regressions).
        The verdict array is this table's scratch, valid until the next call."""
        n = len(iid)
        if len(self._verdict) < n:
            self._verdict = np.empty(max(n, 2 * len(self._verdict)), dtype=np.uint8)
        verdict = self._verdict[:n]
        applied, dup, reg = self._run(epoch, seq, iid, self.epoch, self.seq, verdict, self._seen)
        return verdict, applied, dup, reg

    def held(self, iid: int) -> tuple[int, int] | None:
        e = int(self.epoch[iid])
        return None if e < 0 else (e, int(self.seq[iid]))

    def raise_to(self, iid: int, epoch: int, seq: int) -> bool:
        """Hold at least ``(epoch, seq)`` for ``iid`` (a seed from what screens were shown);
        True if that moved the held version up."""
        held = self.held(iid)
        if held is not None and held >= (epoch, seq):
            return False
        self.epoch[iid] = epoch
        self.seq[iid] = seq
        return True
