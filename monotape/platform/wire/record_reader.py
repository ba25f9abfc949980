"""Reading records back: the general reader, the unrolled fast reader, a run of records.

``decode_message`` runs for every FRAME in every terminal SDK. The unrolled reader
(``_read_record_fast``) is deliberate and measured: 1.69 against 2.20 µs per record inside a
40-record FRAME (docs/benchmarks.md, bench/micro/bench_codec.py, whose frozen copy of the reader
before it is the peer of every row and must decode identical records). Every record it does not
cover, malformed ones included, falls back to ``_read_record``, which says exactly what is
wrong.
"""

from __future__ import annotations

from monotape.platform.wire.codes import CodecError
from monotape.platform.wire.records import (
    FLAG_DELTA,
    FLAG_NEW_EPOCH,
    FLAG_SEQ64,
    KNOWN_FLAGS,
    MIN_RECORD,
    Record,
)
from monotape.platform.wire.varints import FIXED64, read_uvarint

__all__ = ["decode_record", "read_record", "read_records"]


def _read_record(data: bytes, pos: int) -> tuple[Record, int]:
    """One record at ``pos``; IndexError on truncation is turned into CodecError by callers."""
    start = pos
    iid = data[pos] | data[pos + 1] << 8
    flags = data[pos + 2]
    pos += 3
    if flags & ~KNOWN_FLAGS or flags & 3 == FLAG_NEW_EPOCH:
        raise CodecError(f"record at byte {start}: unknown flags 0x{flags:02x}")
    # varints after the first seq field: full 4, delta 5 (seq step), new-epoch delta 6
    rest = 4 if not flags & 1 else (5 if not flags & 2 else 6)
    vals: list[int] = []
    ap = vals.append
    seq64 = flags & FLAG_SEQ64
    for i in range(rest + 2):
        if i == 1 and seq64:
            if pos + 8 > len(data):
                raise CodecError(f"record at byte {start}: truncated fixed64 seq")
            v = FIXED64.unpack_from(data, pos)[0]
            pos += 8
            if not v >> 56:
                raise CodecError(f"record at byte {start}: fixed64 seq below 2**56")
            ap(v)
            continue
        b = data[pos]
        pos += 1
        if b < 0x80:
            ap(b)
            continue
        v = b & 0x7F
        shift = 7
        while True:
            b = data[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise CodecError(f"record at byte {start}: varint longer than 10 bytes")
        if not b or v >> 64:  # a trailing 0x00 is non-canonical; >= 2**64 is not a uint64
            raise CodecError(f"record at byte {start}: non-canonical or oversized varint")
        ap(v)
    if not seq64 and vals[1] >> 56:
        raise CodecError(f"record at byte {start}: seq >= 2**56 must be fixed64")
    if not flags & 1:
        epoch, seq, zb, za, zl, size = vals
        rec = Record(
            iid,
            epoch,
            seq,
            False,
            0,
            0,
            (zb >> 1) ^ -(zb & 1),
            (za >> 1) ^ -(za & 1),
            (zl >> 1) ^ -(zl & 1),
            size,
        )
        return rec, pos
    if not flags & 2:
        be, bs, ds, zb, za, zl, size = vals
        epoch, seq = be, bs + ds
        if seq >> 64:
            raise CodecError(f"record at byte {start}: seq step overflows uint64")
    else:
        be, bs, epoch, seq, zb, za, zl, size = vals
        if epoch == be:
            raise CodecError(f"record at byte {start}: new-epoch flag with the same epoch")
    rec = Record(
        iid,
        epoch,
        seq,
        True,
        be,
        bs,
        (zb >> 1) ^ -(zb & 1),
        (za >> 1) ^ -(za & 1),
        (zl >> 1) ^ -(zl & 1),
        size,
    )
    return rec, pos


def _vlong(data: bytes, pos: int) -> tuple[int, int] | None:
    """A canonical varint of 3 to 8 bytes at ``pos`` (its first two bytes have the high bit set
    or the second is 0), or None for anything else: the caller then re-reads the record with
    ``_read_record``, which raises the exact error. Reads no byte ``_read_record`` would not."""
    b = data[pos]
    v = b & 0x7F
    shift = 7
    end = pos + 8
    pos += 1
    while pos < end:
        b = data[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return (v, pos) if b else None
        shift += 7
    return None


def _read_record_fast(data: bytes, pos: int) -> tuple[Record, int] | None:
    """``_read_record`` for full and same-epoch delta records, unrolled; None (nothing raised,
    no byte read past what ``_read_record`` reads before it would fail) for anything it does not
    cover, including every malformed record, so the caller falls back to ``_read_record``."""
    flags = data[pos + 2]
    if flags & 0xFA:  # NEW_EPOCH, unknown bits: the general reader
        return None
    iid = data[pos] | data[pos + 1] << 8
    p = pos + 3
    # epoch / base_epoch
    b = data[p]
    if b < 0x80:
        e = b
        p += 1
    else:
        c = data[p + 1]
        if 0 < c < 0x80:
            e = (b & 0x7F) | c << 7
            p += 2
        else:
            r = _vlong(data, p)
            if r is None:
                return None
            e, p = r
    # seq / base_seq
    if flags & FLAG_SEQ64:
        if p + 8 > len(data):
            return None
        s = FIXED64.unpack_from(data, p)[0]
        if not s >> 56:
            return None
        p += 8
    else:
        b = data[p]
        if b < 0x80:
            s = b
            p += 1
        else:
            c = data[p + 1]
            if 0 < c < 0x80:
                s = (b & 0x7F) | c << 7
                p += 2
            else:
                r = _vlong(data, p)
                if r is None:
                    return None
                s, p = r  # < 2**56: _vlong reads at most 8 bytes
    # delta: seq step
    if flags & FLAG_DELTA:
        b = data[p]
        if b < 0x80:
            d = b
            p += 1
        else:
            c = data[p + 1]
            if 0 < c < 0x80:
                d = (b & 0x7F) | c << 7
                p += 2
            else:
                r = _vlong(data, p)
                if r is None:
                    return None
                d, p = r
    # bid, ask, last (zigzag), size
    b = data[p]
    if b < 0x80:
        zb = b
        p += 1
    else:
        c = data[p + 1]
        if 0 < c < 0x80:
            zb = (b & 0x7F) | c << 7
            p += 2
        else:
            r = _vlong(data, p)
            if r is None:
                return None
            zb, p = r
    b = data[p]
    if b < 0x80:
        za = b
        p += 1
    else:
        c = data[p + 1]
        if 0 < c < 0x80:
            za = (b & 0x7F) | c << 7
            p += 2
        else:
            r = _vlong(data, p)
            if r is None:
                return None
            za, p = r
    b = data[p]
    if b < 0x80:
        zl = b
        p += 1
    else:
        c = data[p + 1]
        if 0 < c < 0x80:
            zl = (b & 0x7F) | c << 7
            p += 2
        else:
            r = _vlong(data, p)
            if r is None:
                return None
            zl, p = r
    b = data[p]
    if b < 0x80:
        size = b
        p += 1
    else:
        c = data[p + 1]
        if 0 < c < 0x80:
            size = (b & 0x7F) | c << 7
            p += 2
        else:
            r = _vlong(data, p)
            if r is None:
                return None
            size, p = r
    if flags & FLAG_DELTA:
        seq = s + d
        if seq >> 64:
            return None
        rec = Record(
            iid,
            e,
            seq,
            True,
            e,
            s,
            (zb >> 1) ^ -(zb & 1),
            (za >> 1) ^ -(za & 1),
            (zl >> 1) ^ -(zl & 1),
            size,
        )
    else:
        rec = Record(
            iid,
            e,
            s,
            False,
            0,
            0,
            (zb >> 1) ^ -(zb & 1),
            (za >> 1) ^ -(za & 1),
            (zl >> 1) ^ -(zl & 1),
            size,
        )
    return rec, p


def read_record(data: bytes, pos: int) -> tuple[Record, int]:
    """One record at ``pos`` (the fast reader, else the general one); IndexError on truncation."""
    r = _read_record_fast(data, pos)
    return _read_record(data, pos) if r is None else r


def read_records(data: bytes, full_only: bool, kind: str) -> tuple[int, list[Record]]:
    """(frame_no, records) of a SNAPSHOT or FRAME (``kind`` names it in errors)."""
    frame_no, pos = read_uvarint(data, 1, f"{kind} frame_no")
    count, pos = read_uvarint(data, pos, f"{kind} count")
    if count * MIN_RECORD > len(data) - pos:
        raise CodecError(f"{kind}: count {count} exceeds the {len(data) - pos} bytes left")
    records = []
    fast = _read_record_fast
    read = _read_record
    for _ in range(count):
        r = fast(data, pos)
        rec, pos = read(data, pos) if r is None else r
        if full_only and rec.has_base:
            raise CodecError(f"{kind}: delta record for iid {rec.iid}; snapshots are full")
        records.append(rec)
    if pos != len(data):
        raise CodecError(f"{kind}: {len(data) - pos} trailing bytes after {count} records")
    return frame_no, records


def decode_record(data: bytes) -> Record:
    """Exactly one record (a chunk as the encoder produced it)."""
    try:
        rec, pos = _read_record(bytes(data), 0)
    except IndexError as exc:
        raise CodecError(f"record truncated at {len(data)} bytes") from exc
    if pos != len(data):
        raise CodecError(f"{len(data) - pos} trailing bytes after the record")
    return rec
