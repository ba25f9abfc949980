"""One terminal's connection: the bounded writer in front of its socket.

Frames arrive here already WebSocket-framed, the same ``bytes`` object for every connection of
a subscription signature (server frames are unmasked: RFC 6455 §5.1), so a delivery is one
``transport.write``. When the kernel and the transport buffer are full (a slow terminal), frames
wait in a bounded 64-frame ring; past that the oldest are dropped, the ring sets a gap, and the
next thing the terminal gets is a full snapshot (design: Fan-out and backpressure). With the
native writer on, a terminal whose transport holds nothing gets its frames from the writer's C
send loop straight to ``fd`` instead (server/sendloop.py); everything here is its slow path.
For that loop the connection keeps its entry in the writer's ``SendTable`` up to date: the
setters of ``closing`` and ``protocol_state`` (the protocol's mirror), ``set_behind`` and
``set_queued`` (its transport's flow control) raise and clear the entry's flags, and the
frame and byte counts are the entry's plus the Python paths' own.

A measured trap: under uvloop, ``transport.write()`` raises once the library has started closing
the connection, while ``is_closing()`` still says False. So every write checks the protocol's own
state first and any failure is confined to this connection.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Callable

from websockets.asyncio.server import ServerConnection
from websockets.protocol import State

from monotape.platform.core.disconnect import Disconnect
from monotape.platform.core.outbox import Outbox
from monotape.platform.core.session import Session
from monotape.platform.server.control import TerminalProtocol
from monotape.platform.server.sendmany import (
    FLAG_BEHIND,
    FLAG_CLOSING,
    FLAG_NOT_OPEN,
    FLAG_QUEUED,
    SendTable,
)

__all__ = ["MAX_CONTROL_QUEUED", "Connection", "WriteFailed"]

MAX_CONTROL_QUEUED = 256  # answers to requests that are themselves rate-limited (20/s)


class WriteFailed(Exception):
    """The connection can no longer be written to; its owner tears it down."""


class Connection:
    __slots__ = (
        "_bytes",
        "_closing",
        "_frames",
        "_protocol_state",
        "close_reason",
        "conn_id",
        "control",
        "expiry",
        "fd",
        "gap_since_ns",
        "handle",
        "high_water",
        "opened_ns",
        "outbox",
        "peer",
        "protocol",
        "session",
        "table",
        "transport",
        "ws",
    )

    def __init__(
        self,
        conn_id: int,
        ws: ServerConnection,
        *,
        outbox_frames: int,
        high_water: int,
        opened_ns: int,
        session: Session | None = None,
        so_sndbuf: int = 0,
    ) -> None:
        self.conn_id = conn_id
        self.ws = ws
        # The native writer's entry for this terminal (server/sendmany.py SendTable), while
        # it has one (``attach``): every change of why it may not be sent to behind its
        # transport's back is kept there as a flag, so a frame's pass reads no Python object.
        self.table: SendTable | None = None
        self.handle = -1
        self._closing = False
        self._frames = 0  # the counts of the Python paths; the table's are added on read
        self._bytes = 0
        self.transport: asyncio.Transport = ws.transport
        self.protocol = protocol = ws.protocol  # the Sans-I/O state machine: may we write?
        # Its state, kept here by TerminalProtocol's setter on every change: the setter of
        # ``protocol_state`` keeps the native writer's entry's NOT_OPEN flag, so no frame asks
        # the protocol. None: a protocol that does not mirror (a test's), whose readers ask the
        # protocol itself, and which gets no entry.
        self._protocol_state: State | None = None
        if isinstance(protocol, TerminalProtocol):
            protocol.mirror = self
            self.protocol_state = protocol.state
        sock = self.transport.get_extra_info("socket")
        if sock is not None and so_sndbuf > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, so_sndbuf)
        # The socket the native writer sends to itself (server/writer.py: only while the
        # transport's buffer is empty and it is not closing). -1: never, the transport writes
        # every byte: no socket (a test's fake), or TLS, whose socket carries records, not ours.
        plain = sock is not None and self.transport.get_extra_info("sslcontext") is None
        self.fd: int = sock.fileno() if plain else -1
        self.outbox = Outbox(outbox_frames)
        self.control: deque[bytes] = deque()  # answers waiting for room (never dropped)
        self.high_water = high_water
        self.opened_ns = opened_ns
        remote = ws.remote_address
        self.peer = f"{remote[0]}:{remote[1]}" if remote else "?"
        self.expiry: asyncio.TimerHandle | None = None  # closes the session when its token expires
        # set when the server decides to close (shutdown, drain, kick): the teardown's reason
        self.close_reason: Disconnect | None = None
        self.gap_since_ns = 0  # when the ring last overflowed and has not been resolved since
        self.session = session  # its requests, limits and token (core/session.py)

    # -- the native writer's entry ---------------------------------------------------------
    def attach(self, table: SendTable, behind: bool) -> bool:
        """Give this terminal an entry in ``table`` with its flags as they are now, and keep
        them from here on. False (no entry: the transport path always) when its socket is not
        ours to write (``fd`` -1), its protocol does not report its state changes, its
        connection does not report when its transport holds bytes (``track_queued``), or its
        transport is already closing. OSError (no entry either) when its socket cannot be
        duplicated: EMFILE, out of descriptors."""
        track = getattr(self.ws, "track_queued", None)
        if self.fd < 0 or self._protocol_state is None or track is None or self.table is not None:
            return False
        # A transport already closing may have released its fd, and the kernel may have given
        # that number to a newer connection: never duplicate it then.
        if self.transport.is_closing():
            return False
        self.handle = table.add(self.fd, self.expected_flags(behind))
        self.table = table
        track(self)  # from now on pause_writing / resume_writing call set_queued
        return True

    def expected_flags(self, behind: bool) -> int:
        """The entry's flags as this connection's own state gives them (``behind``: whether it
        is in the writer's set of terminals behind)."""
        flags = FLAG_BEHIND if behind else 0
        if self._closing:
            flags |= FLAG_CLOSING
        if self._protocol_state is not State.OPEN:
            flags |= FLAG_NOT_OPEN
        if self.transport.get_write_buffer_size():
            flags |= FLAG_QUEUED
        return flags

    def detach(self) -> None:
        """Drop the entry (its socket duplicate closes), keeping its counts."""
        table = self.table
        if table is None:
            return
        frames, sent = table.remove(self.handle)
        self._frames += frames
        self._bytes += sent
        self.table = None
        self.handle = -1

    def _flag(self, bit: int, on: bool) -> None:
        table = self.table
        if table is not None:
            table.set(self.handle, bit, on)

    def set_queued(self, queued: bool) -> None:
        """Its transport began holding bytes (True) or has handed them all to the kernel."""
        self._flag(FLAG_QUEUED, queued)

    def set_behind(self, behind: bool) -> None:
        """It entered (True) or left the writer's set of terminals behind (Terminals)."""
        self._flag(FLAG_BEHIND, behind)

    @property
    def closing(self) -> bool:
        return self._closing

    @closing.setter
    def closing(self, closing: bool) -> None:
        self._closing = closing
        self._flag(FLAG_CLOSING, closing)

    @property
    def protocol_state(self) -> State | None:
        return self._protocol_state

    @protocol_state.setter
    def protocol_state(self, state: State | None) -> None:
        self._protocol_state = state
        self._flag(FLAG_NOT_OPEN, state is not State.OPEN)

    def count(self, frames: int, size: int) -> None:
        """Messages and bytes the Python paths wrote (negative: a count taken back); the
        native sends are counted in the table's entry, and ``frames_sent`` adds the two."""
        self._frames += frames
        self._bytes += size

    @property
    def frames_sent(self) -> int:
        return self.sent()[0]

    @property
    def bytes_sent(self) -> int:
        return self.sent()[1]

    def sent(self) -> tuple[int, int]:
        """(frames, bytes): the Python paths' counts plus the table entry's. /metrics reads
        this from its own thread in a host writer: when the loop detaches the entry between
        the read of ``table`` and of its counts, the handle is stale (KeyError) and the
        entry's counts are moving into ours, so they are read without it (a scrape that
        raised here was a 500 for the whole writer's /metrics)."""
        table = self.table
        if table is not None:
            try:
                frames, sent = table.counts(self.handle)
            except KeyError:
                pass
            else:
                return self._frames + frames, self._bytes + sent
        return self._frames, self._bytes

    @property
    def writable(self) -> bool:
        return not self.closing and self.protocol.state is State.OPEN

    def _write(self, wire: bytes) -> None:
        if not self.writable:
            raise WriteFailed("connection is not open")
        try:
            self.transport.write(wire)
        except Exception as exc:  # uvloop raises RuntimeError after write_eof
            raise WriteFailed(str(exc)) from exc
        self.count(1, len(wire))

    def deliver(self, wire: bytes, published_ns: int = 0) -> bool:
        """Send now (True), or queue in the bounded ring when the terminal is behind (False):
        either way in order. ``published_ns``: a frame's publish time (0: not a frame), kept
        with it in the ring so its late write is timed from it (``flush``)."""
        outbox = self.outbox
        if (
            self.control  # queued answers first: the hello must precede every frame
            or outbox.gap
            or len(outbox)
            or self.transport.get_write_buffer_size() > self.high_water
        ):
            outbox.push(wire, published_ns)
            return False
        self._write(wire)
        return True

    def deliver_control(self, wire: bytes) -> bool:
        """Answers (hello, ack, error) are never dropped with the data: a terminal in a gap still
        learns that its subscribe was applied. They wait in their own small queue, which a
        terminal can only overflow by not reading at all (then it is torn down)."""
        control = self.control
        if control or self.transport.get_write_buffer_size() > self.high_water:
            if len(control) >= MAX_CONTROL_QUEUED:
                raise WriteFailed("control backlog: the terminal is not reading")
            control.append(wire)
            return False
        self._write(wire)
        return True

    def flush(
        self, snapshot_for_gap: Callable[[], bytes], written: Callable[[int], None] | None = None
    ) -> bool:
        """Move queued answers, then queued frames, to the socket while it has room; returns
        True if a gap was resolved with a fresh snapshot (the caller counts it).

        ``written(published_ns)`` is called for each queued frame handed to the kernel, with
        the time it was published: the writer's late ``write`` values."""
        outbox = self.outbox
        control = self.control
        resolved = False
        while self.transport.get_write_buffer_size() <= self.high_water:
            if control:
                self._write(control.popleft())
                continue
            if outbox.gap:
                outbox.resolve_gap(snapshot_for_gap())
                resolved = True
            published = outbox.head_published_ns
            item = outbox.pop()
            if item is None:
                break
            self._write(item)
            if published and written is not None:
                written(published)
        return resolved

    @property
    def behind(self) -> bool:
        return bool(self.control or self.outbox.gap or len(self.outbox))
