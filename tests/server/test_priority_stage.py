"""The ``priority`` stage: one admitted → written value per priority update handed to the
kernel, gathered without loss between frames and recorded in batches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from monotape.clock import FakeClock
from monotape.config import ServerConfig
from monotape.histograms import Recorders, query
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.core.stamps import StageStamps
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.model import Tick
from monotape.platform.node.node import Node
from monotape.platform.sdk.client import TerminalClient
from monotape.platform.server.connection import Connection
from monotape.platform.server.endpoint import FanoutServer
from monotape.platform.server.writer import PRIORITY_BUFFER
from tests.conftest import node_config
from tests.server.fakes import fake_ws

US = 1_000
MS = 1_000_000
WRITE_NS = 100 * US  # each write to a fake socket takes this long on the fake clock


class FakeTransport(asyncio.Transport):
    """A socket that takes ``WRITE_NS`` per write (on the fake clock), or is full."""

    def __init__(self, clock: FakeClock, *, buffered: int = 0) -> None:
        super().__init__()
        self.clock = clock
        self.buffered = buffered  # above the high-water mark: deliveries go to the ring
        self.writes: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        assert isinstance(data, bytes)  # the shared, framed bytes: never a copy or a view
        self.clock.advance(WRITE_NS)
        self.writes.append(data)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False

    def abort(self) -> None:
        pass


def _server(clock: FakeClock, sink: Callable[[np.ndarray], None] | None) -> FanoutServer:
    universe = build_universe(venues=1, instruments=16, seed=1)
    return FanoutServer(ServerConfig(), universe, Sequencer(1), clock, priority=sink)


def _connect(
    server: FanoutServer,
    clock: FakeClock,
    subs: list[int],
    prio: list[int],
    *,
    buffered: int = 0,
    transport: FakeTransport | None = None,
) -> FakeTransport:
    if transport is None:
        transport = FakeTransport(clock, buffered=buffered)
    cid = len(server.connections) + 1
    server.connections[cid] = Connection(
        cid,
        fake_ws(transport),
        outbox_frames=64,
        high_water=server.cfg.write_high_water,
        opened_ns=clock.now_ns(),
    )
    server.index.add_connection(cid)
    server.index.subscribe(cid, subs)
    server.index.set_priority(cid, prio, True)
    return transport


def _tick(iid: int, seq: int, admitted_ns: int) -> Tick:
    return Tick(iid, "XNAS", 1, seq, 0, 100, 101, 100, 1, "A", admitted_ns, admitted_ns)


def test_one_value_per_priority_write_equal_to_written_minus_admitted() -> None:
    clock = FakeClock()
    got: list[int] = []
    server = _server(clock, lambda values: got.extend(values.tolist()))
    a = _connect(server, clock, [1, 2, 3], [1, 2])
    b = _connect(server, clock, [1, 3], [1])
    slow = _connect(server, clock, [1], [1], buffered=1 << 30)  # behind: its ring gets it
    idle = _connect(server, clock, [1, 2, 3], [])  # subscribed, no order ticket
    start = clock.now_ns()
    ticks = [_tick(1, 1, start - 2 * MS), _tick(2, 1, start - 1 * MS), _tick(3, 1, start)]

    server.publish_priority(ticks)

    assert got == []  # gathered, not recorded per value
    assert server.flush_priority() == 3
    # iid 1 to a and b (the 1st and 2nd writes), iid 2 to a (the 3rd); iid 3 has no ticket.
    # The k-th write is handed over at start + k * WRITE_NS, whichever connection comes first.
    assert sorted(got) == [
        1 * MS + 3 * WRITE_NS,
        2 * MS + 1 * WRITE_NS,
        2 * MS + 2 * WRITE_NS,
    ]
    assert (len(a.writes), len(b.writes), len(slow.writes), len(idle.writes)) == (2, 1, 0, 0)
    assert len(server.connections[3].outbox) == 1  # queued, so no priority value (as `write`)
    assert server.stats.priority_sent == 4 and server.stats.priority_writes == 3
    assert server.flush_priority() == 0 and len(got) == 3  # handed on once


def test_priority_values_land_in_the_priority_histogram() -> None:
    clock = FakeClock()
    stamps = StageStamps(Recorders(start_ms=0))
    server = _server(clock, stamps.prioritized)
    _connect(server, clock, [1], [1])
    start = clock.now_ns()
    server.publish_priority([_tick(1, s, start - 3 * MS) for s in range(1, 5)])
    server.flush_priority()
    by = {iv.stage: iv for iv in stamps.rotate(1_000, 0)}
    h = by["priority"].histogram
    assert h.get_total_count() == 4
    # 3.1, 3.2, 3.3 and 3.4 ms (whole µs in the histogram): written minus admitted
    for k in range(1, 5):
        assert h.get_count_at_value((3 * MS + k * WRITE_NS) // US) == 1
    assert by["write"].count == 0  # the priority path is not counted as frame writes


def test_a_burst_between_frames_is_bounded_and_nothing_is_lost() -> None:
    clock = FakeClock()
    batches: list[int] = []
    got: list[int] = []

    def sink(values: np.ndarray) -> None:
        batches.append(len(values))
        got.extend(values.tolist())  # a view of the server's reused buffer: copy it now

    server = _server(clock, sink)
    _connect(server, clock, [5], [5])
    start = clock.now_ns()
    n = PRIORITY_BUFFER + 5
    server.publish_priority([_tick(5, s, start) for s in range(1, n + 1)])
    assert batches == [PRIORITY_BUFFER]  # handed on early, when the buffer filled
    assert server.flush_priority() == 5
    assert batches == [PRIORITY_BUFFER, 5]
    # The k-th write was handed over k writes after `start`: every value, in order, none reused.
    assert got == [k * WRITE_NS for k in range(1, n + 1)]


async def test_node_records_every_priority_write_between_rotations(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, {"simulator.rate": 8000})
    node = Node(cfg)
    await node.start()
    try:
        client = TerminalClient(f"ws://127.0.0.1:{node.ws_port}/")
        hello = await client.connect()
        keys = [i.key for i in hello.instruments[:20]]
        await client.subscribe(keys)
        await client.set_priority(keys[:8])
        await asyncio.sleep(1.5)
        await client.close()
        received = client.stats.priority
        node.rotate_histograms()  # takes the writes since the last frame too
        # Every interval written so far, whatever the 10 s rotations did meanwhile.
        p = query(node.hdr_dir, "priority", 0, node.clock.wall_ns() // 1_000_000 + 1)
        assert received >= 5, "too few priority updates to judge"
        assert p.count == node.server.stats.priority_writes >= received
        assert 0 < p.max_us < 1_000_000  # admitted → written, on a real clock: under 1 s
    finally:
        await node.stop()


def test_a_rotation_takes_the_priority_writes_since_the_last_frame(tmp_path: Path) -> None:
    clock = FakeClock()
    node = Node(node_config(tmp_path), clock)  # built, not started: no frame loop runs
    _connect(node.server, clock, [1, 2], [1, 2])
    start = clock.now_ns()
    node.server.publish_priority([_tick(1, 1, start - 4 * MS), _tick(2, 1, start - 4 * MS)])
    node.rotate_histograms()
    p = node.latest_latency["priority"]
    assert p.count == 2 == node.server.stats.priority_writes
    assert p.min_us == (4 * MS + WRITE_NS) // US
    node.rotate_histograms()
    assert node.latest_latency["priority"].count == 0  # recorded once, in its own interval
    node.histograms.writer.close()
