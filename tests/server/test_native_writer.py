"""The native writer on real sockets (loopback): the same frames through the native send loop and
the pure-Python transport path deliver byte-identical streams; partial sends hand the exact rest
to the transport; terminals that vanish are torn down with a named reason, the others unaffected.

Each scenario runs on asyncio's own loop and on uvloop (``monotape run``'s): the two transports
keep their buffers differently, and the native loop writes behind both. The server is a real
``FanoutServer`` driven frame by frame from the test (no clock, no feed: deterministic bytes);
the terminals are raw sockets that record every byte after the upgrade.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import socket
import struct
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast

import pytest
from websockets.protocol import State

from monotape.clock import SystemClock
from monotape.config import ServerConfig
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.model import Instrument, Tick
from monotape.platform.server import sendmany
from monotape.platform.server.endpoint import FanoutServer
from monotape.platform.wire import codec
from monotape.platform.wire.requests import SetPriority, Subscribe, encode_request
from tests.conftest import server_frames, until

T = TypeVar("T")

FRAME_NS = 40_000_000
IN_CI = os.environ.get("CI", "").lower() == "true"
LOOPS = ["asyncio", "uvloop"]


def _run(loop_name: str, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    factory = None
    if loop_name == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


def _need_native() -> None:
    if not sendmany.NATIVE:
        if IN_CI:  # CI must compare native with Python, never Python with Python
            pytest.fail(f"native extension not built: {sendmany.NATIVE_ERROR}")
        pytest.skip(f"native extension not built: {sendmany.NATIVE_ERROR}")


# -- the terminal side ---------------------------------------------------------------------------


def client_frame(payload: bytes) -> bytes:
    """A masked binary client frame (all-zero masking key: the payload is sent as is)."""
    n = len(payload)
    head = bytes((0x82, 0x80 | n)) if n < 126 else bytes((0x82, 0x80 | 126)) + struct.pack("!H", n)
    return head + b"\x00\x00\x00\x00" + payload


class Terminal(asyncio.Protocol):
    """A raw-socket terminal: the upgrade, then every byte it receives, kept."""

    def __init__(self, port: int, path: str = "/") -> None:
        self.port = port
        self.path = path
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.data = bytearray()
        self.open: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream's transport: uvloop's is an asyncio.Transport by duck type only (not a
        # subclass), so a cast rather than an isinstance check
        self.transport = stream = cast(asyncio.Transport, transport)
        key = "dGhlIHNhbXBsZSBub25jZQ=="
        stream.write(
            (
                f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                "Upgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )

    def data_received(self, data: bytes) -> None:
        if self.open.done():
            self.data += data
            return
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end >= 0:
            self.data += self.head[end + 4 :]
            self.open.set_result(self.head.startswith(b"HTTP/1.1 101"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.open.done():
            self.open.set_result(False)

    def send(self, payload: bytes) -> None:
        assert self.transport is not None
        self.transport.write(client_frame(payload))


async def connect(port: int, *, rcvbuf: int = 0, path: str = "/") -> Terminal:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:  # before connect: the window is agreed in the handshake
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    _, term = await loop.create_connection(lambda: Terminal(port, path), sock=sock)
    assert await asyncio.wait_for(term.open, 30.0), term.head
    return term


def messages(data: bytes, *, whole: bool = True) -> list[bytes]:
    """Every server message in ``data``, which must end on a message boundary (``whole``), or
    may end inside one (a live stream: the last, incomplete message is left out)."""
    out = []
    i = 0
    while i < len(data):
        if not whole and not _complete_at(data, i):
            break
        assert i + 2 <= len(data), "a torn frame header"
        first = data[i]
        # a final binary frame, or a ping (a node's keepalive and glass cohort: skipped)
        assert first in (0x82, 0x89), f"not a final binary frame at {i}: {first:#x}"
        n = data[i + 1] & 0x7F
        i += 2
        if n == 126:
            (n,) = struct.unpack_from("!H", data, i)
            i += 2
        elif n == 127:
            (n,) = struct.unpack_from("!Q", data, i)
            i += 8
        assert i + n <= len(data), "a torn payload"
        if first == 0x82:
            out.append(data[i : i + n])
        i += n
    return out


def _complete_at(data: bytes, i: int) -> bool:
    if i + 2 > len(data):
        return False
    n = data[i + 1] & 0x7F
    head = {126: 4, 127: 10}.get(n, 2)
    if i + head > len(data):
        return False
    if n == 126:
        n = struct.unpack_from("!H", data, i + 2)[0]
    elif n == 127:
        n = struct.unpack_from("!Q", data, i + 2)[0]
    return i + head + n <= len(data)


def answers(term: Terminal) -> int:
    """The answers (ack, error, refused) among the complete messages a terminal holds."""
    data = bytes(term.data)
    count = 0
    i = 0
    while i + 2 <= len(data):
        n = data[i + 1] & 0x7F
        i += 2
        if n == 126:
            if i + 2 > len(data):
                break
            (n,) = struct.unpack_from("!H", data, i)
            i += 2
        if i + n > len(data):
            break
        if data[i] in (codec.Kind.ACK, codec.Kind.ERROR, codec.Kind.REFUSED):
            count += 1
        i += n
    return count


async def answered(term: Terminal, count: int) -> None:
    """Until the server answered ``count`` requests: everything a request makes (its snapshot,
    its answer) is written in one synchronous step, so the terminal's bytes are settled too."""
    await until(lambda: answers(term) >= count, f"{count} answers")


def check_stream(data: bytes, *, whole: bool = True, bases: bool = True) -> Counter[str]:
    """Every message parses, frame numbers only go up and no instrument's version ever goes
    back; with ``bases``, a delta's base is never one the terminal does not hold (a stream
    that starts with its snapshot). Counts by kind."""
    kinds: Counter[str] = Counter()
    held: dict[int, tuple[int, int]] = {}
    frame_no = -1
    for payload in messages(data, whole=whole):
        msg = codec.decode_message(payload)
        kinds[type(msg).__name__] += 1
        if isinstance(msg, codec.Frame):
            assert msg.frame_no > frame_no, (frame_no, msg.frame_no)
            frame_no = msg.frame_no
        if isinstance(msg, codec.Frame | codec.Snapshot):
            records = msg.records
        elif isinstance(msg, codec.PriorityUpdate):
            records = [msg.record]
        else:
            continue
        for r in records:
            version = (r.epoch, r.seq)
            before = held.get(r.iid)
            assert before is None or version >= before, (r.iid, before, version)
            # a delta is never applied to a base the terminal does not hold
            if bases and r.has_base:
                assert before is not None and (r.base_epoch, r.base_seq) <= before
            held[r.iid] = version
    return kinds


# -- the server side -----------------------------------------------------------------------------


class Desk:
    """A real FanoutServer fed deterministic frames by the test."""

    def __init__(self, native: bool, seed: int = 5, instruments: int = 120, **cfg: Any) -> None:
        self.universe: list[Instrument] = build_universe(2, instruments, seed)
        self.keys = [inst.key for inst in self.universe]
        base = {"host": "127.0.0.1", "ws_port": 0, "keepalive_interval_s": 0, "glass_share": 0.0}
        self.cfg = ServerConfig(**{**base, **cfg, "native_writer": native})
        self.seq = Sequencer(2)
        self.server = FanoutServer(self.cfg, self.universe, self.seq, SystemClock())
        if native and self.server.writer.sendloop is None:  # not built: fails or skips above
            raise AssertionError("the native writer is on but not in use")
        self.rng = random.Random(seed)
        self.versions = [1] * len(self.universe)
        self.epochs = [1] * len(self.universe)
        self.frame_no = 1_000
        self.port = 0

    async def start(self) -> None:
        self.port = await self.server.start()
        self.step(everything=True)  # every symbol has a version: snapshots are real

    def _tick(self, iid: int) -> Tick:
        rng = self.rng
        self.versions[iid] += rng.randint(1, 3)
        if rng.random() < 0.02:  # a restarted handler: a new epoch, a full record
            self.epochs[iid] += 1
        bid = 10_000 + rng.randint(-400, 400)
        inst = self.universe[iid]
        return Tick(
            iid,
            inst.venue,
            self.epochs[iid],
            self.versions[iid],
            0,
            bid,
            bid + 3,
            bid,
            100,
            "A",
            0,
            0,
        )

    def step(self, everything: bool = False, share: float = 0.3) -> None:
        """One frame: ticks for a share of the instruments, the priority path, the frame."""
        n = len(self.universe)
        iids = range(n) if everything else sorted(self.rng.sample(range(n), int(n * share)))
        ticks = [self._tick(i) for i in iids]
        self.frame_no += 1
        boundary = self.frame_no * FRAME_NS
        applied = self.seq.on_ticks(ticks, boundary - 1)
        self.server.publish_priority(applied)
        self.server.flush_priority()
        self.server.publish_frame(self.seq.take_frame(boundary))

    def entries_agree(self) -> None:
        """The native writer's table says what the connections say: no entry open to the C
        loop for a terminal the Python path would not write behind its transport's back, no
        leaked entry (the production invariant), and each entry's QUEUED flag is exactly
        whether its transport holds bytes (uvloop's and asyncio's flow control with limits
        of 0 and 0: pause at the first byte kept, resume at none)."""
        loop = self.server.writer.sendloop
        assert loop is not None
        assert loop.audit() == (0, [])
        for cid, conn in self.server.connections.items():
            if conn.table is None or conn.transport.is_closing():
                continue
            queued = bool(loop.table.flags(conn.handle) & sendmany.FLAG_QUEUED)
            assert queued == bool(conn.transport.get_write_buffer_size()), cid

    def conn_of_newest(self) -> int:
        return max(self.server.connections)

    async def settle(self, terminals: dict[int, Terminal]) -> None:
        """Until every terminal holds every byte the server wrote to it."""
        conns = self.server.connections

        def settled() -> bool:
            done = True
            for cid, term in terminals.items():
                if cid in conns:
                    sent = conns[cid].bytes_sent
                    assert len(term.data) <= sent, f"terminal {cid} got bytes never written"
                    done = done and len(term.data) == sent
            return done

        await until(settled, "every terminal received every byte written to it", 60.0)


# -- byte identity -------------------------------------------------------------------------------


async def _identity_run(native: bool) -> tuple[dict[int, bytes], int]:
    desk = Desk(native)
    await desk.start()
    rng = random.Random(11)
    watchlists = [rng.sample(desk.keys, rng.randint(1, 60)) for _ in range(40)]  # 40 signatures
    terminals: dict[int, Terminal] = {}
    order: list[int] = []
    # Connected together, then matched to their connection ids by port (conn.peer).
    terms = list(await asyncio.gather(*(connect(desk.port) for _ in range(300))))
    await until(lambda: len(desk.server.connections) == 300, "connected")
    by_peer = {conn.peer: cid for cid, conn in desk.server.connections.items()}
    for term in terms:
        assert term.transport is not None
        host, port = term.transport.get_extra_info("sockname")[:2]
        cid = by_peer[f"{host}:{port}"]
        terminals[cid] = term
        order.append(cid)
    asked: dict[int, int] = {}
    for i, cid in enumerate(order):
        wl = watchlists[i % len(watchlists)]
        terminals[cid].send(encode_request(Subscribe(req=1, keys=wl)))
        asked[cid] = 1
        if i % 30 == 0:  # an order ticket: the priority path
            terminals[cid].send(encode_request(SetPriority(req=2, keys=wl[:2])))
            asked[cid] = 2
    for cid in order:  # no frame before every answer: the bytes are deterministic
        await answered(terminals[cid], asked[cid])
    for k in range(40):
        desk.step()
        await asyncio.sleep(0)
        if k % 10 == 5:  # re-subscriptions mid-stream: hydration snapshots between frames
            picked = order[::37]
            for cid in picked:
                more = rng.sample(desk.keys, 8)
                terminals[cid].send(encode_request(Subscribe(req=10 + k, keys=more)))
                asked[cid] += 1
            for cid in picked:
                await answered(terminals[cid], asked[cid])
    await desk.settle(terminals)
    native_writes = desk.server.writer.sendloop.writes if desk.server.writer.sendloop else 0
    streams = {n: bytes(terminals[cid].data) for n, cid in enumerate(order)}
    await desk.server.stop()
    return streams, native_writes


@pytest.mark.parametrize("loop_name", LOOPS)
def test_native_and_python_paths_deliver_byte_identical_streams(loop_name: str) -> None:
    _need_native()
    native, native_writes = _run(loop_name, lambda: _identity_run(True))
    python, python_writes = _run(loop_name, lambda: _identity_run(False))
    assert native_writes > 300 * 30 and python_writes == 0  # each path really ran
    assert native.keys() == python.keys() and len(native) == 300
    kinds: Counter[str] = Counter()
    for n in native:
        assert native[n] == python[n], f"terminal {n}: the streams differ"
        kinds += check_stream(native[n])
    # hello, answers, snapshots (subscribe and re-subscribe), deltas and order-ticket updates
    assert kinds["Hello"] == 300 and kinds["Snapshot"] > 300 and kinds["Frame"] > 300 * 30
    assert kinds["PriorityUpdate"] > 0 and kinds["Ack"] >= 300


# -- partial sends -------------------------------------------------------------------------------


async def _partial_run() -> tuple[int, int]:
    # Small kernel buffers both sides, large payloads and a low high-water mark: a terminal that
    # stops reading fills its socket within a few frames, and the send that meets the edge is
    # cut mid-payload (or meets EAGAIN: then another round); then its transport and its ring.
    desk = Desk(
        True, instruments=600, max_subscriptions=600, so_sndbuf=4096, write_high_water=16 * 1024
    )
    await desk.start()
    keys = desk.keys[:500]
    slow = [await connect(desk.port, rcvbuf=2048) for _ in range(6)]
    fast = [await connect(desk.port) for _ in range(6)]
    await until(lambda: len(desk.server.connections) == 12, "connected")
    cids = sorted(desk.server.connections)
    terminals = dict(zip(cids, slow + fast, strict=True))
    for term in slow + fast:  # at most MAX_KEYS per request
        term.send(encode_request(Subscribe(req=1, keys=keys[:250])))
        term.send(encode_request(Subscribe(req=2, keys=keys[250:])))
    for term in slow + fast:
        await answered(term, 2)
    loop = desk.server.writer.sendloop
    assert loop is not None
    conns = desk.server.connections
    behind = desk.server.terminals.behind

    def drained() -> bool:
        return not behind and all(conns[c].transport.get_write_buffer_size() == 0 for c in cids)

    for _ in range(5):  # rounds, until a send was cut mid-payload
        for term in slow:
            assert term.transport is not None
            term.transport.pause_reading()  # stops reading: its receive buffer fills
        for _ in range(100):
            desk.step(share=0.9)
            desk.entries_agree()
            await asyncio.sleep(0.002)
            desk.entries_agree()
        for term in slow:
            assert term.transport is not None
            term.transport.resume_reading()
        for _ in range(2000):  # reading again: the rest, the ring, a gap's snapshot
            desk.step()
            desk.entries_agree()
            await asyncio.sleep(0.01)
            if drained():
                break
        assert drained(), "the slow terminals never drained"
        if loop.partials:
            break
    await desk.settle(terminals)
    for term in slow + fast:  # every message parses, no version goes back
        assert check_stream(bytes(term.data))["Frame"] > 0
    assert all(c in conns for c in cids)  # slow, never kicked
    native_after = loop.writes
    desk.step()
    drained_native = loop.writes - native_after
    await desk.server.stop()
    return loop.partials, drained_native


@pytest.mark.parametrize("loop_name", LOOPS)
def test_partial_sends_hand_the_exact_rest_to_the_transport(loop_name: str) -> None:
    _need_native()
    partials, drained_native = _run(loop_name, _partial_run)
    assert partials > 0, "no send was cut mid-payload in 5 rounds"
    assert drained_native == 12  # once drained, every terminal is back on the native path


# -- terminals that vanish -----------------------------------------------------------------------


async def _raw_terminal(desk: Desk, keys: list[str]) -> tuple[socket.socket, int, bytes]:
    """A terminal on a plain socket the test can reset or shut at an exact moment; with the
    bytes that came after the upgrade's answer."""
    loop = asyncio.get_running_loop()
    before = len(desk.server.connections)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", desk.port))
    await loop.sock_sendall(
        sock,
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ),
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += await loop.sock_recv(sock, 4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    await until(lambda: len(desk.server.connections) == before + 1, "connected")
    cid = max(desk.server.connections)
    await loop.sock_sendall(sock, client_frame(encode_request(Subscribe(req=1, keys=keys))))
    await until(lambda: desk.server.index.signature(cid) is not None, "subscribed")
    return sock, cid, head[head.index(b"\r\n\r\n") + 4 :]


async def _vanish_run() -> dict[str, Any]:
    desk = Desk(True)
    await desk.start()
    keys = desk.keys[:30]
    others = [await connect(desk.port) for _ in range(20)]
    await until(lambda: len(desk.server.connections) == 20, "connected")
    other_ids = sorted(desk.server.connections)
    for term in others:
        term.send(encode_request(Subscribe(req=1, keys=keys)))
    reset, reset_id, _ = await _raw_terminal(desk, keys)
    half, half_id, got = await _raw_terminal(desk, keys)
    loop = desk.server.writer.sendloop
    assert loop is not None
    await until(
        lambda: all(desk.server.index.signature(c) is not None for c in other_ids), "subscribed"
    )
    disconnects = desk.server.stats.disconnects

    # RST (SO_LINGER 0): the reset is in the server's socket at once; the frame right after it,
    # before the loop reads anything, meets it in the native send.
    reset.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    reset.close()
    failures = loop.failures
    desk.step()
    assert reset_id not in desk.server.connections
    assert loop.failures == failures + 1 and disconnects["connection_lost"] == 1

    # Half-closed: a terminal that sent FIN still reads; the frame reaches it, then the EOF
    # tears it down ("connection_lost": websockets saw no close frame).
    half.shutdown(socket.SHUT_WR)
    desk.step()
    await until(lambda: half_id not in desk.server.connections, "half-closed torn down")
    assert disconnects["connection_lost"] == 2
    with half:
        half.setblocking(True)
        half.settimeout(10.0)
        while chunk := half.recv(65536):
            got += chunk
    assert check_stream(got)["Frame"] >= 1

    # Closed mid-frame: a terminal that stops reading with a tiny buffer, holds a part of a
    # payload in its kernel and the rest in the server's transport, then closes.
    mid = await connect(desk.port, rcvbuf=2048)
    await until(lambda: len(desk.server.connections) == 21, "connected")
    mid_id = max(desk.server.connections)
    mid.send(encode_request(Subscribe(req=1, keys=desk.keys)))
    await until(lambda: desk.server.index.signature(mid_id) is not None, "subscribed")
    assert mid.transport is not None
    mid.transport.pause_reading()
    conn = desk.server.connections[mid_id]
    for _ in range(200):
        desk.step(share=0.8)
        await asyncio.sleep(0.002)
        if conn.transport.get_write_buffer_size():
            break
    assert conn.transport.get_write_buffer_size() > 0, "no partial send reached"
    mid.transport.abort()
    for _ in range(10):
        desk.step()
        await asyncio.sleep(0.02)
    await until(lambda: mid_id not in desk.server.connections, "closed mid-frame torn down")

    terminals = dict(zip(other_ids, others, strict=True))
    for _ in range(5):
        desk.step()
    await desk.settle(terminals)
    assert all(c in desk.server.connections for c in other_ids)
    for term in others:  # the others never noticed
        assert not term.lost and check_stream(bytes(term.data))["Frame"] >= 8
    desk.entries_agree()  # every vanished terminal's entry (and socket duplicate) is gone
    assert len(loop.table) == 20
    out = dict(disconnects)
    await desk.server.stop()
    assert len(loop.table) == 0  # the stop took every entry with its terminal
    return out


@pytest.mark.parametrize("loop_name", LOOPS)
def test_vanished_terminals_are_torn_down_with_a_named_reason(loop_name: str) -> None:
    _need_native()
    disconnects = _run(loop_name, _vanish_run)
    assert disconnects == {"connection_lost": 3}  # as the transport path names them


async def _close_run() -> tuple[list[bool], list[int]]:
    """A terminal sends a close frame; frames are published in the same turn of the loop as the
    server's protocol leaves OPEN, before the server's teardown has run: the native pass reads
    the protocol's state from the connection's mirror, so the mirror must already say so."""
    desk = Desk(True)
    await desk.start()
    term = await connect(desk.port)
    await until(lambda: len(desk.server.connections) == 1, "connected")
    conn = desk.server.connections[max(desk.server.connections)]
    term.send(encode_request(Subscribe(req=1, keys=desk.keys[:40])))
    await answered(term, 1)
    for _ in range(3):
        desk.step()
        await asyncio.sleep(0)
    mirrored = [conn.protocol_state is State.OPEN and conn.protocol.state is State.OPEN]
    assert term.transport is not None
    term.transport.write(bytes((0x88, 0x82)) + b"\0\0\0\0" + struct.pack("!H", 1000))
    deadline = asyncio.get_running_loop().time() + 20.0
    while conn.protocol.state is State.OPEN:
        assert asyncio.get_running_loop().time() < deadline, "the close frame never arrived"
        await asyncio.sleep(0)
    mirrored.append(conn.protocol_state is conn.protocol.state)
    for _ in range(3):
        desk.step()  # nothing more may reach the terminal after the close frame
    mirrored.append(not conn.closing)  # published before the teardown: the mirror was the guard
    await until(lambda: term.lost, "the server closed the connection")
    mirrored.append(conn.protocol_state is conn.protocol.state)
    await desk.server.stop()
    return mirrored, [op for op, _ in server_frames(bytes(term.data))]


@pytest.mark.parametrize("loop_name", LOOPS)
def test_no_frame_follows_the_close_frame_of_a_terminal_that_closed(loop_name: str) -> None:
    _need_native()
    mirrored, opcodes = _run(loop_name, _close_run)
    assert mirrored == [True, True, True, True]
    assert 0x8 in opcodes, opcodes
    assert opcodes[opcodes.index(0x8) :] == [0x8], "a frame after the close frame"
    assert opcodes.count(0x2) >= 4  # the ack and the frames before the close


def test_a_send_errno_names_its_reason() -> None:
    from monotape.platform.core.disconnect import Disconnect
    from monotape.platform.server.sendloop import send_error_reason

    assert send_error_reason(errno.ECONNRESET) is Disconnect.CONNECTION_LOST
    assert send_error_reason(errno.EBADF) is Disconnect.WRITE_ERROR
    # EPIPE: our own side shut (the write-after-eof trap) is a write error; a terminal that
    # closed and then reset us is gone (Linux says EPIPE for a reset in CLOSE_WAIT)
    listener = socket.create_server(("127.0.0.1", 0))
    with listener, socket.create_connection(listener.getsockname()) as a:
        b, _ = listener.accept()
        with b:
            b.shutdown(socket.SHUT_WR)
            assert send_error_reason(errno.EPIPE, b.fileno()) is Disconnect.WRITE_ERROR
    listener = socket.create_server(("127.0.0.1", 0))
    with listener, socket.create_connection(listener.getsockname()) as a:
        b, _ = listener.accept()
        with b:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            a.shutdown(socket.SHUT_WR)
            a.close()
            assert send_error_reason(errno.EPIPE, b.fileno()) is Disconnect.CONNECTION_LOST
