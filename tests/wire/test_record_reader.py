"""wire/record_reader.py: the unrolled reader agrees with the general one on every record it
takes, and hands every other one (malformed ones included) back without raising."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.model import Tick
from monotape.platform.wire import record_reader
from monotape.platform.wire.codes import CodecError
from monotape.platform.wire.records import encode_delta_record, encode_full_record
from tests.wire.strategies import base_and_new, tick, ticks


@given(ticks)
def test_fast_reader_agrees_on_full_records(t: Tick) -> None:
    data = encode_full_record(t) + b"\x00"  # a following byte, as inside a frame
    fast = record_reader._read_record_fast(data, 0)
    assert fast is None or fast == record_reader._read_record(data, 0)  # None: varints > 8 B


STEADY = st.integers(-(2**40), 2**40)  # prices and sizes of a real frame: varints of <= 8 bytes


@given(
    st.integers(0, 0xFFFF),
    st.integers(0, 200),
    st.one_of(st.integers(0, 2**40), st.integers(2**56, 2**64 - 1)),  # update ids, ns stamps
    STEADY,
    STEADY,
    STEADY,
    st.integers(0, 2**40),
)
def test_fast_reader_takes_every_steady_state_record(
    iid: int, epoch: int, seq: int, bid: int, ask: int, last: int, size: int
) -> None:
    """The records a frame is made of never reach the general reader (the measured path)."""
    base = tick(iid, epoch, seq, bid, ask, last, size)
    new = tick(iid, epoch, min(seq + 3, 2**64 - 1), bid + 1, ask - 1, last, size + 1)
    for data in (encode_full_record(base), encode_delta_record(base, new)):
        fast = record_reader._read_record_fast(data, 0)
        assert fast is not None and fast == record_reader._read_record(data, 0)


@given(base_and_new())
def test_fast_reader_agrees_or_falls_back_on_deltas(pair: tuple[Tick, Tick]) -> None:
    data = encode_delta_record(*pair)
    fast = record_reader._read_record_fast(data, 0)
    general = record_reader._read_record(data, 0)
    assert fast is None or fast == general  # new-epoch deltas go to the general reader
    assert record_reader.read_record(data, 0) == general


@given(st.binary(min_size=3, max_size=40))
def test_fast_reader_never_raises_what_the_general_reader_would_not(data: bytes) -> None:
    try:
        general = record_reader._read_record(data, 0)
    except (CodecError, IndexError):
        general = None
    try:
        fast = record_reader._read_record_fast(data, 0)
    except IndexError:
        assert general is None  # reads no byte past what the general reader reads first
        return
    assert fast is None or fast == general
