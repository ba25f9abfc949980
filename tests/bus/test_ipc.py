"""bus/ipc.py and bus/link.py: the host's tick bus over a Unix SEQPACKET socket (real sockets in
a temporary directory, one event loop; the handlers' end and the sequencer's end in one test)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import astuple
from prometheus_client import CollectorRegistry, generate_latest

from monotape.platform.bus.ipc import IpcTickBus, bus_path
from monotape.platform.bus.ipc_collector import LinkCollector
from monotape.platform.bus.link import Drop, LinkCounters, split_encode
from monotape.platform.bus.memory import TickBus
from monotape.platform.bus.nats_codec import TickCodec
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.feeds.validate import TickGate
from monotape.platform.model import Tick
from tests.conftest import until
from tests.node.test_collectors import scrape_storm

UNIVERSE = build_universe(6, 60, 7)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    # Short on purpose: a Unix socket path holds at most 107 bytes, pytest's tmp_path can be more.
    path = Path(tempfile.mkdtemp(prefix="mt-ipc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _tick(seq: int, iid: int = 0, **kw: int) -> Tick:
    venue = UNIVERSE[iid].venue if iid < len(UNIVERSE) else "XNAS"
    fields: dict[str, int] = dict(
        epoch=3, seq=seq, venue_ts_ns=1_700_000_000_000_000_000 + seq,
        bid=10_000 + seq % 97, ask=10_002 + seq % 97, last=10_001 + seq % 97, size=100,
        decoded_ns=5_000_000_000 + seq,
    )  # fmt: skip
    fields.update(kw)
    return Tick(iid=iid, venue=venue, handler="A", **fields)


def _rows(ticks: Sequence[Tick]) -> list[tuple[object, ...]]:
    """Field values (decoding yields ``WireTick``, a Tick subclass that compares by type)."""
    return [astuple(t) for t in ticks]


class Received:
    def __init__(self) -> None:
        self.batches: list[list[Tick]] = []

    def __call__(self, ticks: Sequence[Tick]) -> None:
        self.batches.append(list(ticks))

    @property
    def ticks(self) -> list[Tick]:
        return [t for b in self.batches for t in b]


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
        sent = [[_tick(b * 10 + i, iid=(b + i) % 60) for i in range(10)] for b in range(20)]
        for batch in sent:
            handler.publish(batch)
        await until(lambda: len(got.ticks) == 200, "every tick received")
        # one message per batch, in publish order, values intact
        assert [_rows(b) for b in got.batches] == [_rows(b) for b in sent]
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
        raw.send(b"\xc1 not msgpack")  # 0xc1 is never valid msgpack
        raw.send(b"\x92\x01")  # an array cut short
        handler.publish([_tick(1, iid=5), _tick(2, iid=9999)])  # iid 9999: not in the universe
        handler.publish([_tick(3, iid=6)])
        await until(lambda: len(got.ticks) == 2, "the valid ticks after the garbage")
        assert [t.seq for t in got.ticks] == [1, 3]
        assert sequencer.counters.malformed_messages == 2
        assert sum(gate.rejected.values()) == 1  # the gate refused the unknown iid
    finally:
        raw.close()
        handler.close()
        sequencer.close()


async def test_receiver_down_drops_counted_not_queued(run_dir: Path) -> None:
    handler = IpcTickBus(bus_path(run_dir), time.monotonic_ns)
    for i in range(50):
        handler.publish([_tick(i)])
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
        handler.publish([_tick(seq)])
        seq += 1
        await asyncio.sleep(0.005)


async def test_sender_resumes_after_the_receiver_restarts(run_dir: Path) -> None:
    sequencer, handler, got = _ends(run_dir)
    try:
        await _publish_until_received(handler, got, seq=1)
        sequencer.close()  # the sequencer dies: its end of the connection goes away
        for i in range(10):
            handler.publish([_tick(1_000 + i)])
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
        big = [_tick(i, iid=i % 60) for i in range(1_000)]  # ~45 KB per message
        for _ in range(400):  # ~18 MB offered, far past the ~2 MiB send buffer
            handler.publish(big)
        full = handler.counters.dropped_messages.get(Drop.FULL, 0)
        assert full > 0
        assert handler.counters.sent_messages + full == 400
        await until(lambda: len(got.ticks) == handler.counters.sent_items, "what was sent arrives")
    finally:
        handler.close()
        sequencer.close()


async def test_big_batch_is_split_under_the_message_size(run_dir: Path) -> None:
    sequencer, handler, got = _ends(run_dir)
    try:
        spike = [_tick(i, iid=i % 60) for i in range(5_000)]  # a 190k/s spike after a stall
        handler.publish(spike)
        await until(lambda: len(got.ticks) == 5_000, "the whole spike")
        assert _rows(got.ticks) == _rows(spike)  # in order, nothing lost
        assert handler.counters.sent_messages >= 4
        assert all(len(b) < 5_000 for b in got.batches)
    finally:
        handler.close()
        sequencer.close()


def test_split_encode_keeps_order_and_size() -> None:
    codec = TickCodec()
    ticks = [_tick(i) for i in range(300)]
    messages, lost = split_encode(ticks, codec.encode, 2_000)
    assert lost == 0 and all(len(p) <= 2_000 for p, _ in messages)
    assert _rows([t for p, _ in messages for t in codec.decode(p)]) == _rows(ticks)
    assert sum(n for _, n in messages) == 300
    # An item larger than a message can never go: counted, the rest still goes.
    messages, lost = split_encode(ticks[:3], codec.encode, 10)
    assert messages == [] and lost == 3


def test_collector_exports_links() -> None:
    handler = IpcTickBus("/nonexistent/bus.sock", time.monotonic_ns)
    handler.publish([_tick(1), _tick(2)])
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
_ticks = st.builds(
    Tick,
    iid=st.integers(0, 59),
    venue=st.sampled_from(["XNAS", "XNYS"]),
    epoch=_u64,
    seq=_u64,
    venue_ts_ns=st.integers(0, 2**63 - 1),
    bid=_i64,
    ask=_i64,
    last=_i64,
    size=_u64,
    handler=st.sampled_from(["A", "B"]),
    decoded_ns=st.integers(0, 2**63 - 1),
    admitted_ns=st.integers(0, 2**63 - 1),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(_ticks, min_size=1, max_size=80), min_size=1, max_size=6),
       max_bytes=st.integers(200, 8_000))  # fmt: skip
def test_round_trip_any_batches(batches: list[list[Tick]], max_bytes: int) -> None:
    """Whatever the ticks and the message size: what arrives is what was sent, in order."""
    path = Path(tempfile.mkdtemp(prefix="mt-ipc-", dir="/tmp"))

    async def run() -> list[Tick]:
        seq_end = IpcTickBus(bus_path(path), time.monotonic_ns, max_message_bytes=max_bytes)
        got = Received()
        seq_end.subscribe(got)
        seq_end.listen()
        pub = IpcTickBus(bus_path(path), time.monotonic_ns, max_message_bytes=max_bytes)
        try:
            for b in batches:
                pub.publish(b)
            total = sum(map(len, batches))
            await until(lambda: len(got.ticks) == total, "every tick", timeout_s=30)
            return got.ticks
        finally:
            pub.close()
            seq_end.close()

    try:
        assert _rows(asyncio.run(run())) == _rows([t for b in batches for t in b])
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_message_larger_than_the_send_buffer_is_oversize(run_dir: Path) -> None:
    """A caller that allows messages past the socket's buffer: dropped as oversize, and the
    connection stays up for the next one."""
    sequencer, _, got = _ends(run_dir)
    handler = IpcTickBus(bus_path(run_dir), time.monotonic_ns, max_message_bytes=8 << 20)
    try:
        handler.publish([_tick(i, iid=i % 60) for i in range(100_000)])  # ~4.5 MB, one message
        assert handler.counters.dropped_messages == {Drop.OVERSIZE: 1}
        handler.publish([_tick(1)])
        await until(lambda: len(got.ticks) == 1, "the next batch")
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
