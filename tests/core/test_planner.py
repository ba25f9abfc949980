"""Frame planning with no socket: each changed symbol encoded once, one payload per signature,
framed once; what went out; gap snapshots from the cache, encoded once per version."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.core.conflation import Frame, FrameRecord
from monotape.platform.core.fanout import SubscriptionIndex, subscription_signature
from monotape.platform.core.planner import gap_snapshot, plan_frame, written_iids
from monotape.platform.core.snapshots import SnapshotCache
from monotape.platform.model import Tick
from monotape.platform.wire import codec


def _tick(iid: int, seq: int, price: int = 100) -> Tick:
    return Tick(iid, "XNAS", 1, seq, 0, price, price + 1, price, 1, "A", 0, 0)


def _frame(frame_no: int, iids: list[int], seq: int = 2) -> Frame:
    records = [FrameRecord(i, _tick(i, seq - 1), _tick(i, seq, 100 + i)) for i in sorted(iids)]
    return Frame(frame_no, frame_no * 40_000_000, records)


def _unframe(wire: bytes) -> bytes:
    """The payload of one unmasked server frame (RFC 6455 §5.2)."""
    assert wire[0] == 0x82  # FIN + binary
    n = wire[1]
    if n < 126:
        return wire[2:]
    return wire[4:] if n == 126 else wire[10:]


def _index(subs: dict[int, list[int]]) -> SubscriptionIndex:
    index = SubscriptionIndex()
    for cid, iids in subs.items():
        index.add_connection(cid)
        index.subscribe(cid, iids)
    return index


class _Failures:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def record(self, stage: str, exc: BaseException, **context: Any) -> None:
        self.seen.append((stage, context.get("iid")))


def test_one_payload_per_signature_each_symbol_encoded_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded: list[int] = []
    real = codec.encode_delta_record

    def counting(base: Tick | None, new: Tick) -> bytes:
        encoded.append(new.iid)
        return real(base, new)

    monkeypatch.setattr(codec, "encode_delta_record", counting)
    index = _index({1: [1, 2, 3], 2: [3, 2, 1], 3: [2, 4], 4: [9]})
    plan = plan_frame(_frame(5, [1, 2, 4, 7]), index)
    assert sorted(encoded) == [1, 2, 4]  # 7 has no subscriber: nobody pays for it; 3 unchanged
    assert plan.frame_no == 5 and sorted(plan.chunks) == [1, 2, 4]
    by_sig = {sig: (wire, conns) for wire, conns, sig in plan.payloads}
    # connection 4's signature has no changed member: no payload at all
    assert set(by_sig) == {subscription_signature([1, 2, 3]), subscription_signature([2, 4])}
    wire, conns = by_sig[subscription_signature([1, 2, 3])]
    assert conns == {1, 2}  # one framed bytes object for both
    message = codec.decode_message(_unframe(wire))
    assert isinstance(message, codec.Frame) and message.frame_no == 5
    assert [r.iid for r in message.records] == [1, 2]  # ascending iid
    wire, conns = by_sig[subscription_signature([2, 4])]
    assert conns == {3}
    message = codec.decode_message(_unframe(wire))
    assert isinstance(message, codec.Frame)
    assert [r.iid for r in message.records] == [2, 4]


def test_the_connections_are_a_copy_a_teardown_may_change_the_index() -> None:
    index = _index({1: [1], 2: [1]})
    plan = plan_frame(_frame(1, [1]), index)
    ((_, conns, _),) = plan.payloads
    for cid in conns:
        index.remove_connection(cid)  # what a write error does mid-loop
    assert conns == {1, 2}


def test_a_symbol_that_cannot_encode_is_left_out_and_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = codec.encode_delta_record

    def broken_for_2(base: Tick | None, new: Tick) -> bytes:
        if new.iid == 2:
            raise ValueError("price out of int64")
        return real(base, new)

    monkeypatch.setattr(codec, "encode_delta_record", broken_for_2)
    failures = _Failures()
    plan = plan_frame(_frame(3, [1, 2, 3]), _index({1: [1, 2, 3]}), failures)
    assert sorted(plan.chunks) == [1, 3]
    assert failures.seen == [("encode", 2)]
    ((wire, _, _),) = plan.payloads
    message = codec.decode_message(_unframe(wire))
    assert isinstance(message, codec.Frame) and [r.iid for r in message.records] == [1, 3]


def test_written_iids() -> None:
    index = _index({1: [1, 2], 2: [3]})
    plan = plan_frame(_frame(1, [1, 3]), index)
    assert written_iids(plan, [], index).size == 0
    all_sigs = [sig for _, _, sig in plan.payloads]
    assert sorted(written_iids(plan, all_sigs, index).tolist()) == [1, 3]
    only = written_iids(plan, [subscription_signature([1, 2])], index)
    assert only.dtype == np.int64 and only.tolist() == [1]  # 2 did not change: not written


def test_gap_snapshot_joins_cached_chunks_encoded_once_per_version() -> None:
    published: dict[int, Tick] = {1: _tick(1, 5), 2: _tick(2, 6)}
    cache = SnapshotCache(published.get)
    index = _index({1: [2, 1, 3]})  # 3 has nothing published yet: left out
    wire = gap_snapshot(cache, index, 9, 1)
    message = codec.decode_message(_unframe(wire))
    assert isinstance(message, codec.Snapshot) and message.frame_no == 9
    assert [(r.iid, r.seq) for r in message.records] == [(1, 5), (2, 6)]
    assert cache.encodes == 2
    gap_snapshot(cache, index, 10, 1)
    assert cache.encodes == 2  # same versions: the cached chunks
    published[1] = _tick(1, 7)
    message = codec.decode_message(_unframe(gap_snapshot(cache, index, 11, 1)))
    assert isinstance(message, codec.Snapshot)
    assert [(r.iid, r.seq) for r in message.records] == [(1, 7), (2, 6)]
    assert cache.encodes == 3  # only the symbol whose version moved


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.integers(1, 50), st.lists(st.integers(1, 12), min_size=1, max_size=6), max_size=20
    ),
    st.sets(st.integers(1, 14), max_size=14),
)
def test_every_connection_gets_exactly_its_changed_symbols(
    subs: dict[int, list[int]], changed: set[int]
) -> None:
    index = _index(subs)
    plan = plan_frame(_frame(2, sorted(changed)), index)
    got: dict[int, list[int]] = {}
    for wire, conns, _ in plan.payloads:
        message = codec.decode_message(_unframe(wire))
        assert isinstance(message, codec.Frame)
        for cid in conns:
            assert cid not in got  # one payload per connection
            got[cid] = [r.iid for r in message.records]
    for cid, iids in subs.items():
        want = sorted(set(iids) & changed)
        assert got.get(cid, []) == want
    watched = {i for iids in subs.values() for i in iids}
    assert set(plan.chunks) == watched & changed
