"""The writer with fake sockets: planned bytes out, a failed socket torn down after the loop,
a gap ended by a snapshot before anything else."""

from __future__ import annotations

from monotape.clock import FakeClock
from monotape.platform.core.conflation import Frame, FrameRecord
from monotape.platform.model import Tick
from monotape.platform.wire import codec
from tests.server.test_priority_stage import FakeTransport, _connect, _server


class BrokenTransport(FakeTransport):
    """The uvloop write-after-eof trap: open by every flag, and ``write`` raises."""

    def write(self, data: bytes) -> None:
        raise RuntimeError("Cannot call write() after write_eof()")


def _frame(frame_no: int, iids: list[int]) -> Frame:
    def tick(iid: int, seq: int) -> Tick:
        return Tick(iid, "XNAS", 1, seq, 0, 100, 101, 100, 1, "A", 0, 0)

    return Frame(
        frame_no, frame_no * 40_000_000, [FrameRecord(i, tick(i, 1), tick(i, 2)) for i in iids]
    )


def _unframe(wire: bytes) -> bytes:
    return wire[2:] if wire[1] < 126 else wire[4:]


def test_one_broken_socket_is_torn_down_after_the_loop_and_the_others_get_the_frame() -> None:
    clock = FakeClock()
    server = _server(clock, None)
    a = _connect(server, clock, [1, 2], [])
    _connect(server, clock, [1, 2], [])
    c = _connect(server, clock, [1, 2], [])
    broken = BrokenTransport(clock)
    server.connections[2].transport = broken  # type: ignore[assignment]
    server.publish_frame(_frame(3, [1, 2, 5]))
    assert 2 not in server.connections and server.index.signature(2) is None
    assert server.stats.disconnects == {"write_error": 1}
    assert len(a.writes) == len(c.writes) == 1 and a.writes[0] is c.writes[0]  # shared bytes
    message = codec.decode_message(_unframe(a.writes[0]))
    assert isinstance(message, codec.Frame) and [r.iid for r in message.records] == [1, 2]
    assert server.stats.frame_writes == 2 and len(server.write_latencies_ns) == 2
    assert sorted(server.written_iids.tolist()) == [1, 2]
    assert server.stats.payloads_last == 1


def test_a_gap_ends_in_a_snapshot_before_the_next_frame() -> None:
    clock = FakeClock()
    server = _server(clock, None)
    # over the high-water mark (frames go to the ring), under max_queued_bytes (not kicked)
    slow = _connect(server, clock, [1], [], buffered=server.cfg.write_high_water + 1)
    frames = server.cfg.outbox_frames
    for n in range(1, frames + 2):  # one more than the ring holds: a gap
        server.publish_frame(_frame(n, [1]))
    conn = server.connections[1]
    assert conn.outbox.gap and slow.writes == []
    assert server.written_iids.size == 0  # nothing reached a terminal
    slow.buffered = 0  # the terminal reads again
    server.publish_frame(_frame(frames + 2, [1]))
    first = codec.decode_message(_unframe(slow.writes[0]))
    assert isinstance(first, codec.Snapshot)  # never a delta against a base it lost
    assert server.stats.gap_snapshots == 1
    assert 1 not in server.terminals.behind
