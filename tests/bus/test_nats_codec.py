"""bus/nats_codec.py: a batch of ticks <-> one NATS payload, and subject tokens (no server)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import astuple

from monotape.platform.bus.nats_codec import TickCodec, subject_token
from monotape.platform.model import Tick

# -- codec -------------------------------------------------------------------------------------
i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
tick_strategy = st.builds(
    Tick,
    iid=st.integers(min_value=0, max_value=65_535),
    venue=st.text(max_size=8),
    epoch=st.integers(min_value=0, max_value=2**32),
    seq=i64,
    venue_ts_ns=i64,
    bid=i64,
    ask=i64,
    last=i64,
    size=i64,
    handler=st.text(max_size=4),
    decoded_ns=i64,
    admitted_ns=i64,
)


@settings(max_examples=60, deadline=None)
@given(ticks=st.lists(tick_strategy, min_size=1, max_size=40), array_like=st.booleans())
def test_codec_round_trips_a_batch(ticks: list[Tick], array_like: bool) -> None:
    data = TickCodec(array_like=array_like).encode(ticks)
    for reader in (TickCodec(array_like=True), TickCodec(array_like=False)):  # reads either
        back = reader.decode(data)
        assert all(isinstance(t, Tick) for t in back)
        assert [astuple(t) for t in back] == [astuple(t) for t in ticks]


def test_array_like_is_smaller() -> None:
    ticks = [
        Tick(s % 400, "XNAS", 3, s, 1_700_000_000_000_000_000 + s, 9_999, 10_001, 10_000, 100)
        for s in range(256)
    ]
    arrays = len(TickCodec(array_like=True).encode(ticks))
    maps = len(TickCodec(array_like=False).encode(ticks))
    assert arrays * 2 < maps


def test_codec_rejects_garbage() -> None:
    with pytest.raises(msgspec.DecodeError):
        TickCodec().decode(b"\x93\x01\x02")


def test_subject_token_has_no_dots_spaces_or_wildcards() -> None:
    assert subject_token("a b*>") == "a_b__"
    assert subject_token("BRK.B") == "BRK_B"
    assert subject_token("") == "_"
