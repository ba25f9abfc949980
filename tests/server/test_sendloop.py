"""The native writer's loop on modelled sockets: for any schedule of full sockets, partial sends,
EAGAIN and reads, every terminal's byte stream is the one the pure-Python transport path gives
(never reordered, duplicated or lost); a refused send tears its terminal down by name.

A terminal here is a kernel buffer with some room (what ``send`` and the transport's own write
can put in it now) and the transport's buffer behind it; ``send_many`` is a model of the C loop
over those same buffers, so both paths meet exactly the same sockets.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.config import ServerConfig
from monotape.invariants import NativeEntries
from monotape.platform.core.conflation import Frame, FrameRecord
from monotape.platform.core.disconnect import Disconnect
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.model import Tick
from monotape.platform.server.connection import Connection
from monotape.platform.server.endpoint import FanoutServer
from monotape.platform.server.sendmany import (
    FLAG_CLOSING,
    Payload,
    PySendTable,
    SendMany,
    Shortfall,
)
from monotape.platform.wire import codec
from tests.server.fakes import native_ws
from tests.server.test_native_writer import check_stream

HIGH_WATER = 4096


class Socket:
    """One terminal's socket: what reached the kernel, its room, and the transport's buffer."""

    def __init__(self, room: int) -> None:
        self.kernel = bytearray()
        self.room = room
        self.buffer = bytearray()
        self.refuse = 0  # an errno every send meets (a vanished peer)
        self.transport_error = False  # the transport's own write raises (write-after-eof)
        self.transport: Transport | None = None

    def take(self, data: bytes) -> int:
        n = min(self.room, len(data))
        self.kernel += data[:n]
        self.room -= n
        return n

    def read(self, n: int) -> None:
        """The terminal reads ``n`` bytes: room for more, and the transport flushes into it."""
        self.room += n
        if self.buffer:
            taken = self.take(bytes(self.buffer))
            del self.buffer[:taken]
            if not self.buffer and self.transport is not None:
                self.transport.drained()


class Transport(asyncio.Transport):
    """The transport's behaviour that matters here: write tries the kernel first when its own
    buffer is empty (asyncio and uvloop both), and keeps the rest."""

    def __init__(self, sock: Socket) -> None:
        super().__init__()
        self.sock = sock
        sock.transport = self
        self.mirror: Any = None  # told when the buffer starts and stops holding bytes

    def track(self, mirror: Any) -> None:
        """websockets' side of ``track_queued``: flow control with limits of 0 and 0."""
        self.mirror = mirror

    def drained(self) -> None:
        if self.mirror is not None:
            self.mirror.set_queued(False)

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        data = bytes(data)  # the rest of a partial send comes as a slice
        if self.sock.transport_error:
            raise RuntimeError("write after write_eof")
        if self.sock.refuse:
            return  # a real transport fails on its own, later (connection_lost)
        if not self.sock.buffer:
            data = data[self.sock.take(data) :]
            if data and self.mirror is not None:
                self.mirror.set_queued(True)  # pause_writing: the first byte it keeps
        self.sock.buffer += data

    def get_write_buffer_size(self) -> int:
        return len(self.sock.buffer)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False

    def abort(self) -> None:
        pass


def model_send_many(sockets: dict[int, Socket]) -> SendMany:
    """``send_many`` over modelled sockets, with the C loop's results."""

    def send_many(payload: Payload, fds: Iterable[int]) -> list[Shortfall] | None:
        assert isinstance(payload, bytes)
        short: list[Shortfall] = []
        for i, fd in enumerate(fds):
            sock = sockets[fd]
            assert not sock.buffer, "send_many on a socket whose transport holds bytes"
            if sock.refuse:
                short.append((i, 0, sock.refuse))
                continue
            sent = sock.take(payload)
            if sent < len(payload):
                short.append((i, sent, 0 if sent else errno.EAGAIN))
        return short or None

    return send_many


def _server(
    native: bool,
    rooms: list[int],
    subs: list[list[int]],
    send_many: Callable[[dict[int, Socket]], SendMany] = model_send_many,
) -> tuple[FanoutServer, list[Socket]]:
    clock = FakeClock()
    universe = build_universe(venues=1, instruments=16, seed=1)
    cfg = ServerConfig(write_high_water=HIGH_WATER, native_writer=False)
    server = FanoutServer(cfg, universe, Sequencer(1), clock)
    sockets: dict[int, Socket] = {}
    for cid, (room, iids) in enumerate(zip(rooms, subs, strict=True), start=1):
        sock = sockets[cid] = Socket(room)
        transport = Transport(sock)
        ws = native_ws(transport, transport.track, ("127.0.0.1", cid))
        conn = Connection(cid, ws, outbox_frames=8, high_water=HIGH_WATER, opened_ns=0)
        conn.fd = cid if native else -1
        server.terminals.admit(conn)
        server.index.subscribe(cid, iids)
        server.index.set_priority(cid, iids[:1], True)
    if native:
        model = send_many(sockets)
        table = PySendTable(model, own_fds=False)  # the model's fds are not the kernel's
        server.writer.sendloop = server.writer.send_loop(model, table)
    return server, [sockets[c] for c in sorted(sockets)]


def _tick(iid: int, seq: int) -> Tick:
    return Tick(iid, "XNAS", 1, seq, 0, 100 + seq, 101 + seq, 100 + seq, 1, "A", 0, 0)


def _frame(frame_no: int, iids: list[int], seq: int) -> Frame:
    return Frame(
        frame_no,
        frame_no * 40_000_000,
        [FrameRecord(i, _tick(i, seq - 1), _tick(i, seq)) for i in iids],
    )


Step = tuple[list[int], list[int], bool]  # changed iids, bytes each terminal reads, priority


def _play(native: bool, rooms: list[int], subs: list[list[int]], steps: list[Step]) -> list[bytes]:
    server, sockets = _server(native, rooms, subs)
    for k, (iids, reads, priority) in enumerate(steps, start=2):
        if priority:
            server.publish_priority([_tick(i, k) for i in iids])
        server.publish_frame(_frame(k, iids, k))
        for sock, n in zip(sockets, reads, strict=True):
            sock.read(n)
    for sock in sockets:  # the terminals read everything; the rings drain
        for _ in range(64):
            sock.read(1 << 20)
            server.writer.flush_behind()
    return [bytes(s.kernel) for s in sockets]


terminals = st.integers(1, 5)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[int], list[list[int]], list[Step]]:
    n = draw(terminals)
    rooms = draw(st.lists(st.integers(0, 3000), min_size=n, max_size=n))
    subs = draw(
        st.lists(
            st.lists(st.integers(0, 15), min_size=1, max_size=16, unique=True),
            min_size=n,
            max_size=n,
        )
    )
    steps = draw(
        st.lists(
            st.tuples(
                st.lists(st.integers(0, 15), min_size=1, max_size=16, unique=True).map(sorted),
                st.lists(st.integers(0, 400), min_size=n, max_size=n),
                st.booleans(),
            ),
            min_size=1,
            max_size=40,
        )
    )
    return rooms, subs, steps


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_any_schedule_of_full_sockets_gives_the_python_paths_bytes(
    scenario: tuple[list[int], list[list[int]], list[Step]],
) -> None:
    rooms, subs, steps = scenario
    native = _play(True, rooms, subs, steps)
    python = _play(False, rooms, subs, steps)
    assert native == python
    for stream in native:
        check_stream(stream, bases=False)


def test_a_partial_send_hands_the_exact_rest_and_stays_on_the_transport_until_drained() -> None:
    server, (sock,) = _server(True, [10], [[1, 2, 3]])
    loop = server.writer.sendloop
    assert loop is not None
    server.publish_frame(_frame(2, [1, 2, 3], 2))
    assert loop.partials == 1 and len(sock.kernel) == 10 and sock.buffer  # cut mid-payload
    writes = loop.writes
    server.publish_frame(_frame(3, [1], 3))  # its transport holds bytes: not the native path
    assert loop.writes == writes
    sock.read(1 << 20)  # drained
    server.publish_frame(_frame(4, [1], 4))
    assert loop.writes == writes + 1  # native again
    check_stream(bytes(sock.kernel), bases=False)


def test_a_refused_send_tears_its_terminal_down_by_name_and_spares_the_others() -> None:
    server, socks = _server(True, [1 << 20] * 3, [[1], [1], [1]])
    socks[0].refuse = errno.ECONNRESET
    socks[1].refuse = errno.EBADF
    server.publish_frame(_frame(2, [1], 2))
    assert dict(server.stats.disconnects) == {"connection_lost": 1, "write_error": 1}
    assert list(server.connections) == [3]
    assert socks[2].kernel and server.connections[3].frames_sent == 1
    assert server.stats.frame_writes == 1 and len(server.write_latencies_ns) == 1
    loop = server.writer.sendloop
    assert loop is not None and loop.failures == 2


def test_the_priority_path_and_heartbeats_use_the_native_loop_too() -> None:
    server, (sock,) = _server(True, [1 << 20], [[1, 2]])
    loop = server.writer.sendloop
    assert loop is not None
    server.publish_priority([_tick(1, 5)])  # an order ticket holds iid 1 (``_server``)
    assert loop.writes == 1 and server.flush_priority() == 1
    assert server.stats.priority_sent == 1
    server.publish_heartbeat(0)
    assert loop.writes == 2
    check_stream(bytes(sock.kernel), bases=False)


def test_a_send_many_that_raises_still_tears_down_the_terminal_refused_before() -> None:
    calls = 0

    def second_call_raises(sockets: dict[int, Socket]) -> SendMany:
        model = model_send_many(sockets)

        def send_many(payload: Payload, fds: Iterable[int]) -> list[Shortfall] | None:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise TypeError("a bug in the middle of the frame")
            return model(payload, fds)

        return send_many

    # two signatures: two payload groups, two send_many calls; the first refuses terminal 1
    server, socks = _server(True, [1 << 20] * 3, [[1], [2], [2]], second_call_raises)
    socks[0].refuse = errno.EBADF
    with pytest.raises(TypeError):
        server.publish_frame(_frame(2, [1, 2], 2))
    assert dict(server.stats.disconnects) == {"write_error": 1}
    assert list(server.connections) == [2, 3]  # the bug is raised, not taken for a write error
    assert server.index.signature(1) is None
    # nothing reached the kernel in the call that raised: nothing counted as sent
    assert [server.connections[c].frames_sent for c in (2, 3)] == [0, 0]
    assert server.sent_totals() == (0, 0)


def test_a_terminal_refused_on_an_earlier_tick_is_not_counted_as_sent_again() -> None:
    server, socks = _server(True, [1 << 20] * 2, [[1], [1]])  # both hold iid 1 as priority
    socks[0].refuse = errno.EBADF
    server.publish_priority([_tick(1, 5), _tick(1, 6), _tick(1, 7)])
    assert list(server.connections) == [2]
    # the refused terminal is counted for no tick, neither the one its socket refused nor later
    assert server.stats.priority_sent == 3
    assert server.flush_priority() == 3


@pytest.mark.parametrize("native", [True, False])
def test_a_priority_record_from_the_ring_counts_only_the_terminals_that_took_it(
    native: bool,
) -> None:
    server, socks = _server(native, [1 << 20] * 3, [[1], [1], [2]])  # 1, 2 hold iid 1; 3 iid 2
    if native:
        socks[0].refuse = errno.EBADF
    else:
        socks[0].transport_error = True
    record = codec.encode_full_record(_tick(1, 5))
    sent = server.writer.publish_priority_chunks({1: record, 2: record}, admitted_ns=0)
    assert list(server.connections) == [2, 3]  # the refused one torn down, after the loop
    assert sent == 2 and server.stats.priority_sent == 2  # 2 (iid 1) and 3 (iid 2): not 1
    assert server.flush_priority() == 2


class CountingDict(dict[int, Any]):
    """The terminals' connection map, counting the lookups of a tuple rebuild."""

    gets = 0

    def get(self, key: int, default: Any = None) -> Any:
        self.gets += 1
        return super().get(key, default)


def test_a_rate_groups_payload_neither_evicts_the_25_hz_tuple_nor_is_rebuilt_next_boundary() -> (
    None
):
    """A max_hz rate group's payload has the 25 Hz payload's signature but a fresh set of its own
    at each boundary: both connection tuples are kept, so no frame rebuilds either."""
    server, _ = _server(True, [1 << 20] * 4, [[1, 2]] * 4)
    loop = server.writer.sendloop
    assert loop is not None
    counting = CountingDict(server.terminals.connections)
    server.terminals.connections = counting
    sig = 7
    paced = frozenset({1, 2})  # the index's own set: the same object frame after frame
    wire = b"\x82\x01x"
    for boundary in range(3):
        for _ in range(4):
            assert loop.send_frame(wire, paced, sig, []) == 2
            loop.end_frame()
        assert loop.send_frame(wire, {3, 4}, sig, []) == 2  # a rate group: a new set each time
        assert counting.gets == 4, boundary  # built once each, at the first frame and boundary
    assert loop.send_frame(wire, {3}, sig, []) == 1  # another group: its own tuple
    assert counting.gets == 5


def _churn(native: bool) -> tuple[list[bytes], int]:
    """Terminals join, change their set and leave between frames: the native path's
    per-signature connection tuples follow the index (rebuilt when its set for the signature
    is another one), and every terminal's stream is the Python path's."""
    server, socks = _server(native, [1 << 20] * 3, [[1, 2], [1, 2], [1, 2]])
    server.publish_frame(_frame(2, [1, 2], 2))
    sig = server.index.signature(1)
    assert sig is not None
    loop = server.writer.sendloop
    held = loop._groups[sig][1] if loop is not None else ()
    server.publish_frame(_frame(3, [1], 3))
    reused = int(loop is not None and loop._groups[sig][1] is held)
    extra = Socket(1 << 20)
    transport = Transport(extra)
    if loop is not None:  # the model's sockets now include the newcomer's
        server.terminals.use_table(
            PySendTable(model_send_many({**dict(enumerate(socks, 1)), 4: extra}), own_fds=False)
        )
    conn = Connection(
        4,
        native_ws(transport, transport.track, ("127.0.0.1", 4)),
        outbox_frames=8,
        high_water=HIGH_WATER,
        opened_ns=0,
    )
    conn.fd = 4 if native else -1
    server.terminals.admit(conn)
    server.index.subscribe(4, [1, 2])  # joins the signature
    server.publish_frame(_frame(4, [1, 2], 4))
    server.index.unsubscribe(2, [2])  # leaves it for another
    server.publish_frame(_frame(5, [1, 2], 5))
    server.terminals.teardown(3, Disconnect.WRITE_ERROR)  # leaves for good
    server.publish_frame(_frame(6, [2], 6))
    server.publish_frame(_frame(7, [1], 7))
    return [bytes(s.kernel) for s in [*socks, extra]], reused


def test_joins_set_changes_and_teardowns_between_frames_keep_the_python_paths_bytes() -> None:
    native, reused = _churn(True)
    python, _ = _churn(False)
    assert reused == 1  # an unchanged signature reuses its tuple: no per-terminal rebuild
    assert native == python
    assert native[2] and native[3]  # the one that left got frames before; the one that joined
    for stream in native:
        check_stream(stream, bases=False)


def test_the_audit_names_an_entry_a_skipped_flag_left_open_and_a_leaked_one() -> None:
    """``native_entries``: a clear entry for a terminal the Python path would not write behind
    its transport's back (a flag change that bypassed its setter), and an entry no connection
    holds, are counted and named; the table as the connections keep it audits clean."""
    server, socks = _server(True, [1 << 20] * 3, [[1, 2]] * 3)
    loop = server.writer.sendloop
    assert loop is not None
    check = NativeEntries(server.writer.audit)
    assert loop.audit() == (0, []) and check.check().ok
    conns = server.terminals.connections
    conns[1].closing = True  # through the property: the entry follows
    server.terminals.behind.add(2)  # through the BehindSet: the entry follows
    socks[2].room = 0
    conns[3].transport.write(b"\x82\x01x")  # the transport keeps it: QUEUED via its flow
    assert loop.audit() == (0, [])
    loop.table.set(conns[1].handle, FLAG_CLOSING, False)  # as a change past the setter leaves it
    assert loop.audit() == (1, ["conn:1"])
    loop.table.add(99, 0)  # an entry no connection holds
    count, offending = loop.audit()
    assert count == 2 and offending == ["conn:1", "leaked:1"]
    result = check.check()
    assert not result.ok and (result.expected, result.actual) == (0, 2)


def test_the_audit_has_nothing_to_say_without_the_native_writer() -> None:
    server, _ = _server(False, [1 << 20], [[1]])
    assert server.writer.sendloop is None and server.writer.audit() is None
    assert NativeEntries(server.writer.audit).check().ok


class _OutOfDescriptors(PySendTable):
    """A table over the model whose next ``add`` meets EMFILE, as ``dup`` does at the limit."""

    refuse = 0

    def add(self, fd: int, flags: int, /) -> int:
        if self.refuse:
            self.refuse -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return super().add(fd, flags)


def test_a_terminal_whose_socket_cannot_be_duplicated_is_served_and_counted() -> None:
    """Out of descriptors (the entry costs one more): the terminal is admitted, left on the
    transport path, counted; its stream is the Python path's; nothing is left registered."""
    native, native_socks = _server(True, [1 << 20] * 2, [[1, 2]] * 2)
    python, python_socks = _server(False, [1 << 20] * 2, [[1, 2]] * 2)
    loop = native.writer.sendloop
    assert loop is not None
    table = _OutOfDescriptors(model_send_many(dict(enumerate(native_socks, 1))), own_fds=False)
    table.refuse = 1
    native.terminals.use_table(table)
    assert native.stats.native_unattached == 1 and len(table) == 1
    streams = []
    for server, socks in ((native, native_socks), (python, python_socks)):
        for k in range(2, 6):
            server.publish_frame(_frame(k, [1, 2], k))
        streams.append([bytes(sock.kernel) for sock in socks])
    assert streams[0] == streams[1] and all(streams[0])
    assert loop.audit() == (0, [])
    for cid in list(native.connections):
        native.terminals.teardown(cid, Disconnect.CLOSED)
    assert not native.connections and len(table) == 0


class _Closing(Transport):
    def is_closing(self) -> bool:
        return True


def test_a_terminal_whose_transport_is_already_closing_gets_no_entry() -> None:
    """Its transport may have released the fd, and the kernel may have given the number to a
    newer connection: the table must never duplicate it (the terminal keeps the Python path)."""
    server, _ = _server(True, [1 << 20], [[1]])
    loop = server.writer.sendloop
    assert loop is not None
    transport = _Closing(Socket(1 << 20))
    conn = Connection(
        2,
        native_ws(transport, transport.track, ("127.0.0.1", 2)),
        outbox_frames=8,
        high_water=HIGH_WATER,
        opened_ns=0,
    )
    conn.fd = 2
    server.terminals.admit(conn)
    assert conn.table is None and conn.handle == -1 and len(loop.table) == 1
    assert server.stats.native_unattached == 0  # not a shortage: nothing to count
