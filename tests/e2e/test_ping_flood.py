"""A terminal that floods pings and never reads (issue 10, A2).

Before: websockets answered every ping with a pong written straight to the transport, so the
server's buffer for the flooder grew without bound (102 -> 681 MB RSS in 20 s) and every other
terminal's frames/s collapsed (25 -> 2-3); the flooder escaped the keepalive timeout and the
slow-consumer kick. Now control frames are charged to a per-terminal budget and the flooder is
closed with 1008 and a named teardown reason.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
import threading
import time
from pathlib import Path

import psutil
import pytest

from monotape import metric_names as m
from monotape.platform.node.node import Node
from monotape.platform.sdk.client import TerminalClient
from tests.conftest import ServerFactory, node_config, server_frames, until

pytestmark = [pytest.mark.e2e]


def _upgrade(port: int, token: str = "", rcvbuf: int = 0) -> socket.socket:
    """A raw socket that completes the WebSocket upgrade and nothing else."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    sock.sendall(
        (
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n{auth}\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, f"closed during the upgrade: {head!r}"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _ping(payload: bytes) -> bytes:
    """A client ping frame (RFC 6455 §5.5.2), masked as every client frame must be (§5.3)."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes((0x89, 0x80 | len(payload))) + mask + masked


def _read_all(sock: socket.socket, timeout_s: float) -> bytes:
    sock.settimeout(timeout_s)
    out = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, OSError):
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)


async def test_a_ping_burst_over_budget_gets_its_pongs_then_close_1008_with_a_reason(
    tmp_path: Path,
) -> None:
    """The flooder is told: the pongs within its budget, then the wire's CLOSE message (1008,
    reconnect_after_ms) and a close frame 1008 with the reason, and nothing more."""
    cfg = node_config(
        tmp_path,
        {
            "simulator.rate": 500,
            "server.control_frames_burst": 20,
            "server.keepalive_interval_s": 0,
        },
    )
    node = Node(cfg)
    await node.start()
    try:
        sock = await asyncio.to_thread(_upgrade, node.ws_port)
        await asyncio.to_thread(sock.sendall, b"".join(_ping(b"%03d" % i) for i in range(200)))
        data = await asyncio.to_thread(_read_all, sock, 3.0)
        sock.close()
        frames = server_frames(data)
        pongs = [p for op, p in frames if op == 0xA]
        assert pongs == [b"%03d" % i for i in range(20)], "the pongs within the budget, no more"
        closes = [p for op, p in frames if op == 0x8]
        assert len(closes) == 1
        code = struct.unpack("!H", closes[0][:2])[0]
        assert code == 1008
        assert b"control frame flood" in closes[0] and b"reconnect_after_ms=5000" in closes[0]
        # The CLOSE message (kind 7) right before the close frame, repeating its code.
        kinds = [(op, p[:1]) for op, p in frames if op != 0xA]
        assert kinds[-2:] == [(0x2, b"\x07"), (0x8, closes[0][:1])], kinds
        await asyncio.sleep(0.2)
        assert node.server.stats.disconnects["control_flood"] == 1
        assert not node.server.connections
    finally:
        await node.stop()


async def test_pings_within_budget_are_answered_and_the_terminal_stays(tmp_path: Path) -> None:
    cfg = node_config(
        tmp_path,
        {
            "simulator.rate": 500,
            "server.control_frames_burst": 20,
        },
    )
    node = Node(cfg)
    await node.start()
    try:
        sock = await asyncio.to_thread(_upgrade, node.ws_port)
        await asyncio.to_thread(sock.sendall, b"".join(_ping(b"p") for _ in range(15)))
        data = await asyncio.to_thread(_read_all, sock, 1.0)
        assert sum(1 for op, _ in server_frames(data) if op == 0xA) == 15
        # websockets answers pings from the moment of the upgrade; the server registers the
        # terminal a moment later (later still on a busy machine)
        await until(lambda: len(node.server.connections) == 1, "the terminal is registered")
        assert not node.server.stats.disconnects
        sock.close()
    finally:
        await node.stop()


async def test_bytes_queued_for_a_terminal_are_bounded_pongs_included(tmp_path: Path) -> None:
    """With a rate budget too generous to trip, the bound on bytes queued for the terminal
    (transport buffer, pongs included) still cuts a flooder that does not read."""
    cfg = node_config(
        tmp_path,
        {
            "simulator.rate": 500,
            "server.control_frames_burst": 10**9,
            "server.write_high_water": 4096,
            "server.max_queued_bytes": 256 * 1024,
            "server.so_sndbuf": 4096,
            "server.keepalive_interval_s": 0,
        },
    )
    node = Node(cfg)
    await node.start()
    try:
        sock = await asyncio.to_thread(_upgrade, node.ws_port, "", 4096)
        batch = b"".join(_ping(os.urandom(125)) for _ in range(256))

        def flood() -> None:
            sock.settimeout(0.5)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not node.server.stats.disconnects:
                try:
                    sock.send(batch)
                except TimeoutError:
                    continue
                except OSError:
                    return

        await asyncio.to_thread(flood)
        assert dict(node.server.stats.disconnects) == {"queued_bytes": 1}
        assert not node.server.connections
        sock.close()
    finally:
        await node.stop()


class Flooder(threading.Thread):
    """Floods pings (125-byte payloads, the largest a control frame carries) and never reads,
    with a tiny receive buffer so the server's pongs back up at once."""

    def __init__(self, port: int, token: str, seconds: float) -> None:
        super().__init__(daemon=True)
        self.sock = _upgrade(port, token, rcvbuf=4096)
        self.sock.settimeout(0.5)
        self.seconds = seconds
        self.sent = 0
        self.ended = ""  # why the flood stopped early: the server cut it off

    def run(self) -> None:
        batch = b"".join(_ping(os.urandom(125)) for _ in range(512))
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            try:
                self.sent += self.sock.send(batch)
            except TimeoutError:
                continue  # the server is not reading us (now): keep pushing until the deadline
            except OSError as exc:
                self.ended = repr(exc)
                return


def _frames_of(clients: list[TerminalClient]) -> list[int]:
    return [c.stats.frames for c in clients]


@pytest.mark.slow
async def test_a_ping_flood_is_cut_off_and_bystanders_keep_their_frames_and_rss_stays_flat(
    server_factory: ServerFactory,
) -> None:
    # Load shedding on event-loop lag is a designed refusal, not the subject: off, so the
    # bystanders' connects do not depend on how busy this machine is.
    server = server_factory.start("--rate", "8000")
    proc = psutil.Process(server.proc.pid)
    probe = TerminalClient(server.url)
    hello = await probe.connect()
    await probe.close()
    keys = [i.key for i in hello.instruments]
    bystanders = [TerminalClient(server.url) for _ in range(4)]
    for i, c in enumerate(bystanders):
        await c.connect()
        await c.subscribe(keys[i * 50 : i * 50 + 50])
    await asyncio.sleep(1.5)  # snapshots in, frames flowing

    # Baseline, same run, same machine: each bystander's own frames in a window.
    window_s = 4.0
    before = _frames_of(bystanders)
    await asyncio.sleep(window_s)
    baseline = [b - a for a, b in zip(before, _frames_of(bystanders), strict=True)]
    assert all(n > 0 for n in baseline), baseline
    rss_before = proc.memory_info().rss

    flooder = Flooder(server.ws_port, server.token, seconds=window_s + 2.0)
    flooder.start()
    await asyncio.sleep(0.5)  # the flood is under way
    before = _frames_of(bystanders)
    rss_max = rss_before
    t0 = time.monotonic()
    while time.monotonic() - t0 < window_s:
        await asyncio.sleep(0.25)
        rss_max = max(rss_max, proc.memory_info().rss)
    during = [b - a for a, b in zip(before, _frames_of(bystanders), strict=True)]
    await asyncio.to_thread(flooder.join, 15)

    disconnects = {
        labels: v for (name, labels), v in server.metrics().items() if name == m.DISCONNECTS
    }
    flood_closes = disconnects.get((("reason", "control_flood"),), 0.0)
    assert flood_closes == 1, f"the flooder was not closed for its flood: {disconnects}"
    for got, base in zip(during, baseline, strict=True):
        assert got >= 0.5 * base, f"bystander frames during the flood {during} vs {baseline}"
    growth_mb = (rss_max - rss_before) / 2**20
    assert growth_mb < 32, f"server RSS grew {growth_mb:.0f} MB during the flood"
    for c in bystanders:
        assert c.connected and c.stats.regressions == 0
        await c.close()
    flooder.sock.close()
