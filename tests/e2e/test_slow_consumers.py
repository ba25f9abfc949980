"""Slow consumers named as such (issue 40, item 5; docs/observability.md, Slow consumers): five
terminals that never read, at 10k ticks/s, are closed with ``slow_consumer`` (never as
``keepalive_timeout``) within the documented bound, and the other terminals keep receiving
(nearly) every frame the grid produces meanwhile. Bounds are generous and scaled from the
configuration, never speeds."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest

from monotape.platform.node.node import Node
from monotape.platform.sdk.client import TerminalClient
from tests.conftest import node_config, until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KEEPALIVE_S = 2.0  # interval; the timeout below: the ping rule's part of the bound
TIMEOUT_S = 3.0
KICK_S = 5.0  # the default slow_consumer_kick_s


async def _never_reading(url: str, port: int, keys: list[str]) -> TerminalClient:
    """A real terminal that subscribes, then stops reading its socket for good (its receive
    window closes as soon as its small buffer is full, as a hung terminal's does)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    client = TerminalClient(url)
    await client.connect(sock=sock)
    await client.subscribe(keys)
    assert client._ws is not None
    client._ws.transport.pause_reading()
    return client


async def test_five_terminals_that_never_read_are_closed_as_slow_consumers_the_rest_keep_up(
    tmp_path: Path,
) -> None:
    node = Node(
        node_config(
            tmp_path,
            {
                "simulator.rate": 10_000,
                "server.keepalive_interval_s": KEEPALIVE_S,
                "server.keepalive_timeout_s": TIMEOUT_S,
            },
        )
    )
    await node.start()
    assert node.cfg.server.slow_consumer_kick_s == KICK_S
    url = f"ws://127.0.0.1:{node.ws_port}/"
    try:
        keys = [i.key for i in node.universe]
        normal = []
        for n in range(5):
            c = TerminalClient(url)
            await c.connect()
            await c.subscribe(keys[300 + 40 * n : 400 + 40 * n])
            normal.append(c)
        await until(lambda: all(c.stats.frames > 10 for c in normal), "normal terminals' frames")
        stalled = [await _never_reading(url, node.ws_port, keys[:256]) for _ in range(5)]
        t0 = time.monotonic()
        frames0 = [c.stats.frames for c in normal]
        boundaries0 = node.pipeline.grid.taken
        disconnects = node.server.stats.disconnects
        # The documented bound, once the terminal's receive window has closed (here at once):
        # its ring overruns within 64 frames and it is kicked slow_consumer_kick_s later; or
        # its ping goes unanswered with bytes queued. Three times that, plus a slice: generous.
        bound_s = 3 * (64 * node.cfg.server.frame_ms / 1000 + KICK_S + 1)
        bound_s = max(bound_s, 3 * (KEEPALIVE_S + TIMEOUT_S + 1))
        await until(lambda: disconnects["slow_consumer"] >= 5, "five slow consumers", bound_s)
        took = time.monotonic() - t0
        boundaries = node.pipeline.grid.taken - boundaries0
        assert disconnects["keepalive_timeout"] == 0, dict(disconnects)
        assert disconnects["slow_consumer"] == 5, dict(disconnects)
        assert len(node.server.connections) == 5  # the normal ones
        # Behaviour, not speed: every normal terminal got (nearly) every frame the grid made
        # while the five were stuck (>= 24 of 25 a second on a machine that keeps the grid).
        for c, before in zip(normal, frames0, strict=True):
            got = c.stats.frames - before
            assert got >= 0.75 * boundaries, f"{got} frames of {boundaries} in {took:.1f} s"
            assert c.connected and c.stats.regressions == 0 and c.stats.gaps == 0
        for c in (*normal, *stalled):
            await c.close()
    finally:
        await node.stop()
    await asyncio.sleep(0)
