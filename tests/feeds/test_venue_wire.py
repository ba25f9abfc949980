"""feeds/venue_wire.py: what the venue process sends its handlers, as one columnar batch a venue
and back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.feeds.simulator import VenueUpdate
from monotape.platform.feeds.venue_wire import per_venue, venue_batch
from monotape.platform.wire.batch import (
    HAS_UPDATE_ID,
    HEADER,
    ROW_BYTES,
    BatchError,
    BatchRefusal,
    TickBatch,
    read_batch,
)

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


def _updates_of(batch: TickBatch) -> list[VenueUpdate]:
    """The venue's updates as a handler reads them back from the columns."""
    has_id = [bool(f & HAS_UPDATE_ID) for f in batch.flags.tolist()]
    cols = zip(
        batch.iid.tolist(), batch.update_id.tolist(), has_id, batch.venue_ts.tolist(),
        batch.bid.tolist(), batch.ask.tolist(), batch.last.tolist(), batch.size.tolist(),
        strict=True,
    )  # fmt: skip
    return [
        VenueUpdate(iid, batch.venue, uid if has else None, ts, bid, ask, last, size)
        for iid, uid, has, ts, bid, ask, last, size in cols
    ]


@given(st.lists(_updates, max_size=200), st.integers(0, 2**64 - 1))
def test_round_trip(updates: list[VenueUpdate], batch_seq: int) -> None:
    for venue, heard in per_venue(updates).items():
        sent = venue_batch(venue, heard, batch_seq)
        back = read_batch(sent.buffer)  # what the handler's end reads, in place
        assert _updates_of(back) == heard
        assert (back.venue, back.handler, back.epoch, back.batch_seq) == (venue, "", 0, batch_seq)
        # the version's seq is the venue's update id where it has one (0 where it has none:
        # the handler derives it from the venue timestamp)
        assert back.seq.tolist() == [u.update_id or 0 for u in heard]
        assert not back.recv_ts.any()  # the handler stamps its own receive time


def test_an_empty_step_is_an_empty_batch() -> None:
    back = read_batch(venue_batch("XNAS", []).buffer)
    assert back.count == 0 and back.venue == "XNAS"


@given(st.lists(_updates, max_size=200))
def test_per_venue_keeps_each_venues_order(updates: list[VenueUpdate]) -> None:
    split = per_venue(updates)
    assert sum(map(len, split.values())) == len(updates)
    for venue, batch in split.items():
        assert batch == [u for u in updates if u.venue == venue]


def test_a_message_that_is_not_a_batch_is_refused_with_its_reason() -> None:
    good = venue_batch("XNAS", [VenueUpdate(1, "XNAS", 5, 10, 100, 101, 100, 3)] * 3).buffer
    for bad, reason in (
        (b"\xc1", BatchRefusal.SHORT),
        (b"\x91\x93\x01" + bytes(HEADER.size), BatchRefusal.MAGIC),
        (good[:-1], BatchRefusal.LENGTH),
        (good[:3] + b"\x02" + good[4:], BatchRefusal.VERSION),
    ):
        with pytest.raises(BatchError) as caught:
            read_batch(bad)
        assert caught.value.reason is reason


def test_a_value_no_column_holds_raises() -> None:
    """The caller's door (``FeedHandler.on_venue``) refuses such updates one by one."""
    for bad in (
        VenueUpdate(1, "XNAS", 5, 10, 2**63, 101, 100, 3),  # a price past int64
        VenueUpdate(1, "XNAS", 2**64, 10, 100, 101, 100, 3),  # an id past uint64
        VenueUpdate(1, "XNAS", 5, 10, 100, 101, 100, -1),  # a negative size
        VenueUpdate(70_000, "XNAS", 5, 10, 100, 101, 100, 3),  # an iid past uint16
    ):
        with pytest.raises((OverflowError, ValueError)):
            venue_batch("XNAS", [bad])


def test_67_bytes_an_update() -> None:
    """Fixed width: 67 bytes a row, one 64-byte header a venue's step."""
    u = VenueUpdate(1_234, "XNAS", 1_800_000_000_000_123, 1_764_460_800_123_456_789,
                    1_234_500, 1_234_600, 1_234_550, 300)  # fmt: skip
    assert ROW_BYTES == 67
    assert len(venue_batch("XNAS", [u] * 100).buffer) == HEADER.size + 100 * ROW_BYTES
