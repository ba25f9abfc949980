"""Per-record cost of the hot codec paths, against a frozen copy of the previous implementation.

``encode_delta_record`` runs for every changed symbol every 40 ms (up to ~2,400 per frame) and
``decode_message`` for every FRAME in every terminal SDK, so both are measured per record, for
the two kinds of ``seq`` a venue gives us: its own update id (~1e5-1e7, steps of 1-3) and, on
venues without ids, its ns timestamp (~1.76e18, steps of a few ms; the SEQ64 layout).

Sample: seeded ticks like a steady-state frame: prices around 100.00 at 2 decimals moving by a
few ticks, sizes 100-5,000, epoch 1. Each variant: ``timeit`` best of 5 repeats over the whole
sample, for several rounds with the old and new implementation interleaved; the value is the
median round in µs per record, min/max the extremes, ratio new/old (old is the peer, ratio 1).
The old and new encoders must produce identical bytes and the decoders identical records on
the sample, or the benchmark fails.

    .venv/bin/python -m bench.micro.bench_codec [--quick]
"""

from __future__ import annotations

import random
import statistics
import struct
import sys
import timeit
from collections.abc import Callable
from functools import partial
from typing import Final

from bench.common import Row, row
from monotape.platform.model import Tick
from monotape.platform.wire import codec
from monotape.platform.wire import records as wire_records
from monotape.platform.wire.codec import FLAG_DELTA, FLAG_NEW_EPOCH, FLAG_SEQ64, CodecError, Record

__all__ = ["run", "sample"]

TARGET_US = 1.5
NS_SEQ0 = 1_760_000_000_000_000_000
FRAME_RECORDS = 40  # records per decoded FRAME (a terminal's watchlist-sized payload)


# --- frozen copy of the previous implementation (monotape/platform/wire/codec.py before the table
# fast paths); the peer of every row. Do not "fix" it: it is the baseline. -------------------

_U64: Final = 1 << 64
_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1
_KNOWN_FLAGS: Final = FLAG_DELTA | FLAG_NEW_EPOCH | FLAG_SEQ64
_MIN_RECORD: Final = 9
_ONE: Final[tuple[bytes, ...]] = tuple(bytes((i,)) for i in range(128))
_HEAD: Final = struct.Struct("<HB")
_HEAD_SEQ64: Final = struct.Struct("<HBBQ")
_U64LE: Final = struct.Struct("<Q")


def _old_wrap_int64(n: int) -> int:
    return ((n - _I64_MIN) & (_U64 - 1)) + _I64_MIN


def _old_put_uvarint(buf: bytearray, n: int) -> None:
    if n < 0 or n >> 64:
        raise ValueError(f"{n} is not a uint64")
    ap = buf.append
    while n > 0x7F:
        ap((n & 0x7F) | 0x80)
        n >>= 7
    ap(n)


def _old_uvarint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _ONE[n]
    buf = bytearray()
    _old_put_uvarint(buf, n)
    return bytes(buf)


def _old_zigzag(n: int) -> int:
    return n << 1 if n >= 0 else ~(n << 1)


def old_encode_full_record(tick: Tick) -> bytes:
    try:
        e = tick.epoch
        n = tick.seq
        put = _old_put_uvarint
        if n >> 56:
            if 0 <= e < 0x80:
                buf = bytearray(_HEAD_SEQ64.pack(tick.iid, FLAG_SEQ64, e, n))
            else:
                buf = bytearray(_HEAD.pack(tick.iid, FLAG_SEQ64))
                put(buf, e)
                buf += _U64LE.pack(n)
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


def old_encode_delta_record(base: Tick | None, new: Tick) -> bytes:
    if base is None:
        return old_encode_full_record(new)
    try:
        iid = new.iid
        be = base.epoch
        bs = base.seq
        if iid != base.iid or new.epoch != be or not 0 <= be < 0x80 or not bs >> 56:
            raise ValueError("not the common case")
        buf = bytearray(_HEAD_SEQ64.pack(iid, FLAG_DELTA | FLAG_SEQ64, be, bs))
        ap = buf.append
        put = _old_put_uvarint
        n = new.seq - bs
        ap(n) if 0 <= n < 0x80 else put(buf, n)
        n = new.bid - base.bid
        n = n << 1 if n >= 0 else ~(n << 1)
        ap(n) if n < 0x80 else put(buf, n)
        n = new.ask - base.ask
        n = n << 1 if n >= 0 else ~(n << 1)
        ap(n) if n < 0x80 else put(buf, n)
        n = new.last - base.last
        n = n << 1 if n >= 0 else ~(n << 1)
        ap(n) if n < 0x80 else put(buf, n)
        n = new.size
        ap(n) if 0 <= n < 0x80 else put(buf, n)
        return bytes(buf)
    except (ValueError, TypeError, struct.error):
        return _old_encode_delta_checked(base, new)


def _old_version_bytes(flags: int, epoch: int, seq: int) -> tuple[int, bytes]:
    if seq >> 56:
        return flags | FLAG_SEQ64, _old_uvarint(epoch) + _U64LE.pack(seq)
    return flags, _old_uvarint(epoch) + _old_uvarint(seq)


def _old_encode_delta_checked(base: Tick, new: Tick) -> bytes:
    if base.iid != new.iid:
        raise ValueError(f"delta base is iid {base.iid}, new tick is iid {new.iid}")
    if not 0 <= new.iid <= 0xFFFF:
        raise ValueError(f"iid {new.iid} is not a uint16")
    for tick, what in ((base, "base"), (new, "new")):
        for name in ("epoch", "seq", "size"):
            if not 0 <= getattr(tick, name) < _U64:
                raise ValueError(f"iid {new.iid}: {what} {name} is not a uint64")
        for name in ("bid", "ask", "last"):
            if not _I64_MIN <= getattr(tick, name) <= _I64_MAX:
                raise ValueError(f"iid {new.iid}: {what} {name} is not an int64")
    flags, version = _old_version_bytes(FLAG_DELTA, base.epoch, base.seq)
    if new.epoch == base.epoch:
        if new.seq < base.seq:
            raise ValueError(f"iid {new.iid}: seq {new.seq} is below its base seq {base.seq}")
        version += _old_uvarint(new.seq - base.seq)
    else:
        flags |= FLAG_NEW_EPOCH
        version += _old_uvarint(new.epoch) + _old_uvarint(new.seq)
    parts = [_HEAD.pack(new.iid, flags), version]
    for nv, bv in ((new.bid, base.bid), (new.ask, base.ask), (new.last, base.last)):
        parts.append(_old_uvarint(_old_zigzag(_old_wrap_int64(nv - bv))))
    parts.append(_old_uvarint(new.size))
    return b"".join(parts)


def _old_read_record(data: bytes, pos: int) -> tuple[Record, int]:
    start = pos
    iid = data[pos] | data[pos + 1] << 8
    flags = data[pos + 2]
    pos += 3
    if flags & ~_KNOWN_FLAGS or flags & 3 == FLAG_NEW_EPOCH:
        raise CodecError(f"record at byte {start}: unknown flags 0x{flags:02x}")
    rest = 4 if not flags & 1 else (5 if not flags & 2 else 6)
    vals: list[int] = []
    ap = vals.append
    seq64 = flags & FLAG_SEQ64
    for i in range(rest + 2):
        if i == 1 and seq64:
            if pos + 8 > len(data):
                raise CodecError(f"record at byte {start}: truncated fixed64 seq")
            v = _U64LE.unpack_from(data, pos)[0]
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
        if not b or v >> 64:
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


def _old_read_uvarint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = data[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CodecError(f"{what}: varint longer than 10 bytes")
    if (shift and not b) or v >> 64:
        raise CodecError(f"{what}: non-canonical or oversized varint")
    return v, pos


def _old_read_records(data: bytes, full_only: bool, kind: str) -> tuple[int, list[Record]]:
    frame_no, pos = _old_read_uvarint(data, 1, f"{kind} frame_no")
    count, pos = _old_read_uvarint(data, pos, f"{kind} count")
    if count * _MIN_RECORD > len(data) - pos:
        raise CodecError(f"{kind}: count {count} exceeds the {len(data) - pos} bytes left")
    records = []
    read = _old_read_record
    for _ in range(count):
        rec, pos = read(data, pos)
        if full_only and rec.has_base:
            raise CodecError(f"{kind}: delta record for iid {rec.iid}; snapshots are full")
        records.append(rec)
    if pos != len(data):
        raise CodecError(f"{kind}: {len(data) - pos} trailing bytes after {count} records")
    return frame_no, records


def old_decode_frame(data: bytes) -> codec.Frame:
    """The previous ``decode_message`` on a FRAME (its type and kind checks included)."""
    if not isinstance(data, bytes):
        raise CodecError(f"expected bytes, got {type(data).__name__}")
    if not data:
        raise CodecError("empty message")
    kind = data[0]
    name = codec.Kind(kind).name if kind in codec.Kind._value2member_map_ else str(kind)
    try:
        if kind == codec.Kind.FRAME:
            return codec.Frame(*_old_read_records(data, False, "FRAME"))
    except CodecError:
        raise
    except IndexError as exc:
        raise CodecError(f"{name}: truncated at {len(data)} bytes") from exc
    raise CodecError(f"unexpected message kind {kind}")


# --- the sample -----------------------------------------------------------------------------


def sample(count: int, kind: str, seed: int = 1) -> list[tuple[Tick, Tick]]:
    """``count`` (base, new) pairs for distinct symbols; ``kind`` "uid" or "ns" picks the seq."""
    rng = random.Random(f"{seed}:{kind}")
    out = []
    for iid in range(count):
        if kind == "uid":
            seq = rng.randint(100_000, 10_000_000)
            step = rng.randint(1, 3)
        else:
            seq = NS_SEQ0 + rng.randint(0, 10**12)
            step = rng.randint(1_000_000, 9_000_000)  # a few ms
        bid = rng.randint(9_500, 10_500)
        spread = rng.randint(1, 3)
        last = bid + rng.randint(0, spread)
        base = Tick(iid, "XNAS", 1, seq, seq, bid, bid + spread, last, rng.randint(100, 5_000))
        move = rng.randint(-3, 3)
        new = Tick(
            iid,
            "XNAS",
            1,
            seq + step,
            seq + step,
            bid + move,
            bid + spread + move + rng.randint(-1, 1),
            last + rng.randint(-3, 3),
            rng.randint(100, 5_000),
        )
        out.append((base, new))
    return out


def _each_pair(fn: Callable[[Tick, Tick], bytes], pairs: list[tuple[Tick, Tick]]) -> object:
    return [fn(b, t) for b, t in pairs]


def _each(fn: Callable[[Tick], bytes], ticks: list[Tick]) -> object:
    return [fn(t) for t in ticks]


def _best_us(fn: Callable[[], object], per_call: int, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number / per_call * 1e6


def _measure(
    new_fn: Callable[[], object],
    old_fn: Callable[[], object],
    per_call: int,
    number: int,
    rounds: int,
    native_fn: Callable[[], object] | None = None,
) -> tuple[list[float], list[float], list[float]]:
    new_us: list[float] = []
    old_us: list[float] = []
    native_us: list[float] = []
    for _ in range(rounds):  # interleaved, so drift on a shared box hits all alike
        old_us.append(_best_us(old_fn, per_call, number))
        new_us.append(_best_us(new_fn, per_call, number))
        if native_fn is not None:
            native_us.append(_best_us(native_fn, per_call, number))
    return new_us, old_us, native_us


def _rows(
    benchmark: str,
    variant: str,
    new_us: list[float],
    old_us: list[float],
    native_us: list[float],
    note: str,
) -> list[Row]:
    """old (the peer), new (the Python fast path) and, for the encoders, native (wire/_records.c,
    whose peer is the Python fast path it shadows)."""
    om, nm = statistics.median(old_us), statistics.median(new_us)
    met = "met" if nm <= TARGET_US else "NOT met"
    out = [
        row(benchmark, f"{variant}, old", om, "µs/record", lo=min(old_us), hi=max(old_us),
            ratio=1.0, peer="old", note=f"frozen previous implementation; {note}"),
        row(benchmark, f"{variant}, new", nm, "µs/record", lo=min(new_us), hi=max(new_us),
            ratio=nm / om, peer="old", note=f"target <= {TARGET_US} µs ({met}); {note}"),
    ]  # fmt: skip
    if native_us:
        vm = statistics.median(native_us)
        out.append(
            row(benchmark, f"{variant}, native", vm, "µs/record", lo=min(native_us),
                hi=max(native_us), ratio=vm / nm, peer="new",
                note=f"wire/_records.c, same bytes as new; {om / vm:.1f}x cheaper than old; {note}")
        )  # fmt: skip
    return out


def run(quick: bool = False) -> list[Row]:
    n = 400 if quick else 2_400
    number = 3 if quick else 20
    rounds = 3 if quick else 7
    rows: list[Row] = []
    native = wire_records.native_module()
    for kind, label in (("uid", "update-id seq"), ("ns", "ns-timestamp seq")):
        pairs = sample(n, kind)
        news = [t for _, t in pairs]
        enc_d, old_d = wire_records.python_encode_delta_record, old_encode_delta_record
        enc_f, old_f = wire_records.python_encode_full_record, old_encode_full_record
        chunks = [enc_d(b, t) for b, t in pairs]
        fulls = [enc_f(t) for t in news]
        if chunks != [old_d(b, t) for b, t in pairs] or fulls != [old_f(t) for t in news]:
            raise AssertionError(f"{kind}: new encoder bytes differ from the old encoder's")
        nat_d: Callable[[], object] | None = None
        nat_f: Callable[[], object] | None = None
        if native is not None:
            nd, nf = native.encode_delta_record, native.encode_full_record
            if chunks != [nd(b, t) for b, t in pairs] or fulls != [nf(t) for t in news]:
                raise AssertionError(f"{kind}: native encoder bytes differ from the Python ones")
            nat_d = partial(_each_pair, nd, pairs)
            nat_f = partial(_each, nf, news)
        note = f"{n:,} records, {sum(map(len, chunks)) / n:.1f} B/record"
        rows += _rows(
            "codec: encode_delta_record",
            label,
            *_measure(
                lambda p=pairs, f=enc_d: [f(b, t) for b, t in p],  # type: ignore[misc]
                lambda p=pairs, f=old_d: [f(b, t) for b, t in p],  # type: ignore[misc]
                n, number, rounds, nat_d,
            ),
            note,
        )  # fmt: skip
        note = f"{n:,} records, {sum(map(len, fulls)) / n:.1f} B/record"
        rows += _rows(
            "codec: encode_full_record",
            label,
            *_measure(
                lambda p=news, f=enc_f: [f(t) for t in p],  # type: ignore[misc]
                lambda p=news, f=old_f: [f(t) for t in p],  # type: ignore[misc]
                n, number, rounds, nat_f,
            ),
            note,
        )  # fmt: skip
        # FRAMEs of FRAME_RECORDS records: deltas with every 8th a full record
        frames = []
        for k in range(0, n, FRAME_RECORDS):
            part = [fulls[i] if i % 8 == 0 else chunks[i] for i in range(k, k + FRAME_RECORDS)]
            frames.append(codec.encode_frame(k, part))
        dec, old_dec = codec.decode_message, old_decode_frame
        if [dec(m) for m in frames] != [old_dec(m) for m in frames]:
            raise AssertionError(f"{kind}: new decoder records differ from the old decoder's")
        records = len(frames) * FRAME_RECORDS
        rows += _rows(
            "codec: decode_message (FRAME)",
            label,
            *_measure(
                lambda fs=frames, f=dec: [f(m) for m in fs],  # type: ignore[misc]
                lambda fs=frames, f=old_dec: [f(m) for m in fs],  # type: ignore[misc]
                records, number, rounds,
            ),
            f"{len(frames)} frames x {FRAME_RECORDS} records (1 in 8 full)",
        )  # fmt: skip
    return rows


def main(argv: list[str]) -> None:
    for r in run("--quick" in argv):
        print(
            f"{r.benchmark:32} {r.variant:26} {r.value:7.3f} {r.unit} "
            f"[{r.min:.3f}-{r.max:.3f}] x{r.ratio:.2f}  {r.note}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
