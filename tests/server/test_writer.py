"""The writer with fake sockets: planned bytes out, a failed socket torn down after the loop,
a gap ended by a snapshot before anything else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from monotape.clock import FakeClock
from monotape.platform.core.conflation import Frame, FrameRecord
from monotape.platform.model import Tick
from monotape.platform.server.endpoint import FanoutServer
from monotape.platform.wire import codec
from tests.server.test_priority_stage import FakeTransport, _connect, _server, _tick


class BrokenTransport(FakeTransport):
    """The uvloop write-after-eof trap: open by every flag, and ``write`` raises."""

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        raise RuntimeError("Cannot call write() after write_eof()")


class Bug(Exception):
    """Not a socket failure: something the writer's loops do not expect."""


class BuggyTransport(FakeTransport):
    """Raises what no write path catches, at the first look at its buffer."""

    def get_write_buffer_size(self) -> int:
        raise Bug("a bug in the middle of the loop")


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
    _connect(server, clock, [1, 2], [], transport=BrokenTransport(clock))
    c = _connect(server, clock, [1, 2], [])
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


def _frame_loop(server: FanoutServer) -> None:
    server.publish_frame(_frame(3, [1, 2]))


def _priority_loop(server: FanoutServer) -> None:
    server.publish_priority([_tick(1, 1, 0), _tick(1, 2, 0)])


def _heartbeat_loop(server: FanoutServer) -> None:
    server.publish_heartbeat(0)


@pytest.mark.parametrize(
    "loop",
    [_frame_loop, _priority_loop, _heartbeat_loop],
    ids=["frame", "priority", "heartbeat"],
)
def test_a_loop_that_raises_midway_still_tears_down_the_terminals_that_failed_before(
    loop: Callable[[FanoutServer], None],
) -> None:
    clock = FakeClock()
    server = _server(clock, None)
    _connect(server, clock, [1, 2], [1])
    _connect(server, clock, [1, 2], [1], transport=BrokenTransport(clock))  # fails first
    _connect(server, clock, [1, 2], [1], transport=BuggyTransport(clock))  # then this raises
    with pytest.raises(Bug):
        loop(server)
    # the failed terminal is gone from the registry and every index, counted by its reason;
    # left registered, the writer, keepalive and drain would skip it forever (it is closing)
    assert 2 not in server.connections and server.index.signature(2) is None
    assert 2 not in server.index.priority_connections(1) and 2 not in server.terminals.behind
    assert server.stats.disconnects == {"write_error": 1}
    assert list(server.connections) == [1, 3]  # the bug is raised, not taken for a write error


def test_a_terminal_that_failed_on_an_earlier_tick_is_not_counted_as_sent_again() -> None:
    clock = FakeClock()
    server = _server(clock, None)
    ok = _connect(server, clock, [1], [1])
    _connect(server, clock, [1], [1], transport=BrokenTransport(clock))
    server.publish_priority([_tick(1, 1, 0), _tick(1, 2, 0), _tick(1, 3, 0)])
    assert len(ok.writes) == 3 and 2 not in server.connections
    # the broken one is counted for no tick: its write failed on the first, then it was gone
    assert server.stats.priority_sent == 3
    assert server.stats.priority_writes + server.flush_priority() == 3
