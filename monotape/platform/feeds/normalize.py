"""A feed handler's drain of one venue batch in one pass, when every update passes (issue 35).

``normalize`` is the common case of ``FeedHandler.drain_batches``: every update is this venue's,
both its stamps are sane, it has an update id where the venue numbers them, and it lies past the
newest epoch's fence, so the whole batch takes one epoch. Then the handler's own-stream check
(the admit rule against the newest version it delivered of each instrument: an older one is
its stream going backwards, counted and delivered all the same) and the delivered batch (a copy
of the venue's buffer with the handler's header, ``seq`` by the seq rule and every ``recv_ts``
stamped) are one native call (``core/_admit.c``): the drain of a 20-update batch went from
~30 us on the numpy path to ~5 us, the Python around the call included (docs/benchmarks.md,
"Ingest in one pass per batch").

When any update fails a check it returns None and changes nothing: the handler's numpy path
then refuses and counts each failure by reason, and splits a drain that straddles a fence. The
pure-Python twin (``python_normalize``) is what runs without a compiler; the tests hold the two
to the same bytes, counts and held versions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np

from monotape.platform.wire.batch import HAS_UPDATE_ID, HEADER, ROW_BYTES

__all__ = ["NATIVE", "Normalize", "normalize", "python_normalize"]

_Array = np.ndarray[Any, Any]


# (buffer, n, code_of, code, need_id, fence, epoch, header, now, held_epoch, held_seq):
# core/_admit.c documents each argument
Normalize: TypeAlias = Callable[
    [bytes, int, _Array, int, bool, int, int, bytes, int, _Array, _Array],
    tuple[bytes, int] | None,
]


def python_normalize(
    buffer: bytes,
    n: int,
    code_of: _Array,
    code: int,
    need_id: bool,
    fence: int,
    epoch: int,
    header: bytes,
    now: int,
    held_epoch: _Array,
    held_seq: _Array,
    /,
) -> tuple[bytes, int] | None:
    """The native ``normalize``'s twin (``core/_admit.c`` documents the arguments): the
    delivered batch's bytes and how many updates went backwards, or None (nothing changed)."""
    if not 0 <= epoch < 1 << 63:
        raise OverflowError("normalize: epoch beyond int64")
    if n < 0 or len(buffer) != HEADER.size + n * ROW_BYTES or len(header) != HEADER.size:
        raise ValueError("normalize: a buffer disagrees with its length")
    if len(held_epoch) != len(held_seq):
        raise ValueError("normalize: a buffer disagrees with its length")
    base = HEADER.size
    ids = np.frombuffer(buffer, np.uint64, n, base + 8 * n)
    vts = np.frombuffer(buffer, np.int64, n, base + 48 * n)
    rts = np.frombuffer(buffer, np.int64, n, base + 56 * n)
    iids = np.frombuffer(buffer, np.uint16, n, base + 64 * n).astype(np.int64)
    flags = np.frombuffer(buffer, np.uint8, n, base + 66 * n)
    if code == 0:  # no venue of ours: the door refuses everything
        return None
    if n:
        inside = iids < min(len(code_of), len(held_seq))
        if not inside.all() or bool((code_of[iids] != code).any()):
            return None
        if int(vts.min()) < max(fence, 0) or int(rts.min()) < 0:
            return None
        if need_id and not bool((flags & HAS_UPDATE_ID).all()):
            return None
    seq = ids if need_id else vts.astype(np.uint64)
    backwards = 0
    for k, s in zip(iids.tolist(), seq.tolist(), strict=True):  # in order: a run may repeat k
        held = (int(held_epoch[k]), int(held_seq[k]))
        if (epoch, s) > held:
            held_epoch[k] = epoch
            held_seq[k] = s
        elif (epoch, s) != held:
            backwards += 1
    out = bytearray(buffer)
    out[:base] = header
    out[base : base + 8 * n] = seq.tobytes()
    np.frombuffer(out, np.int64, n, base + 56 * n).fill(now)
    return bytes(out), backwards


_native: Normalize | None
try:
    from monotape.platform.core import _admit
except ImportError:  # no compiler at install time: the twin runs
    _native = None
else:
    _native = getattr(_admit, "normalize", None)

NATIVE: bool = _native is not None
normalize: Normalize = _native if _native is not None else python_normalize
