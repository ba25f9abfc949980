"""The integer encodings of docs/wire.md: LEB128 uvarints, zigzag, fixed64, int64 wrapping.

Prices are int64 and delta prices wrap modulo 2**64, so every varint fits in 10 bytes and a
client in any language can use plain int64/uint64 arithmetic.

The lookup tables are deliberate and measured (bench/micro/bench_codec.py and bench_wire.py):
they carry ``encode_delta_record`` for every dirty symbol every 40 ms.
"""

from __future__ import annotations

import struct
from typing import Final

from monotape.platform.wire.codes import CodecError

__all__ = [
    "FIXED64",
    "I64_MAX",
    "I64_MIN",
    "LOW_14",
    "ONE_BYTE",
    "U64_END",
    "UVARINT_14",
    "put_uvarint",
    "read_uvarint",
    "uvarint",
    "uvarint_fast",
    "wrap_int64",
    "zigzag",
]

U64_END: Final = 1 << 64  # the first value that is not a uint64
I64_MIN: Final = -(1 << 63)
I64_MAX: Final = (1 << 63) - 1
FIXED64: Final = struct.Struct("<Q")  # a seq >= 2**56 (ns timestamps): 8 bytes, not a 9-byte varint

# Single-byte varints are the common case (small epochs, price steps, sizes): a table lookup
# costs a fraction of building a bytes object.
ONE_BYTE: Final[tuple[bytes, ...]] = tuple(bytes((i,)) for i in range(128))
# Canonical uvarint of every n < 2**14 (one or two bytes), and the two low 7-bit groups of any
# n >= 2**14 with both continuation bits set: for n < 2**28 the varint is
# ``LOW_14[n & 0x3FFF] + UVARINT_14[n >> 14]``. Two table lookups instead of a loop of appends
# (price steps, sizes, update-id seqs and ns seq steps all land here); ~1.2 MB of small bytes
# objects.
UVARINT_14: Final[tuple[bytes, ...]] = ONE_BYTE + tuple(
    bytes((i & 0x7F | 0x80, i >> 7)) for i in range(0x80, 0x4000)
)
LOW_14: Final[tuple[bytes, ...]] = tuple(
    bytes((i & 0x7F | 0x80, i >> 7 | 0x80)) for i in range(0x4000)
)


def wrap_int64(n: int) -> int:
    """``n`` reduced modulo 2**64 into int64 range: how delta prices are added and subtracted."""
    return ((n - I64_MIN) & (U64_END - 1)) + I64_MIN


def put_uvarint(buf: bytearray, n: int) -> None:
    """LEB128 for n >= 128 (callers inline the one-byte case); uint64 only."""
    if n < 0 or n >> 64:
        raise ValueError(f"{n} is not a uint64")
    ap = buf.append
    while n > 0x7F:
        ap((n & 0x7F) | 0x80)
        n >>= 7
    ap(n)


def uvarint(n: int) -> bytes:
    """uvarint of any uint64; ValueError for anything else."""
    if 0 <= n < 0x4000:
        return UVARINT_14[n]
    buf = bytearray()
    put_uvarint(buf, n)
    return bytes(buf)


def uvarint_fast(n: int) -> bytes:
    """uvarint of ``n >= 0`` (callers guarantee the sign); ValueError if ``n >= 2**64``."""
    if n < 0x4000:
        return UVARINT_14[n]
    if n < 0x1000_0000:
        return LOW_14[n & 0x3FFF] + UVARINT_14[n >> 14]
    buf = bytearray()
    put_uvarint(buf, n)
    return bytes(buf)


def zigzag(n: int) -> int:
    # int64 -> uint64 with small magnitudes small: 0,-1,1,-2 -> 0,1,2,3.
    return n << 1 if n >= 0 else ~(n << 1)


def read_uvarint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """(value, next position) of the canonical uvarint at ``pos``; CodecError naming ``what``
    for a non-canonical or oversized one, IndexError on truncation (callers turn it into a
    CodecError that names the message)."""
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
