"""wire/varints.py: the table encoders against plain LEB128, the canonical reader, int64 wrap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.wire.codes import CodecError
from monotape.platform.wire.varints import (
    I64_MAX,
    I64_MIN,
    read_uvarint,
    uvarint,
    uvarint_fast,
    wrap_int64,
    zigzag,
)

U64 = st.integers(0, 2**64 - 1)
# Every table boundary: 1 byte, 2 bytes (the 2**14 table), the two-lookup path below 2**28.
EDGES = st.sampled_from([0, 1, 127, 128, 2**14 - 1, 2**14, 2**28 - 1, 2**28, 2**63, 2**64 - 1])


def leb128(n: int) -> bytes:
    """The textbook encoder: what every table path must equal byte for byte."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


@given(st.one_of(U64, EDGES))
def test_table_encoders_are_leb128(n: int) -> None:
    assert uvarint(n) == leb128(n)
    assert uvarint_fast(n) == leb128(n)
    assert read_uvarint(leb128(n) + b"\xff", 0, "n") == (n, len(leb128(n)))


@pytest.mark.parametrize("n", [-1, 2**64])
def test_only_uint64_is_encoded(n: int) -> None:
    with pytest.raises(ValueError):
        uvarint(n)


@pytest.mark.parametrize(
    "data",
    [b"\x80\x00", b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02"],  # 0x00 tail, 11 bytes, >= 2**64
)
def test_reader_refuses_non_canonical_and_oversized(data: bytes) -> None:
    with pytest.raises(CodecError, match="frame_no"):
        read_uvarint(data, 0, "frame_no")


def test_reader_truncation_is_an_index_error() -> None:
    with pytest.raises(IndexError):  # callers name the message in the CodecError they raise
        read_uvarint(b"\x80", 0, "count")


@given(st.integers(I64_MIN, I64_MAX), st.integers(I64_MIN, I64_MAX))
def test_int64_wraps_and_zigzag_keeps_small_small(a: int, b: int) -> None:
    assert I64_MIN <= wrap_int64(a + b) <= I64_MAX
    assert wrap_int64(wrap_int64(a - b) + b) == a  # a delta applied to its base gives it back
    assert zigzag(a) >= 0 and zigzag(a) < 2**64
    assert [zigzag(v) for v in (0, -1, 1, -2)] == [0, 1, 2, 3]
