"""One idempotent teardown, whichever way a terminal leaves (in-process node, real sockets)."""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from monotape.platform.core.disconnect import Disconnect
from monotape.platform.node.node import Node
from monotape.platform.sdk.client import TerminalClient
from tests.conftest import node_config, until


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    cfg = node_config(
        tmp_path,
        {
            "simulator.rate": 8000,
            "server.write_high_water": 2048,
            "server.so_sndbuf": 4096,
            "server.slow_consumer_kick_s": 1.0,
        },
    )
    n = Node(cfg)
    await n.start()
    yield n
    await n.stop()


def url(n: Node) -> str:
    return f"ws://127.0.0.1:{n.ws_port}/"


def _gone(c: TerminalClient) -> bool:
    return not c.connected


def assert_clean(n: Node) -> None:
    assert not n.server.connections
    assert n.server.index.is_empty()
    assert n.server.index.dangling() == []


async def subscribed_client(n: Node, count: int = 30, **kw: object) -> TerminalClient:
    c = TerminalClient(url(n))
    hello = await c.connect(**kw)
    await c.subscribe([i.key for i in hello.instruments[:count]])
    return c


async def test_graceful_close(node: Node) -> None:
    c = await subscribed_client(node)
    assert c.hello is not None
    await c.set_priority([i.key for i in c.hello.instruments[:2]])
    await c.close()
    await until(lambda: not node.server.connections, "every terminal torn down")
    assert node.server.stats.disconnects["closed"] == 1
    assert_clean(node)


async def test_abrupt_reset(node: Node) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.connect(("127.0.0.1", node.ws_port))
    c = await subscribed_client(node, sock=sock)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # RST: the peer vanishes without a close frame
    await until(lambda: not node.server.connections, "every terminal torn down")
    assert node.server.stats.disconnects["connection_lost"] == 1
    assert_clean(node)
    await c.close()


async def test_protocol_error(node: Node) -> None:
    ws = await websockets.connect(url(node), compression=None, max_size=2**23)
    await ws.recv()
    await ws.send("text is not the protocol")
    await until(lambda: not node.server.connections, "every terminal torn down")
    assert node.server.stats.disconnects["protocol_error"] == 1
    assert_clean(node)
    await ws.close()


async def test_slow_consumer_kick(node: Node) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", node.ws_port))
    c = await subscribed_client(node, count=256, sock=sock)
    assert c._ws is not None
    c._ws.transport.pause_reading()
    await until(lambda: not node.server.connections, "the slow consumer kicked")
    assert node.server.stats.disconnects["slow_consumer"] == 1
    assert node.server.slow_consumer_drops() > 0
    assert_clean(node)
    await c.close()


class WriteEofTransport(asyncio.Transport):
    """A measured trap: under uvloop, write() raises once the library began closing, while
    is_closing() still says False. Everything but write() goes to the real transport."""

    def __init__(self, real: asyncio.Transport) -> None:
        super().__init__()
        self._real = real
        # write_eof() shut the socket's write side: the native writer's own send then fails with
        # EPIPE where the transport's write raises (server/sendloop.py)
        with socket.socket(fileno=os.dup(real.get_extra_info("socket").fileno())) as dup:
            dup.shutdown(socket.SHUT_WR)

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        raise RuntimeError("Cannot call write() after write_eof()")

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def abort(self) -> None:
        self._real.abort()


async def test_write_error_and_teardown_twice(node: Node) -> None:
    c = await subscribed_client(node)
    bystander = await subscribed_client(node)
    victim_id = min(node.server.connections)
    victim = node.server.connections[victim_id]
    victim.transport = WriteEofTransport(victim.transport)
    node.server.publish_heartbeat(0)  # the fan-out loop survives the one bad connection
    assert node.server.stats.disconnects["write_error"] == 1
    assert victim_id not in node.server.connections
    assert len(node.server.connections) == 1
    counted = dict(node.server.stats.disconnects)
    # idempotent: a second teardown, whatever its reason, finds nothing and counts nothing
    assert node.server.teardown(victim_id, Disconnect.CLOSED) is False
    assert dict(node.server.stats.disconnects) == counted
    frames = bystander.stats.frames
    await until(lambda: bystander.stats.frames > frames, "the bystander fed on")
    await bystander.close()
    await c.close()
    await until(lambda: not node.server.connections, "every terminal torn down")
    assert_clean(node)


@pytest.mark.parametrize(("drain_on_stop", "reason"), [(True, "drain"), (False, "server_shutdown")])
async def test_server_shutdown(tmp_path: Path, drain_on_stop: bool, reason: str) -> None:
    """A stop drains (staggered, reason "drain") unless told not to; either way every terminal
    gets 1001 with a reconnect hint and every index ends empty."""
    cfg = node_config(tmp_path, {"server.drain_on_stop": drain_on_stop})
    n = Node(cfg)
    await n.start()
    clients = [await subscribed_client(n) for _ in range(3)]
    await n.stop()
    assert n.server.stats.disconnects[reason] == 3
    assert_clean(n)
    for c in clients:
        await until(functools.partial(_gone, c), "the terminal told to go")
        assert c.close_message is not None and c.close_message.code == 1001
        await c.close()
