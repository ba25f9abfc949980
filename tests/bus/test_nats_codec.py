"""bus/nats_codec.py and what a NATS message is: a tick batch's own buffer on its subject (no
server: the publishing bus's outbox is read directly)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.bus.nats_codec import subject_token
from monotape.platform.model import Tick
from monotape.platform.wire.batch import HEADER, ROW_BYTES, TickBatch, batch_from_ticks, read_batch

i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
u64 = st.integers(min_value=0, max_value=2**64 - 1)


def _ticks(
    venue: str, handler: str, epoch: int, iids: int = 65_536
) -> st.SearchStrategy[list[Tick]]:
    """One handler's ticks of one venue at one epoch (what a batch is), any column value."""
    one = st.builds(
        Tick,
        iid=st.integers(min_value=0, max_value=iids - 1),
        venue=st.just(venue),
        epoch=st.just(epoch),
        seq=u64,
        venue_ts_ns=i64,
        bid=i64,
        ask=i64,
        last=i64,
        size=u64,
        handler=st.just(handler),
        decoded_ns=i64,
    )
    return st.lists(one, min_size=1, max_size=40)


def _batch(ticks: list[Tick]) -> TickBatch:
    (batch,) = batch_from_ticks(ticks)
    return batch


def _outbox(bus: NatsTickBus) -> list[tuple[str, bytes, int]]:
    return list(bus._outbox)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    venue=st.sampled_from(["XNAS", "XLON", "BRK.X"]),
    handler=st.sampled_from(["A", "B", ""]),
    epoch=u64,
)
def test_a_message_is_the_batchs_own_buffer_and_reads_back(
    data: st.DataObject, venue: str, handler: str, epoch: int
) -> None:
    ticks = data.draw(_ticks(venue, handler, epoch))
    batch = _batch(ticks)
    bus = NatsTickBus()
    bus.publish(batch)
    ((subject, payload, n),) = _outbox(bus)
    assert subject == f"md.{subject_token(venue)}.batch" and n == len(ticks)
    assert payload is batch.buffer  # not re-encoded: the bytes the IPC bus carries too
    back = read_batch(payload)
    assert (back.venue, back.handler, back.epoch, back.batch_seq) == (venue, handler, epoch, 0)
    assert back.ticks() == ticks


@settings(max_examples=60, deadline=None)
@given(data=st.data(), epoch=st.integers(0, 2**32))
def test_the_per_symbol_scheme_sends_one_batch_per_instrument(
    data: st.DataObject, epoch: int
) -> None:
    ticks = data.draw(_ticks("XNAS", "A", epoch, iids=8))
    symbols = {i: f"S.{i}" for i in range(8)}
    bus = NatsTickBus(scheme="symbol", symbols=symbols)
    bus.publish(_batch(ticks))
    messages = _outbox(bus)
    iids = sorted({t.iid for t in ticks})
    assert [s for s, _, _ in messages] == [f"md.XNAS.S_{i}" for i in iids]  # ascending iid
    for (_, payload, n), iid in zip(messages, iids, strict=True):
        back = read_batch(payload)
        assert (back.venue, back.handler, back.epoch) == ("XNAS", "A", epoch)
        assert back.ticks() == [t for t in ticks if t.iid == iid]  # each symbol's in order
        assert n == back.count
    assert bus.published_batches == len(iids) and bus.published_ticks == len(ticks)


def test_a_batch_is_a_64_byte_header_and_67_bytes_a_tick() -> None:
    """Fixed width, so a message's size is known before it is built (the outbox bound in
    nats_bus: 4,096 batches x 256 ticks x 67 B, ~70 MB)."""
    ticks = [
        Tick(s % 400, "XNAS", 3, s, 1_700_000_000_000_000_000 + s, 9_999, 10_001, 10_000, 100)
        for s in range(256)
    ]
    assert (HEADER.size, ROW_BYTES) == (64, 67)
    assert len(_batch(ticks).buffer) == 64 + 256 * 67
    assert len(_batch(ticks[:1]).buffer) == 64 + 67


def test_subject_token_has_no_dots_spaces_or_wildcards() -> None:
    assert subject_token("a b*>") == "a_b__"
    assert subject_token("BRK.B") == "BRK_B"
    assert subject_token("") == "_"
