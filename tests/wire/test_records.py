"""wire/records.py and wire/record_reader.py: record round trips, the gap rule's inputs, the
fast paths against the readable reference paths. Every encoder test runs through the exported
encoders (native when built) and through the pure-Python twins."""

from __future__ import annotations

import pytest
from hypothesis import given

from monotape.platform.model import Tick
from monotape.platform.wire import records
from monotape.platform.wire.record_reader import decode_record
from monotape.platform.wire.records import apply_record
from tests.wire.strategies import assert_full, base_and_new, tick, ticks

TWINS = {
    "exported": (records.encode_full_record, records.encode_delta_record),
    "python": (records.python_encode_full_record, records.python_encode_delta_record),
}
both_twins = pytest.mark.parametrize("twin", sorted(TWINS))


@both_twins
@given(ticks)
def test_full_record_round_trip(twin: str, t: Tick) -> None:
    encode_full_record, encode_delta_record = TWINS[twin]
    assert_full(decode_record(encode_full_record(t)), t)
    assert encode_delta_record(None, t) == encode_full_record(t)


@both_twins
@given(base_and_new())
def test_delta_applied_to_base_reproduces_new(twin: str, pair: tuple[Tick, Tick]) -> None:
    encode_delta_record = TWINS[twin][1]
    base, new = pair
    rec = decode_record(encode_delta_record(base, new))
    assert rec.has_base
    assert (rec.base_epoch, rec.base_seq) == (base.epoch, base.seq)  # names its base exactly
    assert (rec.iid, rec.epoch, rec.seq, rec.size) == (new.iid, new.epoch, new.seq, new.size)
    assert apply_record((base.bid, base.ask, base.last), rec) == (new.bid, new.ask, new.last)
    # the fast path and the readable reference encoder agree byte for byte
    assert encode_delta_record(base, new) == records._encode_delta_checked(base, new)


@both_twins
def test_encoder_refuses_invalid_ticks(twin: str) -> None:
    encode_full_record, encode_delta_record = TWINS[twin]
    good = tick(1, 1, 10, 1, 1, 1, 1)
    for bad in (
        tick(70000, 1, 10, 1, 1, 1, 1),
        tick(1, -1, 10, 1, 1, 1, 1),
        tick(1, 1, 2**64, 1, 1, 1, 1),
        tick(1, 1, 10, 2**63, 1, 1, 1),
        tick(1, 1, 10, 1, 1, 1, -1),
    ):
        with pytest.raises(ValueError):
            encode_full_record(bad)
        with pytest.raises(ValueError):
            encode_delta_record(good, bad)
    with pytest.raises(ValueError, match="below its base"):
        encode_delta_record(good, tick(1, 1, 9, 1, 1, 1, 1))
    with pytest.raises(ValueError, match="iid"):
        encode_delta_record(good, tick(2, 1, 11, 1, 1, 1, 1))
