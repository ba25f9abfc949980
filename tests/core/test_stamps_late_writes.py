"""The ``write`` stage counts every frame handed to the kernel, also one that waited in a slow
terminal's ring: it keeps its publish time there, and its late write is timed from it. A frame
the ring dropped is a gap, not a write; the snapshot that ends the gap is no frame."""

from __future__ import annotations

from typing import Any

import numpy as np

from monotape.clock import FakeClock
from monotape.config import ServerConfig
from monotape.histograms import Recorders
from monotape.platform.core.outbox import Outbox
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.core.stamps import StageStamps
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.model import Tick
from monotape.platform.server.connection import Connection
from monotape.platform.server.endpoint import FanoutServer
from tests.server.fakes import fake_ws
from tests.server.test_priority_stage import WRITE_NS, FakeTransport

US = 1_000
MS = 1_000_000
OFFSET = 1_700_000_000 * 10**9


def test_the_ring_keeps_each_frames_publish_time_and_nothing_else() -> None:
    o = Outbox(3)
    o.push(b"f1", 10)
    o.push(b"answer")  # not a frame: 0
    assert o.head_published_ns == 10 and o.pop() == b"f1"
    assert o.head_published_ns == 0 and o.pop() == b"answer"
    assert o.head_published_ns == 0 and o.pop() is None
    for k in range(4):  # the 4th overflows: a gap, and nothing queued keeps a time
        o.push(b"f", 20 + k)
    assert o.gap and len(o) == 0 and o.head_published_ns == 0
    o.resolve_gap(b"SNAP")
    assert o.head_published_ns == 0  # the snapshot is no frame
    o.push(b"f5", 50)
    assert o.drain(1) == [b"SNAP"] and o.head_published_ns == 50
    o.clear()
    assert o.head_published_ns == 0


class Desk:
    """A fan-out with terminals on fake sockets, stamped the way the node's pipeline stamps."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        universe = build_universe(venues=1, instruments=16, seed=1)
        self.server = FanoutServer(ServerConfig(), universe, Sequencer(1), self.clock)
        self.recorders = Recorders(start_ms=0)
        self.stamps = StageStamps(self.recorders)
        self.seq = 0

    def connect(self, iids: list[int], *, behind: bool = False, ring: int = 64) -> FakeTransport:
        server = self.server
        # above the high-water mark (not so far as to be kicked): its frames go to its ring
        transport = FakeTransport(
            self.clock, buffered=server.cfg.write_high_water + 1 if behind else 0
        )
        cid = len(server.connections) + 1
        server.connections[cid] = Connection(
            cid,
            fake_ws(transport),
            outbox_frames=ring,
            high_water=server.cfg.write_high_water,
            opened_ns=self.clock.now_ns(),
        )
        server.index.add_connection(cid)
        server.index.subscribe(cid, iids)
        return transport

    def frame(self, iids: list[int]) -> int:
        """A tick for each of ``iids`` decoded and admitted now, the frame 40 ms later: returns
        its publish time."""
        clock, server, stamps = self.clock, self.server, self.stamps
        now = clock.now_ns()
        self.seq += 1
        ticks = [
            Tick(i, "XNAS", 1, self.seq, OFFSET + now, 100, 101, 100, 1, "A", now) for i in iids
        ]
        stamps.decoded(ticks)
        sequencer = server.sequencer
        assert sequencer is not None  # the one-process node's server
        stamps.admitted(sequencer.on_ticks(ticks, now))
        clock.advance(40 * MS)
        boundary = clock.now_ns()
        published = server.publish_frame(sequencer.take_frame(boundary))
        stamps.framed(boundary, published, OFFSET)
        stamps.written(
            np.asarray(server.write_latencies_ns, dtype=np.int64),
            server.written_iids,
            direct=server.writer.direct_writes,
        )
        return published

    def histograms(self) -> dict[str, Any]:
        return {iv.stage: iv.histogram for iv in self.stamps.rotate(1_000, OFFSET)}


def test_a_slow_terminal_that_catches_up_adds_its_late_writes_with_their_real_latencies() -> None:
    desk = Desk()
    fast = desk.connect([1])
    slow = desk.connect([1], behind=True)
    p1, p2, p3 = desk.frame([1]), desk.frame([1]), desk.frame([1])  # three wait in its ring
    assert len(fast.writes) == 3 and slow.writes == []
    slow.buffered = 0  # its socket drained
    p4 = desk.frame([1])
    # frame 4: to fast at once (one WRITE_NS), queued behind slow's three, then all four out
    assert len(fast.writes) == 4 and len(slow.writes) == 4
    assert desk.server.writer.direct_writes == 1
    late = desk.server.write_latencies_ns[1:]
    assert late == [
        p4 + k * WRITE_NS - p for k, p in zip(range(2, 6), (p1, p2, p3, p4), strict=True)
    ]
    assert late[0] > 120 * MS and late[2] > 40 * MS  # the waits really happened
    h = desk.histograms()
    write = h["write"]
    assert write.get_total_count() == 4 + 4  # fast's four and slow's four
    assert write.get_count_at_value(WRITE_NS // US) == 4  # every direct write took one WRITE_NS
    for value in late:
        assert write.get_count_at_value(value // US) >= 1
    assert write.get_max_value() >= late[0] // US
    # tick_to_write is each frame's slowest *direct* write: the late ones never move it
    t2w = h["tick_to_write"]
    assert t2w.get_total_count() == 4
    # decoded 40 ms before the boundary, one WRITE_NS to fast (µs, to HDR's 3 digits)
    assert (40 * MS + WRITE_NS) // US <= t2w.get_max_value() < 41 * MS // US


def test_a_frame_dropped_from_the_ring_is_a_gap_not_a_write() -> None:
    desk = Desk()
    fast = desk.connect([1])
    slow = desk.connect([1], behind=True, ring=2)
    for _ in range(3):  # the third overflows its ring of two: a gap, the frames dropped
        desk.frame([1])
    conn = desk.server.connections[2]
    assert conn.outbox.gap and conn.outbox.drops == 3
    slow.buffered = 0
    desk.frame([1])  # refused into the gap, then the gap ends in a snapshot
    assert len(fast.writes) == 4 and len(slow.writes) == 1  # the snapshot only
    assert desk.server.stats.gap_snapshots == 1
    h = desk.histograms()
    assert h["write"].get_total_count() == 4  # fast's four; nothing of slow's


def test_late_writes_while_behind_go_out_in_order_with_their_own_frames_times() -> None:
    """A terminal that catches up over several frames: each flush adds only the frames it
    handed on, each timed from its own publish; a frame queued is never counted twice."""
    desk = Desk()
    desk.connect([1])
    slow = desk.connect([1], behind=True)
    published = [desk.frame([1]) for _ in range(2)]
    slow.buffered = 0
    published.append(desk.frame([1]))
    first = list(desk.server.write_latencies_ns[desk.server.writer.direct_writes :])
    published.append(desk.frame([1]))  # slow is caught up: this one goes at once
    second = list(desk.server.write_latencies_ns[desk.server.writer.direct_writes :])
    assert len(first) == 3 and second == []
    assert desk.server.writer.direct_writes == 2  # both terminals straight from the fan-out
    h = desk.histograms()
    assert h["write"].get_total_count() == 2 + 1 + 3 + 2
