"""bus/ipc.py and bus/link.py: the host's tick bus over a Unix SEQPACKET socket (real sockets in
a temporary directory, one event loop; the handlers' end and the sequencer's end in one test)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from monotape.platform.bus.ipc import IpcTickBus, bus_path
from monotape.platform.bus.ipc_collector import LinkCollector
from monotape.platform.bus.link import MAX_MESSAGE_BYTES, Drop, LinkCounters
from monotape.platform.bus.memory import TickBus
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.feeds.validate import TickGate
from monotape.platform.model import Tick
from monotape.platform.wire.batch import HEADER, TickBatch, batch_from_ticks, split
from monotape.platform.wire.bundle import pack
from tests.conftest import until
from tests.node.test_collectors import scrape_storm

UNIVERSE = build_universe(6, 60, 7)
VENUE = UNIVERSE[0].venue
OURS = [i.iid for i in UNIVERSE if i.venue == VENUE]  # 0, 6, ..., 54


@pytest.fixture
def run_dir() -> Iterator[Path]:
    # Short on purpose: a Unix socket path holds at most 107 bytes, pytest's tmp_path can be more.
    path = Path(tempfile.mkdtemp(prefix="mt-ipc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _tick(seq: int, iid: int = 0, **kw: int) -> Tick:
    """A tick of VENUE (a batch is one venue's: ``iid`` need not be one of its instruments)."""
    fields: dict[str, int] = dict(
        epoch=3, seq=seq, venue_ts_ns=1_700_000_000_000_000_000 + seq,
        bid=10_000 + seq % 97, ask=10_002 + seq % 97, last=10_001 + seq % 97, size=100,
        decoded_ns=5_000_000_000 + seq,
    )  # fmt: skip
    fields.update(kw)
    return Tick(iid=iid, venue=VENUE, handler="A", **fields)


def _batch(ticks: list[Tick], batch_seq: int = 0) -> TickBatch:
    (batch,) = batch_from_ticks(ticks, batch_seq)
    return batch


def _ours(seqs: range, **kw: int) -> TickBatch:
    """A batch of VENUE's own instruments, one tick a seq."""
    return _batch([_tick(s, iid=OURS[s % len(OURS)], **kw) for s in seqs])


class Received:
    def __init__(self) -> None:
        self.batches: list[TickBatch] = []

    def __call__(self, batch: TickBatch) -> None:
        self.batches.append(batch)

    @property
    def count(self) -> int:
        return sum(b.count for b in self.batches)

    @property
    def ticks(self) -> list[Tick]:
        return [t for b in self.batches for t in b.ticks()]


def _ends(
    run_dir: Path, *, gate: TickGate | None = None
) -> tuple[IpcTickBus, IpcTickBus, Received]:
    sequencer = IpcTickBus(bus_path(run_dir), time.monotonic_ns, gate=gate)
    got = Received()
    sequencer.subscribe(got)
    sequencer.listen()
    handler = IpcTickBus(bus_path(run_dir), time.monotonic_ns)
    return sequencer, handler, got


async def test_round_trip_in_order(run_dir: Path) -> None:
    sequencer, handler, got = _ends(run_dir)
    _: TickBus = handler  # structurally a TickBus
    try:
        sent = [
            _batch([_tick(b * 10 + i, iid=(b + i) % 60) for i in range(10)], batch_seq=b)
            for b in range(20)
        ]
        for batch in sent:
            handler.publish(batch)
        await until(lambda: got.count == 200, "every tick received")
        # one message per batch, in publish order: the very bytes sent, read in place
        assert [b.buffer for b in got.batches] == [b.buffer for b in sent]
        assert [b.ticks() for b in got.batches] == [b.ticks() for b in sent]
        assert [b.batch_seq for b in got.batches] == list(range(20))
        assert handler.counters.sent_messages == 20 and handler.counters.sent_items == 200
        assert sequencer.counters.received_messages == 20
        assert sequencer.counters.received_items == 200
        assert sequencer.counters.peers == 1 and handler.connected
    finally:
        handler.close()
        sequencer.close()
    assert not bus_path(run_dir).exists()  # the sequencer's end removes its socket file


async def test_malformed_messages_are_counted_not_fatal(run_dir: Path) -> None:
    gate = TickGate(UNIVERSE, time.monotonic_ns)
    sequencer, handler, got = _ends(run_dir, gate=gate)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        raw.connect(str(bus_path(run_dir)))
        good = _ours(range(1, 4)).buffer
        raw.send(b"\xc1 not msgpack")  # shorter than a batch's header
        raw.send(good[:-1])  # a batch torn short
        raw.send(good[:3] + b"\x07" + good[4:])  # a format version this end does not read
        raw.send(b"NOT" + good[3:])  # not a batch at all
        handler.publish(_batch([_tick(1, iid=OURS[1]), _tick(2, iid=9999)]))  # 9999: unlisted
        handler.publish(_batch([_tick(3, iid=OURS[2])]))
        await until(
            lambda: got.count == 2 and sequencer.counters.malformed_messages == 4,
            "the valid ticks after the garbage",
        )
        assert [t.seq for t in got.ticks] == [1, 3]
        assert sequencer.counters.malformed_messages == 4
        assert {r: n for r, n in gate.batches_refused.items() if n} == {
            "short": 1, "length_mismatch": 1, "unknown_version": 1, "not_a_batch": 1,
        }  # fmt: skip
        assert gate.rejected == {(VENUE, "unknown_iid"): 1}  # the gate refused the unknown iid
        assert sequencer.counters.received_items == 3  # read, before the gate
    finally:
        raw.close()
        handler.close()
        sequencer.close()


async def test_receiver_down_drops_counted_not_queued(run_dir: Path) -> None:
    handler = IpcTickBus(bus_path(run_dir), time.monotonic_ns)
    for i in range(50):
        handler.publish(_batch([_tick(i)]))
    assert handler.counters.dropped_messages == {Drop.DOWN: 50}
    assert handler.counters.dropped_items == {Drop.DOWN: 50}
    assert handler.counters.sent_messages == 0 and not handler.connected
    # Nothing was kept for later: a sequencer that appears now gets only what is sent after.
    sequencer = IpcTickBus(bus_path(run_dir), time.monotonic_ns)
    got = Received()
    sequencer.subscribe(got)
    sequencer.listen()
    try:
        await _publish_until_received(handler, got, seq=100)
        assert all(t.seq >= 100 for t in got.ticks)
    finally:
        handler.close()
        sequencer.close()


async def _publish_until_received(handler: IpcTickBus, got: Received, *, seq: int) -> None:
    """Publish one tick every 5 ms until one arrives (reconnects are paced: 20 ms)."""
    deadline = time.monotonic() + 20
    while not got.ticks:
        assert time.monotonic() < deadline, "the handler never reached the sequencer"
        handler.publish(_batch([_tick(seq)]))
        seq += 1
        await asyncio.sleep(0.005)


async def test_sender_resumes_after_the_receiver_restarts(run_dir: Path) -> None:
    sequencer, handler, got = _ends(run_dir)
    try:
        await _publish_until_received(handler, got, seq=1)
        sequencer.close()  # the sequencer dies: its end of the connection goes away
        for i in range(10):
            handler.publish(_batch([_tick(1_000 + i)]))
        assert handler.counters.dropped_messages.get(Drop.DOWN, 0) >= 1
        again = Received()
        restarted = IpcTickBus(bus_path(run_dir), time.monotonic_ns)
        restarted.subscribe(again)
        restarted.listen()
        await _publish_until_received(handler, again, seq=2_000)
        assert handler.counters.connects == 2
        restarted.close()
    finally:
        handler.close()
        sequencer.close()


async def test_full_receiver_drops_counted_bounded(run_dir: Path) -> None:
    """A sequencer that stops reading (its loop never runs here): the socket buffer fills, then
    every batch is dropped as receiver_full; the handler's memory holds none of them."""
    sequencer, handler, got = _ends(run_dir)
    try:
        big = _batch([_tick(i, iid=i % 60) for i in range(800)])  # ~54 KB: one message
        assert len(big.buffer) <= MAX_MESSAGE_BYTES
        for _ in range(400):  # ~21 MB offered, far past the ~2 MiB send buffer
            handler.publish(big)
        full = handler.counters.dropped_messages.get(Drop.FULL, 0)
        assert full > 0
        assert handler.counters.sent_messages + full == 400
        assert handler.counters.dropped_items == {Drop.FULL: 800 * full}
        await until(lambda: got.count == handler.counters.sent_items, "what was sent arrives")
    finally:
        handler.close()
        sequencer.close()


async def test_big_batch_is_split_under_the_message_size(run_dir: Path) -> None:
    sequencer, handler, got = _ends(run_dir)
    try:
        spike = [_tick(i, iid=i % 60) for i in range(5_000)]  # a 190k/s spike after a stall
        handler.publish(_batch(spike, batch_seq=40))
        await until(lambda: got.count == 5_000, "the whole spike")
        assert got.ticks == spike  # in order, nothing lost
        assert handler.counters.sent_messages == len(got.batches) >= 4
        assert all(b.count < 5_000 and len(b.buffer) <= MAX_MESSAGE_BYTES for b in got.batches)
        # the parts keep the header and number on from the batch's own sequence number
        assert [b.batch_seq for b in got.batches] == list(range(40, 40 + len(got.batches)))
        assert {(b.venue, b.handler, b.epoch) for b in got.batches} == {(VENUE, "A", 3)}
    finally:
        handler.close()
        sequencer.close()


async def test_a_wake_ups_batches_go_as_one_message(run_dir: Path) -> None:
    """``publish_many``: every venue's batch of a feed process's wake-up in one bundle
    (wire/bundle.py), delivered as the same batches in order; a spike too large for one
    message goes as several, in order; a bundle with a batch that miscounts its ticks loses
    that batch alone, refused by reason."""
    gate = TickGate(UNIVERSE, time.monotonic_ns)
    sequencer, handler, got = _ends(run_dir, gate=gate)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        wake = [_ours(range(10 * k + 1, 10 * k + 11)) for k in range(6)]
        handler.publish_many(wake)
        await until(lambda: got.count == 60, "the wake-up's batches")
        assert [b.buffer for b in got.batches] == [b.buffer for b in wake]
        assert handler.counters.sent_messages == 1 and handler.counters.sent_items == 60
        assert sequencer.counters.received_messages == 1
        spike = [_ours(range(1, 3_001)), _ours(range(3_001, 3_011))]
        handler.publish_many(spike)
        await until(lambda: got.count == 60 + 3_010, "the spike")
        assert [t.seq for t in got.ticks[60:]] == list(range(1, 3_011))
        assert handler.counters.sent_messages == 1 + 4  # 3,000 ticks: 4 messages of <= 60 kB
        good = [_ours(range(1, 4)), _ours(range(4, 6))]
        torn = bytearray(_ours(range(6, 9)).buffer)
        torn[8:12] = (2).to_bytes(4, "little")  # its header says 2 ticks, it holds 3
        miscounted = TickBatch(bytes(torn), VENUE, "A", 3, 0, 3)
        raw.connect(str(bus_path(run_dir)))
        raw.send(pack([good[0], miscounted, good[1]]))
        await until(lambda: got.count == 3_070 + 5, "the bundle's good batches")
        assert [t.seq for t in got.ticks[-5:]] == [1, 2, 3, 4, 5]
        assert gate.batches_refused["length_mismatch"] == 1
        assert sequencer.counters.malformed_messages == 0  # the bundle itself read
    finally:
        raw.close()
        handler.close()
        sequencer.close()


async def test_a_message_longer_than_the_receiver_takes_is_malformed_never_cut(
    run_dir: Path,
) -> None:
    """A message past the receiving end's size is counted malformed whole (MSG_TRUNC tells its
    real length), not read as its first 60 kB; the next message reads as usual."""
    sequencer, handler, got = _ends(run_dir)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        raw.connect(str(bus_path(run_dir)))
        raw.send(bytes(MAX_MESSAGE_BYTES + 500))
        handler.publish(_ours(range(1, 4)))
        await until(lambda: got.count == 3, "the batch after the long message")
        assert sequencer.counters.malformed_messages == 1
        assert sequencer.counters.received_messages == 2
    finally:
        raw.close()
        handler.close()
        sequencer.close()


def test_split_keeps_order_and_size() -> None:
    ticks = [_tick(i) for i in range(300)]
    batch = _batch(ticks)
    parts = split(batch, 2_000)
    assert len(parts) > 1 and all(len(p.buffer) <= 2_000 for p in parts)
    assert [t for p in parts for t in p.ticks()] == ticks
    assert sum(p.count for p in parts) == 300
    assert split(batch, len(batch.buffer)) == [batch]  # the common case: itself
    with pytest.raises(ValueError):  # not even one tick fits
        split(batch, HEADER.size + 66)


def test_a_message_size_that_holds_no_tick_drops_the_batch_counted() -> None:
    """An item larger than a message can never go: counted as oversize, never raised (publish
    never raises), and the next batch is offered as usual."""
    handler = IpcTickBus("/nonexistent/bus.sock", time.monotonic_ns, max_message_bytes=100)
    handler.publish(_batch([_tick(i) for i in range(3)]))
    assert handler.counters.dropped_messages == {Drop.OVERSIZE: 1}
    assert handler.counters.dropped_items == {Drop.OVERSIZE: 3}


def test_collector_exports_links() -> None:
    handler = IpcTickBus("/nonexistent/bus.sock", time.monotonic_ns)
    handler.publish(_batch([_tick(1), _tick(2)]))
    reg = CollectorRegistry()
    reg.register(LinkCollector(lambda: [handler.counters]))
    text = generate_latest(reg).decode()
    assert 'monotape_ipc_dropped_messages_total{link="bus",reason="receiver_down"} 1.0' in text
    assert 'monotape_ipc_dropped_items_total{link="bus",reason="receiver_down"} 2.0' in text
    assert 'monotape_ipc_peers{link="bus"} 0.0' in text


def test_drop_reasons_appear_during_scrapes() -> None:
    """A role scrapes from its telemetry thread while its loop counts drops (host/telemetry.py)."""
    counters = LinkCounters("bus")
    scrape_storm(
        LinkCollector(lambda: [counters]),
        (counters.dropped_messages, lambda i: (f"reason{i}", 1)),
        (counters.dropped_items, lambda i: (f"reason{i}", 2)),
    )


_i64 = st.integers(-(2**63), 2**63 - 1)
_u64 = st.integers(0, 2**64 - 1)


@st.composite
def _batches(draw: st.DrawFn) -> TickBatch:
    """One handler's batch of one venue at one epoch, any column value."""
    venue = draw(st.sampled_from(["XNAS", "XNYS"]))
    handler = draw(st.sampled_from(["A", "B"]))
    epoch = draw(_u64)
    one = st.builds(
        Tick,
        iid=st.integers(0, 59),
        venue=st.just(venue),
        epoch=st.just(epoch),
        seq=_u64,
        venue_ts_ns=st.integers(0, 2**63 - 1),
        bid=_i64,
        ask=_i64,
        last=_i64,
        size=_u64,
        handler=st.just(handler),
        decoded_ns=st.integers(0, 2**63 - 1),
    )
    return _batch(draw(st.lists(one, min_size=1, max_size=80)), draw(st.integers(0, 2**32)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(_batches(), min_size=1, max_size=6),
       max_bytes=st.integers(HEADER.size + 67, 8_000))  # fmt: skip
def test_round_trip_any_batches(batches: list[TickBatch], max_bytes: int) -> None:
    """Whatever the ticks and the message size: what arrives is what was sent, in order."""
    path = Path(tempfile.mkdtemp(prefix="mt-ipc-", dir="/tmp"))

    async def run() -> list[TickBatch]:
        seq_end = IpcTickBus(bus_path(path), time.monotonic_ns, max_message_bytes=max_bytes)
        got = Received()
        seq_end.subscribe(got)
        seq_end.listen()
        pub = IpcTickBus(bus_path(path), time.monotonic_ns, max_message_bytes=max_bytes)
        try:
            for b in batches:
                pub.publish(b)
            total = sum(b.count for b in batches)
            await until(lambda: got.count == total, "every tick", timeout_s=30)
            return got.batches
        finally:
            pub.close()
            seq_end.close()

    try:
        got = asyncio.run(run())
        assert [t for b in got for t in b.ticks()] == [t for b in batches for t in b.ticks()]
        assert all(len(b.buffer) <= max_bytes for b in got)
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_message_larger_than_the_send_buffer_is_oversize(run_dir: Path) -> None:
    """A caller that allows messages past the socket's buffer: dropped as oversize, and the
    connection stays up for the next one."""
    sequencer, _, got = _ends(run_dir)
    handler = IpcTickBus(bus_path(run_dir), time.monotonic_ns, max_message_bytes=8 << 20)
    try:
        handler.publish(_batch([_tick(i, iid=i % 60) for i in range(100_000)]))  # 6.7 MB, one
        assert handler.counters.dropped_messages == {Drop.OVERSIZE: 1}
        handler.publish(_batch([_tick(1)]))
        await until(lambda: got.count == 1, "the next batch")
        assert handler.counters.connects == 1
    finally:
        handler.close()
        sequencer.close()


async def test_a_run_dir_too_deep_for_a_socket_address(run_dir: Path) -> None:
    """``<run_dir>/bus.sock`` longer than a Unix socket address may be (107 bytes) still works."""
    deep = run_dir / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    assert len(str(bus_path(deep))) > 107
    sequencer, handler, got = _ends(deep)
    try:
        await _publish_until_received(handler, got, seq=1)
        assert bus_path(deep).exists()
    finally:
        handler.close()
        sequencer.close()
    assert not bus_path(deep).exists()
