"""The doors where ticks enter, and stage loops that survive what gets past them (issue 10, A1).

The gate (``feeds.validate``): what it refuses, how it counts and how rarely it logs, and the
property that matters: any tick it admits encodes on the wire (full and delta) and fits the stage
stamps; the batch gate (``gate_batch``) answers as the per-tick one. The feed handler and the
NATS bus's inbox as doors. Then the frame loop of an in-process node
that survives an encoder exception (one symbol, then one whole frame), and the supervisor that
starts a dead loop again.
"""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from monotape.clock import FakeClock
from monotape.log import Throttle
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.core import fields
from monotape.platform.core import sequencer as sequencer_module
from monotape.platform.feeds import validate
from monotape.platform.feeds.epochs import MemoryEpochStore
from monotape.platform.feeds.handler import FeedHandler
from monotape.platform.feeds.simulator import VenueUpdate
from monotape.platform.feeds.validate import UNKNOWN_VENUE, Refusal, TickGate, tick_problem
from monotape.platform.model import Instrument, Tick
from monotape.platform.node.node import Node
from monotape.platform.role.failures import StageFailures
from monotape.platform.sdk.client import TerminalClient
from monotape.platform.wire import codec
from monotape.platform.wire.batch import TickBatch, batch_from_ticks
from monotape.platform.wire.records import EncodedRows
from tests.conftest import node_config, until

TS = 1_764_460_800_000_000_000
UNIVERSE = [
    Instrument(0, "XNAS:AAPL", "XNAS", "AAPL", 2, 1),
    Instrument(1, "XNAS:MSFT", "XNAS", "MSFT", 2, 1),
    Instrument(2, "XNYS:IBM", "XNYS", "IBM", 2, 1),
]


class Logged:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        self.events.append((event, fields))


def good(**over: Any) -> Tick:
    fields: dict[str, Any] = {
        "iid": 0, "venue": "XNAS", "epoch": 3, "seq": 1_001, "venue_ts_ns": TS, "bid": 18_951,
        "ask": 18_953, "last": 18_952, "size": 300, "handler": "A", "decoded_ns": 5_000_000_000,
    }  # fmt: skip
    fields.update(over)
    return Tick(**fields)


def gate(clock: FakeClock | None = None, log: Logged | None = None) -> TickGate:
    return TickGate(UNIVERSE, (clock or FakeClock()).now_ns, log=log or Logged())


# -- the gate --------------------------------------------------------------------------------
def test_a_clean_batch_passes_as_it_is() -> None:
    batch = [good(), good(iid=1, seq=7), good(iid=2, venue="XNYS")]
    g = gate()
    assert g.admit(batch, "test") is batch  # nothing copied on the common path
    # A negative price is legal: it takes the careful path, and passes.
    negative = [good(), good(iid=2, venue="XNYS", bid=-5, last=-4)]
    assert list(g.admit(negative, "test")) == negative
    assert g.rejected == {}


@pytest.mark.parametrize(
    ("over", "venue", "reason"),
    [
        ({"iid": 3}, "XNAS", Refusal.UNKNOWN_IID),
        ({"iid": -1}, "XNAS", Refusal.UNKNOWN_IID),
        ({"venue": "XNYS"}, "XNYS", Refusal.WRONG_VENUE),
        ({"venue": "EVIL" * 9}, UNKNOWN_VENUE, Refusal.WRONG_VENUE),  # no unbounded labels
        ({"bid": 2**63}, "XNAS", Refusal.PRICE),
        ({"ask": -(2**63) - 1}, "XNAS", Refusal.PRICE),
        ({"last": 2**64 - 1}, "XNAS", Refusal.PRICE),
        ({"epoch": 2**64}, "XNAS", Refusal.EPOCH),
        ({"epoch": -1}, "XNAS", Refusal.EPOCH),
        ({"seq": 2**64}, "XNAS", Refusal.SEQ),
        ({"seq": -1}, "XNAS", Refusal.SEQ),
        ({"size": 2**64}, "XNAS", Refusal.SIZE),
        ({"size": -1}, "XNAS", Refusal.SIZE),
        ({"venue_ts_ns": 2**63}, "XNAS", Refusal.TIMESTAMP),
        ({"decoded_ns": -1}, "XNAS", Refusal.TIMESTAMP),
        ({"admitted_ns": 2**64}, "XNAS", Refusal.TIMESTAMP),
    ],
)
def test_out_of_range_ticks_are_refused_and_counted(
    over: dict[str, Any], venue: str, reason: Refusal
) -> None:
    g = gate()
    kept = g.admit([good(), good(**over), good(seq=1_002)], "nats md.XNAS.batch")
    assert [t.seq for t in kept] == [1_001, 1_002]
    assert g.rejected == {(venue, str(reason)): 1}


def test_refusals_are_logged_once_per_reason_per_interval() -> None:
    clock = FakeClock()
    log = Logged()
    g = gate(clock, log)
    for _ in range(100):
        g.admit([good(bid=2**63)], "nats md.XNAS.batch")
    g.admit([good(size=-1)], "nats md.XNAS.batch")
    assert [f["reason"] for _, f in log.events] == ["price_out_of_range", "size_out_of_range"]
    assert log.events[0][1]["where"] == "nats md.XNAS.batch"
    assert "bid" in log.events[0][1]["detail"]
    clock.advance(10 * 10**9)
    g.admit([good(bid=2**63)], "nats md.XNAS.batch")
    assert log.events[-1][1]["not_logged_since"] == 99
    assert g.rejected[("XNAS", "price_out_of_range")] == 101


def test_the_throttle_lets_one_through_per_interval() -> None:
    t = Throttle(10)
    assert t.allow("a", 0) == 0
    assert t.allow("a", 5) is None
    assert t.allow("b", 5) == 0
    assert t.allow("a", 9) is None
    assert t.allow("a", 10) == 2


def test_stage_failures_count_every_one_and_log_a_few() -> None:
    clock = FakeClock()
    log = Logged()
    failures = StageFailures(clock.now_ns, log=log)
    for _ in range(50):
        failures.record("frame", ValueError("boom"))
    assert failures.counts == {"frame": 50}
    assert len(log.events) == 1 and log.events[0][1]["error"] == "ValueError('boom')"


# -- the property: what the gate admits, the wire carries ---------------------------------
wide = st.one_of(
    st.integers(min_value=-(2**65), max_value=2**65),
    st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64]),
)
ticks = st.builds(
    Tick,
    iid=st.integers(min_value=-1, max_value=4),
    venue=st.sampled_from(["XNAS", "XNYS", "EVIL"]),
    epoch=wide,
    seq=wide,
    venue_ts_ns=wide,
    bid=wide,
    ask=wide,
    last=wide,
    size=wide,
    handler=st.just("A"),
    decoded_ns=wide,
    admitted_ns=wide,
)


@settings(max_examples=400, deadline=None)
@given(base=ticks, new=ticks)
def test_any_tick_the_gate_admits_encodes(base: Tick, new: Tick) -> None:
    g = gate()
    admitted = list(g.admit([base, new], "property"))
    # The fast test and the careful one agree, tick by tick.
    for t in (base, new):
        assert (tick_problem(t, g.venue_of) is None) == any(a is t for a in admitted)
    for t in admitted:
        record = codec.decode_record(codec.encode_full_record(t))
        assert (record.epoch, record.seq, record.bid, record.size) == (
            t.epoch,
            t.seq,
            t.bid,
            t.size,
        )
        stamps = np.array([t.venue_ts_ns, t.decoded_ns, t.admitted_ns], dtype=np.int64)
        assert stamps.tolist() == [t.venue_ts_ns, t.decoded_ns, t.admitted_ns]
    if len(admitted) == 2 and base.iid == new.iid and (base.epoch, base.seq) < (new.epoch, new.seq):
        # What the sequencer lets through on one symbol: a delta from the older to the newer.
        delta = codec.decode_record(codec.encode_delta_record(base, new))
        full = (base.bid, base.ask, base.last)
        assert codec.apply_record(full, delta) == (new.bid, new.ask, new.last)


def _no_prefix(*_: Any) -> int:
    return 0  # the gate's own Python test from the first tick


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(st.one_of(st.builds(good, seq=st.integers(0, 99)), ticks), max_size=12))
def test_the_gate_answers_the_same_with_or_without_its_native_pass(batch: list[Tick]) -> None:
    """``admit`` lets ``in_range_prefix`` (C when built) vouch for a leading run and decides
    the rest in Python: the same ticks kept, the same refusals counted, whichever scan ran."""
    answers = []
    for prefix in (fields.in_range_prefix, fields.python_in_range_prefix, _no_prefix):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(validate, "in_range_prefix", prefix)
            g = gate()
            kept = g.admit(batch, "property")
            answers.append(([id(t) for t in kept], kept is batch, dict(g.rejected)))
    assert answers[0] == answers[1] == answers[2]


# -- the feed handler as a door ------------------------------------------------------------
def test_the_handler_refuses_what_the_wire_cannot_carry() -> None:
    clock = FakeClock()
    g = gate(clock)
    h = FeedHandler("XNAS", "A", 0, MemoryEpochStore(), clock, update_ids=True, gate=g)
    h.start(at_once=True)
    h.on_venue(
        [
            VenueUpdate(0, "XNAS", 1, TS, 100, 101, 100, 5),
            VenueUpdate(0, "XNAS", 2, TS + 1, 2**63, 101, 100, 5),  # price past int64
            VenueUpdate(1, "XNAS", 2**64, TS + 2, 100, 101, 100, 5),  # id past uint64
            VenueUpdate(2, "XNAS", 3, TS + 3, 100, 101, 100, 5),  # XNYS's instrument
            VenueUpdate(1, "XNAS", None, TS + 4, 100, 101, 100, 5),  # no id on an id venue
            VenueUpdate(1, "XNAS", 4, TS + 5, -100, -99, -100, 5),  # negative prices: fine
            VenueUpdate(0, "XNAS", 5, TS + 6, 100, 101, 100, -5),  # negative size
            VenueUpdate(0, "XNAS", 6, 2**63, 100, 101, 100, 5),  # timestamp past int64
            VenueUpdate(0, "XNAS", 7, TS + 7, 100, 101, 100, 5),
        ]
    )
    out = h.drain_due()
    assert [t.seq for t in out] == [1, 4, 7]
    assert h.refused == 6 and h.malformed == 1
    assert g.rejected == {
        ("XNAS", "price_out_of_range"): 1,
        ("XNAS", "seq_out_of_range"): 1,
        ("XNAS", "wrong_venue"): 1,
        ("XNAS", "missing_update_id"): 1,
        ("XNAS", "size_out_of_range"): 1,
        ("XNAS", "timestamp_out_of_range"): 1,
    }


# -- the NATS bus's inbox as a door (no server needed: the message callback directly) -------
def _msg(subject: str, data: bytes) -> Msg:
    """A NATS message as the subscription hands it over (its client is never used)."""
    return Msg(NATS(), subject=subject, data=data)


def _buffer(*ticks: Tick) -> bytes:
    (batch,) = batch_from_ticks(list(ticks))
    return batch.buffer


async def test_a_bad_tick_costs_only_itself_and_a_bad_buffer_only_itself() -> None:
    g = gate()
    bus = NatsTickBus(gate=g)
    got: list[TickBatch] = []
    bus.subscribe(got.append)
    batch = _buffer(
        good(),
        good(iid=2, seq=2),  # XNYS's instrument in an XNAS batch
        good(iid=3, seq=3),  # not in the dictionary
        good(iid=1, seq=4, venue_ts_ns=-1),  # a venue timestamp before 1970
        good(iid=1, seq=5, decoded_ns=-1),  # a receive stamp below zero
        good(seq=9),
    )
    await bus._on_msg(_msg("md.XNAS.batch", batch))
    assert [t.seq for b in got for t in b.ticks()] == [1_001, 9]
    assert g.rejected == {
        ("XNAS", "wrong_venue"): 1,
        ("XNAS", "unknown_iid"): 1,
        ("XNAS", "timestamp_out_of_range"): 2,
    }
    # buffers that are not a batch: refused whole, counted by reason, no tick refused
    await bus._on_msg(_msg("md.XNAS.batch", batch[:-1]))
    await bus._on_msg(_msg("md.XNAS.batch", b"\xc1 not msgpack"))
    assert {r: n for r, n in g.batches_refused.items() if n} == {"length_mismatch": 1, "short": 1}
    assert bus.decode_errors == 2 and sum(g.rejected.values()) == 4
    # a header naming a venue that is not ours, an epoch the sequencer cannot hold: every tick
    await bus._on_msg(_msg("md.EVIL.batch", _buffer(good(venue="EVIL"), good(venue="EVIL"))))
    await bus._on_msg(_msg("md.XNAS.batch", _buffer(good(epoch=2**63), good(epoch=2**63))))
    assert g.rejected[(UNKNOWN_VENUE, "wrong_venue")] == 2
    assert g.rejected[("XNAS", "epoch_out_of_range")] == 2
    # and the next batch is read as usual
    await bus._on_msg(_msg("md.XNAS.batch", _buffer(good(seq=10), good(iid=1, seq=11))))
    assert [t.seq for t in got[-1].ticks()] == [10, 11] and bus.decode_errors == 2


_i64 = st.integers(-(2**63), 2**63 - 1)
batch_ticks = st.builds(
    Tick,
    iid=st.integers(min_value=0, max_value=4),
    venue=st.just("XNAS"),
    epoch=st.just(3),
    seq=st.integers(0, 2**64 - 1),
    venue_ts_ns=st.one_of(_i64, st.just(TS)),
    bid=_i64,
    ask=_i64,
    last=_i64,
    size=st.integers(0, 2**64 - 1),
    handler=st.just("A"),
    decoded_ns=st.one_of(_i64, st.just(5_000_000_000)),
)


@settings(max_examples=300, deadline=None)
@given(
    ticks=st.lists(batch_ticks, min_size=1, max_size=12),
    venue=st.sampled_from(["XNAS", "XNYS", "EVIL"]),
    epoch=st.one_of(st.integers(0, 9), st.integers(0, 2**64 - 1)),
)
def test_the_batch_gate_keeps_and_counts_what_the_per_tick_gate_does(
    ticks: list[Tick], venue: str, epoch: int
) -> None:
    """``gate_batch`` over a batch's columns keeps exactly the ticks ``admit`` keeps of the same
    ticks as objects, in order, and counts the same refusals (venue and reason; a batch of a
    venue that is not ours, or at an epoch the sequencer cannot hold, is refused as a whole,
    every tick of it for that reason)."""
    for t in ticks:
        t.venue, t.epoch = venue, epoch
    (batch,) = batch_from_ticks(ticks)
    by_tick, by_batch = gate(), gate()
    kept = list(by_tick.admit(ticks, "property"))
    gated = by_batch.gate_batch(batch, "property")
    assert gated.ticks() == kept
    if venue == "EVIL":
        assert not kept and by_batch.rejected == {(UNKNOWN_VENUE, "wrong_venue"): len(ticks)}
    elif epoch >= 2**63:  # the sequencer's versions are int64: neither door lets one through
        assert not kept and by_batch.rejected == {(venue, "epoch_out_of_range"): len(ticks)}
        assert by_tick.rejected_total == len(ticks)
    else:
        assert by_batch.rejected == by_tick.rejected
    if not by_tick.rejected:
        assert gated is batch  # nothing copied on the common path


# -- stage loops of a real node survive -------------------------------------------------------
# Not about admission: a busy machine must not shed the test's own terminal with a 503.


async def _frames_keep_coming(client: TerminalClient, more: int = 10) -> None:
    """``more`` frames arrive (counted, however long a busy machine takes), the terminal still
    connected."""
    before = client.stats.frames
    await until(
        lambda: client.stats.frames > before + more or not client.connected, "frames coming"
    )
    assert client.connected and client.stats.frames > before + more


async def test_the_frame_loop_survives_an_encoder_exception(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(node_config(tmp_path))
    await node.start()
    client = TerminalClient(f"ws://127.0.0.1:{node.ws_port}/")
    try:
        hello = await client.connect()
        keys = [i.key for i in hello.instruments[:40]]
        await client.subscribe(keys)
        await asyncio.sleep(0.5)
        real = codec.encode_delta_record
        poisoned: list[int] = []

        def encode(base: Tick | None, new: Tick) -> bytes:
            if not poisoned:
                poisoned.append(new.iid)  # the first symbol encoded from now on
            if new.iid == poisoned[0]:
                raise ValueError(f"iid {new.iid}: cannot encode")
            return real(base, new)

        real_rows = getattr(sequencer_module, "encode_rows")  # noqa: B009 (patched below)

        def rows(iids: Any, new: tuple[Any, ...], base: tuple[Any, ...]) -> EncodedRows:
            """The frame's native pass, refusing the poisoned symbol: the encoder says why."""
            deltas, puts, refused = real_rows(iids, new, base)
            if not poisoned and deltas:
                poisoned.append(next(iter(deltas)))
            if poisoned and poisoned[0] in deltas:
                del deltas[poisoned[0]]
                puts = [p for p in puts if p[0] != poisoned[0]]
                refused = [*refused, poisoned[0]]
            return deltas, puts, refused

        # One symbol's encoder raises on every frame: the others' frames keep coming.
        monkeypatch.setattr(sequencer_module, "encode_rows", rows)
        monkeypatch.setattr(codec, "encode_delta_record", encode)
        rendered = client.stats.rendered
        await _frames_keep_coming(client)
        await until(lambda: client.stats.rendered > rendered + 10, "quotes rendered")
        assert node.failures.counts.get("encode", 0) > 0
        monkeypatch.setattr(codec, "encode_delta_record", real)
        monkeypatch.setattr(sequencer_module, "encode_rows", real_rows)

        # A whole frame raises once: one frame is lost, the next ones go out.
        publish = node.server.publish_frame
        calls = {"n": 0}

        def publish_frame(frame: Any) -> int:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("a bad frame")
            return publish(frame)

        monkeypatch.setattr(node.server, "publish_frame", publish_frame)
        await _frames_keep_coming(client)
        assert node.failures.counts.get("frame") == 1
        assert not node.failed and client.connected
        assert client.stats.regressions == 0
    finally:
        await client.close()
        await node.stop()


async def test_the_supervisor_restarts_a_loop_that_died(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(node_config(tmp_path, {"simulator.rate": 1000, "server.heartbeat_s": 0.05}))
    await node.start()
    client = TerminalClient(f"ws://127.0.0.1:{node.ws_port}/")
    try:
        await client.connect()
        real = node.server.publish_heartbeat
        calls = {"n": 0}

        def publish_heartbeat(wall_ms: int) -> None:
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("heartbeat broke")
            real(wall_ms)

        monkeypatch.setattr(node.server, "publish_heartbeat", publish_heartbeat)
        # a third call can only come from the loop started again after the second one broke
        await until(lambda: calls["n"] >= 3, "the heartbeat loop started again")
        beats = client.stats.heartbeats
        await until(lambda: client.stats.heartbeats > beats, "a heartbeat after the restart")
        assert node.failures.counts.get("supervisor") == 1
        assert not node.failed
    finally:
        await client.close()
        await node.stop()


async def test_an_invariant_check_that_raises_is_a_counted_stage_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(node_config(tmp_path))
    check = node.invariants.invariants[0]

    def broken() -> Any:
        raise RuntimeError("index walk broke")

    monkeypatch.setattr(check, "check", broken)
    node.invariants.run_once()
    node.invariants.run_once()
    assert node.failures.counts.get("invariants") == 2
    assert not node.invariants.results[check.name].ok  # it cannot vouch for its invariant
    # and the loop is one the supervisor starts again (named as its task is)
    loop = node.invariants.run_forever()
    try:
        assert isinstance(loop, types.CoroutineType)  # a coroutine object has a __qualname__
        assert loop.__qualname__ in node._restartable()
    finally:
        loop.close()


async def test_a_loop_that_keeps_dying_stops_the_node_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(node_config(tmp_path, {"simulator.rate": 1000, "server.heartbeat_s": 0.01}))
    await node.start()
    try:

        def publish_heartbeat(wall_ms: int) -> None:
            raise RuntimeError("heartbeat broke for good")

        monkeypatch.setattr(node.server, "publish_heartbeat", publish_heartbeat)
        await asyncio.wait_for(node.wait(), 10)
        assert node.failed
        assert "FanoutUpkeep.heartbeat_loop" in node.failure_reason
        assert "heartbeat broke for good" in node.failure_reason
    finally:
        await node.stop()
