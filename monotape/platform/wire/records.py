"""Records: one symbol's update inside SNAPSHOT, FRAME and PRIORITY (docs/wire.md, Records).

The encoder builds a record once per frame per symbol and the fan-out joins it into many
payloads (encode once, share the bytes), so a record is self-delimiting and knows nothing of
the message it sits in. This module lays records out and encodes them; ``record_reader`` reads
them back.

Measured with timeit on the shared 2 vCPU dev box (CPython 3.11, noisy, min of 5 runs):
``encode_delta_record`` 1.45-1.6 µs (21 bytes, ns seq), ``encode_full_record`` ~1.8 µs. The
table fast paths are deliberate and measured: 0.97 against 4.54 µs per delta record (update-id
seqs; docs/benchmarks.md), by bench/micro/bench_codec.py against a frozen copy of the encoder before
them, the peer of every row, which must produce identical bytes.

``encode_full_record`` and ``encode_delta_record`` are the native encoders of ``_records.c``
when the extension was built (15-25x cheaper, same bytes, same errors: they hand everything but
the common case to the checked encoders here), else ``python_encode_*_record``, the
pure-Python twins, which tests/wire run through the same tests.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

import msgspec

from monotape.platform.model import Tick
from monotape.platform.wire.varints import (
    FIXED64,
    I64_MAX,
    I64_MIN,
    U64_END,
    UVARINT_14,
    put_uvarint,
    uvarint,
    uvarint_fast,
    wrap_int64,
    zigzag,
)

__all__ = [
    "FLAG_DELTA",
    "FLAG_NEW_EPOCH",
    "FLAG_SEQ64",
    "KNOWN_FLAGS",
    "MIN_RECORD",
    "NATIVE",
    "EncodeRows",
    "EncodedRows",
    "Put",
    "Record",
    "apply_record",
    "encode_delta_record",
    "encode_full_record",
    "encode_rows",
    "native_module",
    "python_encode_delta_record",
    "python_encode_full_record",
    "python_encode_rows",
]

FLAG_DELTA: Final = 0x01  # record names a base version; prices are deltas vs the base
FLAG_NEW_EPOCH: Final = 0x02  # delta only: new version written as epoch + seq, not a seq step
FLAG_SEQ64: Final = 0x04  # the first seq field (full: seq, delta: base seq) is fixed64 LE
KNOWN_FLAGS: Final = FLAG_DELTA | FLAG_NEW_EPOCH | FLAG_SEQ64
MIN_RECORD: Final = 9  # iid(2) + flags(1) + six 1-byte varints: bounds a claimed count

# Fast-path bound on a delta's base prices: with |step| <= 2**13 both prices stay int64.
_P_LO: Final = I64_MIN + 0x2000
_P_HI: Final = I64_MAX - 0x2000
_HEAD: Final = struct.Struct("<HB")  # iid uint16 LE, flags
_HEAD_E: Final = struct.Struct("<HBB")  # iid, flags, 1-byte epoch varint
_HEAD_SEQ64: Final = struct.Struct("<HBBQ")  # iid, flags, 1-byte epoch varint, fixed64 seq


class Record(msgspec.Struct, gc=False):
    """One decoded record. When ``has_base``, bid/ask/last are int64 DELTAS vs the base's prices
    (add with ``wrap_int64``; see ``apply_record``); otherwise they are absolute."""

    iid: int
    epoch: int
    seq: int
    has_base: bool
    base_epoch: int
    base_seq: int
    bid: int
    ask: int
    last: int
    size: int


def python_encode_full_record(tick: Tick) -> bytes:
    """iid, flags, epoch, seq, zigzag bid/ask/last (absolute), size.

    Fast path: a 1-byte epoch and fields whose varints come from the tables (anything else,
    valid or not, is left to ``_encode_full_checked``: identical bytes or its ValueError)."""
    try:
        e = tick.epoch
        n = tick.seq
        size = tick.size
        if 0 <= e < 0x80 and size >= 0:
            vb = UVARINT_14
            p = tick.bid
            zb = p << 1 if p >= 0 else ~(p << 1)
            p = tick.ask
            za = p << 1 if p >= 0 else ~(p << 1)
            p = tick.last
            zl = p << 1 if p >= 0 else ~(p << 1)
            # zigzag < 2**64 iff the price is an int64: uvarint_fast refuses the rest (checked path)
            if n >> 56:  # ns-timestamp seq (a negative seq fails the Q pack -> checked path)
                head = _HEAD_SEQ64.pack(tick.iid, FLAG_SEQ64, e, n)
                vs = b""
            else:
                head = _HEAD_E.pack(tick.iid, 0, e)
                vs = vb[n] if n < 0x4000 else uvarint_fast(n)
            return b"".join(
                (
                    head,
                    vs,
                    vb[zb] if zb < 0x4000 else uvarint_fast(zb),
                    vb[za] if za < 0x4000 else uvarint_fast(za),
                    vb[zl] if zl < 0x4000 else uvarint_fast(zl),
                    vb[size] if size < 0x4000 else uvarint_fast(size),
                )
            )
    except (ValueError, TypeError, struct.error):
        pass
    return _encode_full_checked(tick)


def _encode_full_checked(tick: Tick) -> bytes:
    """The reference full-record encoder (every field validated; ValueError says which)."""
    try:
        e = tick.epoch
        n = tick.seq
        put = put_uvarint
        if n >> 56:
            # ns-timestamp seqs: one pack writes iid, flags, the 1-byte epoch and a fixed64 seq
            # (8 bytes instead of a 9-byte varint, and ~4x cheaper to produce).
            if 0 <= e < 0x80:
                buf = bytearray(_HEAD_SEQ64.pack(tick.iid, FLAG_SEQ64, e, n))
            else:
                buf = bytearray(_HEAD.pack(tick.iid, FLAG_SEQ64))
                put(buf, e)
                buf += FIXED64.pack(n)
            ap = buf.append
        else:
            buf = bytearray(_HEAD.pack(tick.iid, 0))
            ap = buf.append
            ap(e) if 0 <= e < 0x80 else put(buf, e)
            ap(n) if 0 <= n < 0x80 else put(buf, n)
        for p in (tick.bid, tick.ask, tick.last):
            n = p << 1 if p >= 0 else ~(p << 1)
            ap(n) if n < 0x80 else put(buf, n)
        n = tick.size
        ap(n) if 0 <= n < 0x80 else put(buf, n)
        return bytes(buf)
    except (ValueError, TypeError, struct.error) as exc:
        raise ValueError(f"cannot encode full record for iid {tick.iid}: {exc}") from exc


def python_encode_delta_record(base: Tick | None, new: Tick) -> bytes:
    """The record that moves a client holding ``base`` to ``new`` (``base`` None: full record).

    Called for every dirty symbol every 40 ms (up to ~2,400 per frame), hence one pack of the
    header, table lookups for the varints and one join. The fast path covers same-epoch deltas
    with a 1-byte epoch, base prices at least 2**13 inside int64 and price steps whose zigzag is
    below 2**14 (so base and new prices are provably int64 and no delta wraps), for both update-id
    and ns-timestamp seqs. Anything else, valid or not, drops to the readable
    ``_encode_delta_checked``, which produces identical bytes or a ValueError saying why.
    """
    if base is None:
        return python_encode_full_record(new)
    try:
        iid = new.iid
        be = base.epoch
        bs = base.seq
        ns = new.seq
        bb = base.bid
        ba = base.ask
        bl = base.last
        size = new.size
        if (
            iid == base.iid
            and new.epoch == be
            and 0 <= be < 0x80
            and bs <= ns < U64_END
            and size >= 0
            and 0 <= base.size < U64_END  # the checked path validates the base's size too
            and _P_LO <= bb <= _P_HI
            and _P_LO <= ba <= _P_HI
            and _P_LO <= bl <= _P_HI
        ):
            vb = UVARINT_14
            n = new.bid - bb
            zb = n << 1 if n >= 0 else ~(n << 1)
            n = new.ask - ba
            za = n << 1 if n >= 0 else ~(n << 1)
            n = new.last - bl
            zl = n << 1 if n >= 0 else ~(n << 1)
            if zb < 0x4000 and za < 0x4000 and zl < 0x4000:
                n = ns - bs  # >= 0 and < 2**64: checked above
                if bs >> 56:  # ns-timestamp seq (a negative one fails the Q pack)
                    head = _HEAD_SEQ64.pack(iid, FLAG_DELTA | FLAG_SEQ64, be, bs)
                    vs = b""
                else:
                    head = _HEAD_E.pack(iid, FLAG_DELTA, be)
                    vs = vb[bs] if bs < 0x4000 else uvarint_fast(bs)
                return b"".join(
                    (
                        head,
                        vs,
                        vb[n] if n < 0x4000 else uvarint_fast(n),
                        vb[zb],
                        vb[za],
                        vb[zl],
                        vb[size] if size < 0x4000 else uvarint_fast(size),
                    )
                )
    except (ValueError, TypeError, struct.error):
        pass
    return _encode_delta_checked(base, new)


def _version_bytes(flags: int, epoch: int, seq: int) -> tuple[int, bytes]:
    """(flags with FLAG_SEQ64 if chosen, epoch + seq bytes): fixed64 iff seq >= 2**56, where
    it is strictly shorter than the varint."""
    if seq >> 56:
        return flags | FLAG_SEQ64, uvarint(epoch) + FIXED64.pack(seq)
    return flags, uvarint(epoch) + uvarint(seq)


def _encode_delta_checked(base: Tick, new: Tick) -> bytes:
    """Readable reference encoder: validates every field, wraps price deltas to int64."""
    if base.iid != new.iid:
        raise ValueError(f"delta base is iid {base.iid}, new tick is iid {new.iid}")
    if not 0 <= new.iid <= 0xFFFF:
        raise ValueError(f"iid {new.iid} is not a uint16")
    for tick, what in ((base, "base"), (new, "new")):
        for name in ("epoch", "seq", "size"):
            if not 0 <= getattr(tick, name) < U64_END:
                raise ValueError(f"iid {new.iid}: {what} {name} is not a uint64")
        for name in ("bid", "ask", "last"):
            if not I64_MIN <= getattr(tick, name) <= I64_MAX:
                raise ValueError(f"iid {new.iid}: {what} {name} is not an int64")
    flags, version = _version_bytes(FLAG_DELTA, base.epoch, base.seq)
    if new.epoch == base.epoch:
        if new.seq < base.seq:
            raise ValueError(f"iid {new.iid}: seq {new.seq} is below its base seq {base.seq}")
        version += uvarint(new.seq - base.seq)
    else:
        flags |= FLAG_NEW_EPOCH
        version += uvarint(new.epoch) + uvarint(new.seq)
    parts = [_HEAD.pack(new.iid, flags), version]
    for nv, bv in ((new.bid, base.bid), (new.ask, base.ask), (new.last, base.last)):
        parts.append(uvarint(zigzag(wrap_int64(nv - bv))))
    parts.append(uvarint(new.size))
    return b"".join(parts)


def apply_record(base: tuple[int, int, int] | None, record: Record) -> tuple[int, int, int]:
    """(bid, ask, last) after ``record``; ``base`` is the held prices of the base version.

    The caller must already have checked (admit + gap rule) that it holds exactly
    ``(record.base_epoch, record.base_seq)``; this only does the int64 arithmetic."""
    if not record.has_base:
        return record.bid, record.ask, record.last
    if base is None:
        raise ValueError(f"iid {record.iid}: delta record needs its base prices")
    return (
        wrap_int64(base[0] + record.bid),
        wrap_int64(base[1] + record.ask),
        wrap_int64(base[2] + record.last),
    )


# --- a frame's records from state arrays ----------------------------------------------------------
# (iid, epoch, seq, full record): what the host's sequencer puts in the snapshot table
Put = tuple[int, int, int, bytes]
EncodedRows = tuple[dict[int, bytes], list[Put], list[int]]
EncodeRows = Callable[[Any, tuple[Any, ...], tuple[Any, ...]], EncodedRows]


def python_encode_rows(iids: Any, new: tuple[Any, ...], base: tuple[Any, ...]) -> EncodedRows:
    """The native ``encode_rows`` (``_records.c`` documents it): each row's delta record
    (iid -> bytes, in ``iids`` order; the full record where ``base`` has epoch -1), its
    (iid, epoch, seq, full record), and the rows whose delta the reference refuses."""
    if len(new) != 6 or len(base) != 6:
        raise TypeError("encode_rows: int64 rows, then two tuples of 6 arrays")
    space = len(new[0])
    if any(len(c) != space for c in (*new, *base)):
        raise ValueError("encode_rows: the arrays disagree in length")
    deltas: dict[int, bytes] = {}
    puts: list[Put] = []
    refused: list[int] = []
    for r in [int(x) for x in iids]:
        if not 0 <= r < min(space, 1 << 16):
            raise IndexError(f"encode_rows: row {r} is outside {space}")
        e, q, b, a, la, sz = (int(c[r]) for c in new)
        tick = Tick(r, "", e, q, 0, b, a, la, sz, "")
        full = python_encode_full_record(tick)
        pe, pq, pb, pa, pl, ps = (int(c[r]) for c in base)
        prev = None if pe < 0 else Tick(r, "", pe, pq, 0, pb, pa, pl, ps, "")
        try:
            deltas[r] = full if prev is None else python_encode_delta_record(prev, tick)
        except ValueError:
            refused.append(r)
            continue
        puts.append((r, e, q, full))
    return deltas, puts, refused


# --- the native encoders (wire/_records.c) -------------------------------------------------------
# The common case in C, everything else handed to the reference encoders above (the same bytes
# or the same ValueError): 0.08-0.17 µs a record against 1.9-2.5 for the Python fast paths
# (bench_codec). The sequencer encodes every changed symbol's delta and full record each frame:
# its whole publish of a 120k ticks/s frame took 30 ms of the 40 with the twins, 10 ms with
# these (bench_ring; docs/benchmarks.md). Without a compiler the Python twins run.
_native: ModuleType | None
try:
    from monotape.platform.wire import _records
except ImportError:  # no compiler at install time: the twins run
    _native = None
else:
    _records.bind(Tick, _encode_full_checked, _encode_delta_checked)
    _native = _records


def native_module() -> ModuleType | None:
    """The bound extension, or None when it was not built."""
    return _native


NATIVE: bool = _native is not None
encode_full_record: Callable[[Tick], bytes] = (
    _native.encode_full_record if _native is not None else python_encode_full_record
)
encode_delta_record: Callable[[Tick | None, Tick], bytes] = (
    _native.encode_delta_record if _native is not None else python_encode_delta_record
)
encode_rows: EncodeRows = _native.encode_rows if _native is not None else python_encode_rows
