"""feeds/venue_wire.py: what the venue process sends its handlers, as bytes and back."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec.structs import astuple

from monotape.platform.feeds.simulator import VenueUpdate
from monotape.platform.feeds.venue_wire import VenueBatchCodec, per_venue

_i64 = st.integers(-(2**63), 2**63 - 1)
_updates = st.builds(
    VenueUpdate,
    iid=st.integers(0, 65_535),
    venue=st.sampled_from(["XNAS", "XNYS", "ARCX"]),
    update_id=st.none() | st.integers(0, 2**64 - 1),
    venue_ts_ns=st.integers(0, 2**63 - 1),
    bid=_i64,
    ask=_i64,
    last=_i64,
    size=st.integers(0, 2**64 - 1),
)


@given(st.lists(_updates, max_size=200))
def test_round_trip(updates: list[VenueUpdate]) -> None:
    codec = VenueBatchCodec()
    back = codec.decode(codec.encode(updates))
    assert [astuple(u) for u in back] == [astuple(u) for u in updates]


@given(st.lists(_updates, max_size=200))
def test_per_venue_keeps_each_venues_order(updates: list[VenueUpdate]) -> None:
    split = per_venue(updates)
    assert sum(map(len, split.values())) == len(updates)
    for venue, batch in split.items():
        assert batch == [u for u in updates if u.venue == venue]


def test_malformed_raises_decode_error() -> None:
    codec = VenueBatchCodec()
    for bad in (b"\xc1", b"\x91\x93\x01", b"\x91\xa3abc"):
        with pytest.raises(msgspec.DecodeError):
            codec.decode(bad)


def test_about_45_bytes_an_update() -> None:
    codec = VenueBatchCodec()
    u = VenueUpdate(1_234, "XNAS", 1_800_000_000_000_123, 1_764_460_800_123_456_789,
                    1_234_500, 1_234_600, 1_234_550, 300)  # fmt: skip
    assert len(codec.encode([u] * 100)) / 100 < 50
