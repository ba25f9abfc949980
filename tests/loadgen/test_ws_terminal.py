"""loadgen/ws_terminal.py against websockets' own server on loopback (and a raw one for what a
correct server never sends)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, InvalidMessage, InvalidStatus
from websockets.http11 import Request, Response
from websockets.utils import accept_key

from monotape.loadgen.frame_walk import KIND, Event, Op
from monotape.loadgen.ws_terminal import TerminalSocket, connect

Handler = Callable[[ServerConnection], Awaitable[None]]
RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler, **kw: object) -> tuple[Server, str]:
    server = await serve(handler, "127.0.0.1", 0, compression=None, **kw)  # type: ignore[arg-type]
    port = next(iter(server.sockets)).getsockname()[1]
    return server, f"ws://127.0.0.1:{port}/?token=t"


async def _open(url: str, **kw: float) -> TerminalSocket:
    return await connect(
        url,
        open_timeout_s=kw.get("open_timeout_s", 5.0),
        close_timeout_s=kw.get("close_timeout_s", 2.0),
        watch=bytearray([KIND]) * 256,
    )


async def test_upgrade_messages_send_and_a_clean_close() -> None:
    seen: dict[str, object] = {}
    done = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        seen["path"] = ws.request.path if ws.request is not None else None
        await ws.send(b"\x01hello")
        seen["got"] = await ws.recv()
        await ws.send(b"\x03" + bytes(200_000))  # a long one, read in many pieces
        await ws.send("\x05text")
        try:
            await ws.recv()
        except ConnectionClosed as exc:
            seen["code"] = exc.rcvd.code if exc.rcvd is not None else None
        done.set()

    server, url = await _serve(handler)
    async with server:
        events: list[Event] = []
        got_all = asyncio.Event()
        t = await _open(url)

        def on_event(ev: Event) -> None:
            events.append(ev)
            if ev.kind == 1:
                t.send(b"\x02subscribe")
            if len(events) == 3:
                got_all.set()

        t.start(on_event)
        await asyncio.wait_for(got_all.wait(), 5)
        t.close()
        await asyncio.wait_for(t.closed, 5)
        await asyncio.wait_for(done.wait(), 5)
    assert seen["path"] == "/?token=t"
    assert seen["got"] == b"\x02subscribe"  # masked by websockets, unmasked by the server
    assert events == [
        Event(Op.BINARY, 1, None),
        Event(Op.BINARY, 3, None),
        Event(Op.TEXT, 5, None),
    ]
    assert seen["code"] == 1000 and t.close_code == 1000 and t.failure is None


async def test_a_refusal_raises_the_libraries_invalid_status_with_retry_after() -> None:
    def refuse(ws: ServerConnection, request: Request) -> Response:
        r = ws.respond(503, "draining\n")
        r.headers["Retry-After"] = "7"
        return r

    async def handler(ws: ServerConnection) -> None:
        raise AssertionError("never upgraded")

    server, url = await _serve(handler, process_request=refuse)
    async with server:
        with pytest.raises(InvalidStatus) as info:
            await _open(url)
    assert info.value.response.status_code == 503
    assert info.value.response.headers["Retry-After"] == "7"


async def test_pings_are_answered_and_the_servers_close_is_read() -> None:
    pongs: list[float] = []

    async def handler(ws: ServerConnection) -> None:
        for _ in range(3):
            pongs.append(await asyncio.wait_for(await ws.ping(b"hb"), 5))
        await ws.close(4000, "reconnect_after_ms=1500")

    server, url = await _serve(handler, ping_interval=None)
    async with server:
        t = await _open(url)
        t.start(lambda ev: None)
        await asyncio.wait_for(t.closed, 5)
    assert len(pongs) == 3
    assert (t.close_code, t.close_reason) == (4000, "reconnect_after_ms=1500")


async def test_a_reset_leaves_without_a_close_frame() -> None:
    closed: asyncio.Future[object] = asyncio.get_running_loop().create_future()

    async def handler(ws: ServerConnection) -> None:
        try:
            await ws.recv()
        except ConnectionClosed as exc:
            closed.set_result(exc.rcvd)

    server, url = await _serve(handler)
    async with server:
        t = await _open(url)
        t.reset()
        assert await asyncio.wait_for(closed, 5) is None  # no close frame: 1006 at the server
        await asyncio.wait_for(t.closed, 5)


async def test_a_close_the_server_never_answers_is_aborted_after_the_timeout() -> None:
    async def raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _accept(reader, writer)
        await reader.read(100)  # the close frame arrives; no answer, no TCP close

    async with _raw_server(raw) as url:
        t = await _open(url, close_timeout_s=0.2)
        t.close()
        await asyncio.wait_for(t.closed, 5)
    assert t.close_code is None


@pytest.mark.parametrize(
    ("frames", "why"),
    [
        (bytes([0x82, 0x81, 0, 0, 0, 0, 3]), "masked"),
        (bytes([0x88, 1, 0]), "bad close frame"),  # a one-byte close payload (§5.5.1)
    ],
)
async def test_broken_framing_fails_the_connection(frames: bytes, why: str) -> None:
    async def raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _accept(reader, writer)
        writer.write(frames)

    async with _raw_server(raw) as url:
        t = await _open(url)
        t.start(lambda ev: None)
        await asyncio.wait_for(t.closed, 5)
    assert t.failure is not None and why in t.failure


async def test_a_server_that_hangs_up_before_answering() -> None:
    async def raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async with _raw_server(raw) as url:
        with pytest.raises(InvalidMessage, match="did not receive a valid HTTP response"):
            await _open(url)


async def test_a_response_that_is_not_an_upgrade() -> None:
    async def raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async with _raw_server(raw) as url:
        with pytest.raises(InvalidStatus) as info:
            await _open(url)
    assert info.value.response.status_code == 200 and info.value.response.body == b"ok"


async def test_an_upgrade_that_never_comes_times_out() -> None:
    async def raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pass  # the request is never answered

    async with _raw_server(raw) as url:
        with pytest.raises(TimeoutError):
            await _open(url, open_timeout_s=0.2)


# -- a raw server ---------------------------------------------------------------------------
async def _accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer the upgrade as websockets' server would, then leave the socket to the test."""
    head = await reader.readuntil(b"\r\n\r\n")
    headers = Headers()
    for line in head.decode().split("\r\n")[1:]:
        if line:
            k, v = line.split(":", 1)
            headers[k.strip()] = v.strip()
    writer.write(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept_key(headers["Sec-WebSocket-Key"]).encode() + b"\r\n\r\n"
    )


@contextlib.asynccontextmanager
async def _raw_server(handler: RawHandler) -> AsyncIterator[str]:
    """A TCP server running ``handler`` per connection, then holding it open until the end."""
    stop = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
            await stop.wait()
        finally:
            writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    finally:
        stop.set()
        server.close()
        await server.wait_closed()
