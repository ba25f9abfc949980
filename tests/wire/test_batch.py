"""The columnar tick batch: the vectors read back to their inputs, bad buffers are refused whole
by reason, any batch round-trips through its own bytes, and the bus's receiving end counts a
refused buffer and goes on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.platform.bus.inbox import Inbox
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.feeds.validate import Refusal, TickGate
from monotape.platform.model import Tick
from monotape.platform.wire.batch import (
    COLUMNS,
    HEADER,
    ROW_BYTES,
    BatchError,
    TickBatch,
    batch_from_ticks,
    batch_of,
    concat,
    read_batch,
    split,
    take,
)

CASES = json.loads((Path(__file__).parent.parent / "vectors" / "batches.json").read_text())
U64 = st.integers(0, 2**64 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TS = st.integers(0, 2**63 - 1)


@pytest.mark.parametrize("case", CASES["cases"], ids=lambda c: c["name"])
def test_vectors_read_to_their_inputs(case: dict[str, Any]) -> None:
    batch = read_batch(bytes.fromhex(case["hex"]))
    header = case["header"]
    assert (batch.venue, batch.handler, batch.epoch, batch.batch_seq) == (
        header["venue"], header["handler"], header["epoch"], header["batch_seq"],
    )  # fmt: skip
    for name, _ in COLUMNS:
        assert getattr(batch, name).tolist() == case["columns"][name], name
    again = batch_of(batch.venue, batch.handler, batch.epoch, batch.batch_seq, case["columns"])
    assert again.buffer.hex() == case["hex"]


@pytest.mark.parametrize("case", CASES["bad"], ids=lambda c: c["name"])
def test_bad_vectors_are_refused_whole_with_their_reason(case: dict[str, Any]) -> None:
    with pytest.raises(BatchError) as got:
        read_batch(bytes.fromhex(case["hex"]))
    assert str(got.value.reason) == case["reason"]


columns = st.integers(0, 12).flatmap(
    lambda n: st.fixed_dictionaries(
        {
            "seq": st.lists(U64, min_size=n, max_size=n),
            "update_id": st.lists(U64, min_size=n, max_size=n),
            "bid": st.lists(I64, min_size=n, max_size=n),
            "ask": st.lists(I64, min_size=n, max_size=n),
            "last": st.lists(I64, min_size=n, max_size=n),
            "size": st.lists(U64, min_size=n, max_size=n),
            "venue_ts": st.lists(I64, min_size=n, max_size=n),
            "recv_ts": st.lists(I64, min_size=n, max_size=n),
            "iid": st.lists(st.integers(0, 65_535), min_size=n, max_size=n),
            "flags": st.lists(st.integers(0, 1), min_size=n, max_size=n),
        }
    )
)


@given(cols=columns, epoch=U64, batch_seq=U64, venue=st.sampled_from(["XNAS", "A" * 16, "X"]))
def test_any_batch_round_trips_through_its_bytes(
    cols: dict[str, list[int]], epoch: int, batch_seq: int, venue: str
) -> None:
    batch = batch_of(venue, "B", epoch, batch_seq, cols)
    assert len(batch.buffer) == HEADER.size + batch.count * ROW_BYTES
    back = read_batch(batch.buffer)
    assert (back.venue, back.handler, back.epoch, back.batch_seq) == (venue, "B", epoch, batch_seq)
    for name, _ in COLUMNS:
        assert getattr(back, name).tolist() == cols[name]
    # one byte less or more is a torn buffer, never a shorter batch
    for torn in (batch.buffer[:-1], batch.buffer + b"\0"):
        with pytest.raises(BatchError):
            read_batch(torn)


@given(cols=columns, limit=st.integers(HEADER.size + ROW_BYTES, 600))
def test_split_keeps_every_tick_in_order_under_the_limit(
    cols: dict[str, list[int]], limit: int
) -> None:
    batch = batch_of("XNAS", "A", 1, 5, cols)
    parts = split(batch, limit)
    assert all(len(p.buffer) <= limit for p in parts) or parts == [batch]
    assert concat(parts).iid.tolist() == batch.iid.tolist() if parts else True
    assert sum(p.count for p in parts) == batch.count


def test_views_are_read_only_and_zero_copy() -> None:
    batch = batch_of("XNAS", "A", 1, 0, {n: [1, 2] for n, _ in COLUMNS})
    back = read_batch(batch.buffer)
    assert back.seq.base is not None and not back.seq.flags.writeable
    with pytest.raises(ValueError):
        back.bid[0] = 5


def test_ticks_and_back() -> None:
    ticks = [
        Tick(3, "XNAS", 2, 10, 100, 5, 6, 5, 1, "A", 7),
        Tick(4, "XNAS", 2, 11, 101, 5, 6, 5, 1, "A", 7),
        Tick(3, "XNAS", 3, 1, 102, 5, 6, 5, 1, "A", 8),  # another epoch: another batch
        Tick(9, "XLON", 3, 1, 102, 5, 6, 5, 1, "A", 8),  # another venue: another batch
    ]
    batches = batch_from_ticks(ticks)
    assert [(b.venue, b.epoch, b.count) for b in batches] == [
        ("XNAS", 2, 2), ("XNAS", 3, 1), ("XLON", 3, 1),
    ]  # fmt: skip
    assert [t for b in batches for t in b.ticks()] == ticks
    assert take(batches[0], [1]).ticks() == [ticks[1]]


def _gate() -> TickGate:
    return TickGate(build_universe(2, 20, 1), FakeClock().now_ns, log=lambda *a, **k: None)


def test_the_inbox_refuses_a_torn_buffer_by_reason_and_delivers_the_next() -> None:
    gate = _gate()
    got: list[TickBatch] = []
    errors: list[str] = []
    inbox = Inbox(gate, errors.append)
    inbox.sinks.append(got.append)
    inst = next(iter(build_universe(2, 20, 1)))
    good = batch_of(inst.venue, "A", 1, 0, {**{n: [1] for n, _ in COLUMNS}, "iid": [inst.iid]})
    assert inbox.receive(good.buffer[:-3], "test").malformed
    assert inbox.receive(b"\x01\x02", "test").malformed
    assert inbox.receive(good.buffer, "test").ticks == 1
    assert [b.iid.tolist() for b in got] == [[inst.iid]]
    assert gate.batches_refused["length_mismatch"] == 1 and gate.batches_refused["short"] == 1
    assert inbox.refused == {"length_mismatch": 1, "short": 1} and len(errors) == 2


def test_the_gate_refuses_ticks_in_bulk_by_reason_and_keeps_the_rest() -> None:
    gate = _gate()
    universe = list(build_universe(2, 20, 1))
    mine = [i for i in universe if i.venue == universe[0].venue]
    other = next(i for i in universe if i.venue != universe[0].venue)
    iids = [mine[0].iid, 60_000, other.iid, mine[1].iid, mine[2].iid]
    venue_ts = [1, 1, 1, -5, 1]
    batch = batch_of(
        mine[0].venue, "A", 1, 0,
        {**{n: [1] * 5 for n, _ in COLUMNS}, "iid": iids, "venue_ts": venue_ts},
    )  # fmt: skip
    kept = gate.gate_batch(batch, "test")
    assert kept.iid.tolist() == [mine[0].iid, mine[2].iid]
    v = mine[0].venue
    assert gate.rejected == {
        (v, str(Refusal.UNKNOWN_IID)): 1,
        (v, str(Refusal.WRONG_VENUE)): 1,
        (v, str(Refusal.TIMESTAMP)): 1,
    }
    assert gate.gate_batch(kept, "test") is kept  # all pass: the same object, no copy
    assert np.shares_memory(kept.iid, np.frombuffer(kept.buffer, np.uint8))
