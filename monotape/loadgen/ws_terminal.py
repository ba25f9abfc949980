"""A load terminal's WebSocket: websockets' Sans-I/O client for the upgrade and for what it
sends, ``FrameWalk`` for what it receives (why: ``frame_walk.py``).

``connect`` opens the TCP connection, writes the upgrade request that websockets'
``ClientProtocol`` builds and hands the response (headers, and a refusal's body) to it, so the
handshake is checked by the library (status, ``Upgrade``, ``Sec-WebSocket-Accept``) and a
refusal raises its ``InvalidStatus`` with the response (a 503's ``Retry-After``). The bytes after
the response go to a ``FrameWalk``; the ``TerminalSocket`` answers pings, replies to the
server's close frame, and from ``start(on_event)`` on calls ``on_event`` for the messages the
walk reports (the hello may share a read with the 101: it is held until then). A thin driver:
it holds no session logic (``session.py`` has that).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, cast

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidMessage
from websockets.frames import Close
from websockets.protocol import State
from websockets.uri import parse_uri

from monotape.loadgen.frame_walk import IGNORE, Event, FrameWalk, Op, ServerFrameError
from monotape.loadgen.rst import reset

__all__ = ["TerminalSocket", "connect"]

_MAX_RESPONSE_HEAD: Final = 64 * 1024  # bounded: an upgrade response's headers, at most

OnEvent = Callable[[Event], None]


class TerminalSocket(asyncio.Protocol):
    """One terminal's connection. ``upgraded`` resolves when the handshake is checked (or
    raises what websockets raised of it); ``closed`` when the TCP connection is gone, with
    the server's close code and reason if it sent a close frame (``close_code`` is None
    otherwise). ``failure`` says why the terminal ended it, if it did."""

    def __init__(self, client: ClientProtocol, watch: bytearray, close_timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.client = client
        self.walk = FrameWalk(watch)
        self.on_event: OnEvent | None = None  # set by ``start``
        self._early: list[bytes] = []  # frames that came with or after the upgrade, before it
        self.close_timeout_s = close_timeout_s
        self.upgraded: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None
        self.close_code: int | None = None
        self.close_reason = ""
        self.failure: str | None = None
        self._head = b""  # the upgrade response's headers until their blank line
        self._headers_done = False
        self._open = False
        self._close_sent = False
        self._abort_at: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.client.send_request(self.client.connect())
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._open = False
        if self._abort_at is not None:
            self._abort_at.cancel()
        if not self.upgraded.done():
            self.upgraded.set_exception(
                ConnectionResetError("the server closed the connection before its upgrade answer")
            )
        if not self.closed.done():
            self.closed.set_result(None)

    def eof_received(self) -> bool:
        if not self.upgraded.done():
            self.client.receive_eof()  # a refusal's body that runs to EOF
            self._answered()
        return False  # the server is done: close our side too

    def data_received(self, data: bytes) -> None:
        if self._open:
            if self.on_event is not None:
                self._walk(data)
            else:
                self._early.append(data)  # the session has not started: hold them in order
        elif not self.upgraded.done():
            self._upgrade(data)
        # after a refused upgrade the body is websockets' concern no more: ignore the rest

    # -- the upgrade ----------------------------------------------------------------------------
    def _upgrade(self, data: bytes) -> None:
        """Up to the end of the response's headers goes to websockets; after a 101 the rest is
        frames for the walk, after a refusal it is the body (websockets reads it too)."""
        rest = b""
        if not self._headers_done:
            buf = self._head + data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_RESPONSE_HEAD:
                    self._fail_upgrade(
                        InvalidMessage("the upgrade response's headers run too long")
                    )
                else:
                    self._head = buf
                return
            self._headers_done = True
            self._head = b""
            data, rest = buf[: end + 4], buf[end + 4 :]
        self.client.receive_data(data)
        if not self._answered() and rest:
            self.client.receive_data(rest)
            rest = b""
            self._answered()
        if self._open and rest:
            self._early.append(rest)  # the hello may share a read with the 101

    def _answered(self) -> bool:
        """Whether websockets has judged the response: the upgrade done, or failed."""
        client = self.client
        client.events_received()  # the Response: judged already (state, handshake_exc)
        if client.handshake_exc is not None:
            self._fail_upgrade(client.handshake_exc)
            return True
        if client.state is State.OPEN:
            self._open = True
            self.upgraded.set_result(None)
            return True
        return False

    def _fail_upgrade(self, exc: Exception) -> None:
        if not self.upgraded.done():
            self.upgraded.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    # -- open -----------------------------------------------------------------------------------
    def _walk(self, data: bytes) -> None:
        try:
            events = self.walk.feed(data)
        except ServerFrameError as exc:
            self.fail(f"broken framing: {exc}")
            return
        for ev in events:
            op = ev.op
            if op is Op.TEXT or op is Op.BINARY:
                assert self.on_event is not None
                self.on_event(ev)
            elif op is Op.PING:
                if not self._close_sent:
                    self.client.send_pong(ev.payload or b"")
                    self._flush()
            elif op is Op.CLOSE:
                self._server_closed(ev.payload or b"")
            if not self._open:
                return

    def _server_closed(self, payload: bytes) -> None:
        """RFC 6455 §5.5.1: answer the close frame, then wait for the server to close TCP."""
        try:
            close = Close.parse(payload)
        except Exception as exc:  # websockets raises ProtocolError or UnicodeDecodeError
            self.fail(f"a bad close frame: {exc}")
            return
        self.close_code, self.close_reason = close.code, close.reason
        self._open = False
        if not self._close_sent:
            self._close_sent = True
            if close.code == 1005:  # no status code: answer with none (§7.4.1)
                self.client.send_close()
            else:
                self.client.send_close(close.code)
            self._flush()
        self._abort_later()

    # -- what the worker calls ------------------------------------------------------------------
    def start(self, on_event: OnEvent) -> None:
        """Hand the messages to ``on_event`` from here on, those that came with the upgrade
        first (nothing is reported before this: the session is not there to see it)."""
        self.on_event = on_event
        early, self._early = self._early, []
        for data in early:
            if not self._open:
                break
            self._walk(data)

    def send(self, message: bytes) -> None:
        """A binary message (masked by websockets, RFC 6455 §5.3)."""
        if self._open and not self._close_sent:
            self.client.send_binary(message)
            self._flush()

    def close(self) -> None:
        """Start the closing handshake (1000); ``closed`` resolves when the server has closed
        TCP, or after ``close_timeout_s`` when it has not (then the socket is aborted)."""
        if self.transport is None or self.closed.done():
            return
        if not self._close_sent and self.client.state is State.OPEN:
            self._close_sent = True
            self.client.send_close(1000)
            self._flush()
        self._abort_later()

    def reset(self) -> None:
        """Leave with an RST, as a crashed terminal or a yanked cable does."""
        if self.transport is not None:
            reset(self.transport)

    def fail(self, why: str) -> None:
        """End the connection from this side at once (``failure`` says why)."""
        self.failure = why
        self._open = False
        if self.transport is not None:
            self.transport.abort()

    # -- internals ------------------------------------------------------------------------------
    def _flush(self) -> None:
        if self.transport is not None:
            out = self.client.data_to_send()
            if out:
                self.transport.write(b"".join(out))

    def _abort_later(self) -> None:
        if self._abort_at is None and self.transport is not None:
            self._abort_at = self._loop.call_later(self.close_timeout_s, self.transport.abort)


async def connect(
    url: str, *, open_timeout_s: float, close_timeout_s: float, watch: bytearray | None = None
) -> TerminalSocket:
    """Open ``url`` (ws:// or wss://): the TCP connection and the upgrade within
    ``open_timeout_s``. Raises what websockets' client raises of a refused or broken upgrade
    (``InvalidStatus``, ``InvalidHandshake``), OSError, or TimeoutError."""
    uri = parse_uri(url)
    loop = asyncio.get_running_loop()
    watch = watch if watch is not None else bytearray([IGNORE]) * 256
    proto = TerminalSocket(ClientProtocol(uri), watch, close_timeout_s)
    try:
        async with asyncio.timeout(open_timeout_s):
            await loop.create_connection(
                lambda: proto, uri.host, uri.port, ssl=True if uri.secure else None
            )
            await proto.upgraded
    except BaseException:
        if proto.transport is not None:
            proto.transport.abort()
        raise
    return proto
