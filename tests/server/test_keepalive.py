"""Keepalive: one loop pings every terminal; a terminal that never answers is torn down."""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection

from monotape.platform.node.node import Node
from monotape.platform.wire import codec
from tests.conftest import node_config, server_frames

# Load shedding (503 while the event loop runs late) is not what these tests are about, and a
# busy machine makes a freshly started node's loop late: off, so no test depends on quiet cores.


async def _silent_terminal(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Upgrades, then never reads again: its kernel ACKs, but no pong ever goes back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 101")
    return reader, writer


async def test_a_terminal_that_never_answers_is_torn_down_and_one_that_does_stays(
    tmp_path: Path,
) -> None:
    cfg = node_config(
        tmp_path, {"server.keepalive_interval_s": 1.0, "server.keepalive_timeout_s": 1.0}
    )
    node = Node(cfg)
    await node.start()
    try:
        live = await connect(f"ws://127.0.0.1:{node.ws_port}/", compression=None)
        _, writer = await _silent_terminal(node.ws_port)
        assert len(node.server.connections) == 2
        for _ in range(80):  # ping within ~1 s, timeout 1 s later, checked once a second
            await asyncio.sleep(0.1)
            if node.server.stats.disconnects["keepalive_timeout"]:
                break
        assert node.server.stats.disconnects["keepalive_timeout"] == 1
        assert len(node.server.connections) == 1
        # the live terminal's client library answered its pings: still connected, still fed
        await asyncio.sleep(2.5)
        assert len(node.server.connections) == 1
        assert await asyncio.wait_for(live.recv(), 2)
        assert sum(node.server.stats.disconnects.values()) == 1
        await live.close()
        writer.close()
    finally:
        await node.stop()


async def test_keepalive_off_leaves_a_silent_terminal_alone(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, {"server.keepalive_interval_s": 0.0})
    node = Node(cfg)
    await node.start()
    try:
        _, writer = await _silent_terminal(node.ws_port)
        await asyncio.sleep(2.5)
        assert len(node.server.connections) == 1
        assert not node.server.stats.disconnects["keepalive_timeout"]
        writer.close()
    finally:
        await node.stop()


async def test_a_ping_that_cannot_be_sent_does_not_stall_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """websockets' ping() waits for queued bytes to drain; one terminal whose ping never goes
    out must not keep every terminal after it from being pinged (and timed out)."""
    cfg = node_config(
        tmp_path, {"server.keepalive_interval_s": 1.0, "server.keepalive_timeout_s": 1.0}
    )
    node = Node(cfg)
    # Patched before anyone connects: under load the first keepalive round can come before
    # the test sees both connections, and a stuck terminal pinged once would time out too.
    # The stuck one is the first to connect (the lowest connection id).
    real_ping = ServerConnection.ping

    def ping(self: ServerConnection, data: Any = None) -> Any:
        conns = node.server.connections
        if conns and conns[min(conns)].ws is self:
            return never_sent()
        return real_ping(self, data)

    async def never_sent() -> asyncio.Future[float]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(ServerConnection, "ping", ping)
    await node.start()
    try:
        _, stuck_writer = await _silent_terminal(node.ws_port)  # first in iteration order
        for _ in range(100):  # the 101 is out before the handler registers the connection
            if len(node.server.connections) == 1:
                break
            await asyncio.sleep(0.05)
        _, silent_writer = await _silent_terminal(node.ws_port)
        for _ in range(100):
            if len(node.server.connections) == 2:
                break
            await asyncio.sleep(0.05)
        stuck_id, silent_id = sorted(node.server.connections)

        for _ in range(100):
            await asyncio.sleep(0.1)
            if silent_id not in node.server.connections:
                break
        assert silent_id not in node.server.connections
        assert node.server.stats.disconnects["keepalive_timeout"] == 1
        assert stuck_id in node.server.connections  # never pinged, so never timed out
        stuck_writer.close()
        silent_writer.close()
    finally:
        await node.stop()


async def test_a_keepalive_timeout_tells_the_terminal_why_and_when_to_come_back(
    tmp_path: Path,
) -> None:
    """A terminal that is only slow to answer (not gone) still gets, after whatever it had not
    read, the wire's CLOSE message and a close frame (1011, "keepalive timeout") with the
    reconnect hint, before the socket ends."""
    cfg = node_config(
        tmp_path, {"server.keepalive_interval_s": 1.0, "server.keepalive_timeout_s": 1.0}
    )
    node = Node(cfg)
    await node.start()
    try:
        reader, writer = await _silent_terminal(node.ws_port)
        for _ in range(80):
            await asyncio.sleep(0.1)
            if node.server.stats.disconnects["keepalive_timeout"]:
                break
        assert node.server.stats.disconnects["keepalive_timeout"] == 1
        data = await asyncio.wait_for(reader.read(), 5)  # to EOF: the server closed it
        frames = server_frames(data)
        opcodes = [op for op, _ in frames]
        assert opcodes[0] == 0x2 and opcodes[-1] == 0x8, opcodes  # hello first, close last
        close_msg = codec.decode_message(frames[-2][1])
        assert isinstance(close_msg, codec.Close)
        assert (close_msg.code, close_msg.reconnect_after_ms) == (1011, 1000)
        assert close_msg.reason == "keepalive timeout"
        close_frame = frames[-1][1]
        assert struct.unpack("!H", close_frame[:2])[0] == 1011
        assert close_frame[2:].decode() == "keepalive timeout; reconnect_after_ms=1000"
        writer.close()
    finally:
        await node.stop()
