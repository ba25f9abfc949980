"""Connections against the real server: slow consumers, the priority path and bad input."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import time

import msgspec
import pytest
import websockets

from monotape import metric_names as m
from monotape.platform.sdk.client import Quote, ServerError, TerminalClient
from monotape.platform.wire import codec
from monotape.platform.wire.requests import Subscribe, encode_request
from tests.conftest import ServerFactory, mint

pytestmark = [pytest.mark.e2e]


async def _keys(url: str) -> list[str]:
    probe = TerminalClient(url)
    hello = await probe.connect()
    await probe.close()
    return [i.key for i in hello.instruments]


class FrameClock:
    """Arrival times of frames and priority updates at one terminal (loop clock)."""

    def __init__(self) -> None:
        self.frames: list[float] = []
        self.priority: list[tuple[float, Quote]] = []

    def on_render(self, q: Quote) -> None:
        if q.source == "priority":
            self.priority.append((time.monotonic(), q))


@pytest.mark.slow
async def test_slow_consumer_is_bounded_gets_a_snapshot_and_others_keep_their_rate(
    server_factory: ServerFactory,
) -> None:
    # Small transport and kernel buffers so a stalled reader overflows its ring within seconds.
    server = server_factory.start(
        "--rate", "12000",
        env={"MONOTAPE_SERVER__WRITE_HIGH_WATER": "4096", "MONOTAPE_SERVER__SO_SNDBUF": "4096",
             # degrade, not kick: a 5 s stall outlasts the default 5 s kick
             "MONOTAPE_SERVER__SLOW_CONSUMER_KICK_S": "30"},
    )  # fmt: skip
    keys = await _keys(server.url)
    hot = keys[:256]

    normal = TerminalClient(server.url)
    await normal.connect()
    await normal.subscribe(keys[300:400])

    # The slow terminal: a tiny receive buffer, and we stop reading its socket for 5 s.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.ws_port))
    slow = TerminalClient(server.url)
    await slow.connect(sock=sock)
    await slow.subscribe(hot)
    await asyncio.sleep(1.0)
    assert slow._ws is not None
    # The other terminal's frame rate before the stall, to compare with its rate during it.
    frames_before = normal.stats.frames
    t_before = time.monotonic()
    await asyncio.sleep(2.0)
    rate_before = (normal.stats.frames - frames_before) / (time.monotonic() - t_before)
    frames_before = normal.stats.frames
    t0 = time.monotonic()
    slow._ws.transport.pause_reading()
    max_ring = 0.0
    while time.monotonic() - t0 < 5.0:
        await asyncio.sleep(0.5)
        max_ring = max(max_ring, server.metric_sum(m.OUTBOX_FRAMES_MAX))
    normal_rate = (normal.stats.frames - frames_before) / (time.monotonic() - t0)
    drops = server.metric_sum(m.SLOW_CONSUMER_DROPS)
    slow._ws.transport.resume_reading()
    snapshots_before = slow.stats.snapshots
    await asyncio.sleep(2.0)

    assert max_ring <= 64, f"a ring held {max_ring} frames"
    assert drops > 0, "the stalled terminal never overflowed its ring"
    assert server.metric_sum(m.GAP_SNAPSHOTS) >= 1
    assert slow.stats.snapshots > snapshots_before, "no snapshot after the gap"
    assert slow.stats.gaps == 0, "a delta was applied on a stale base"
    assert slow.stats.regressions == 0
    assert slow.connected
    # The other terminal kept its rate (25 Hz: a frame every 40 ms) while the slow one stalled.
    assert normal_rate >= 0.8 * rate_before, f"{normal_rate:.1f} vs {rate_before:.1f} frames/s"
    assert normal.stats.regressions == 0
    await slow.close()
    await normal.close()


async def test_priority_updates_arrive_between_frame_boundaries(
    server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1 s histogram intervals, so the priority stage can be read back within the test.
    server = server_factory.start("--rate", "20000", env={"MONOTAPE_SERVER__HDR_INTERVAL_S": "1"})
    keys = await _keys(server.url)
    clock = FrameClock()
    frame_times: list[float] = []

    client = TerminalClient(server.url, on_render=clock.on_render)
    await client.connect()
    original = client._on_message
    # (arrival time, "P" or "F", {iid: version}) for every priority update and frame, in order
    events: list[tuple[float, str, dict[int, tuple[int, int]]]] = []

    def spy(msg: codec.ServerMessage) -> None:
        if isinstance(msg, codec.Frame):
            frame_times.append(time.monotonic())
            versions = {r.iid: (r.epoch, r.seq) for r in msg.records}
            events.append((frame_times[-1], "F", versions))
        elif isinstance(msg, codec.PriorityUpdate):
            r = msg.record
            events.append((time.monotonic(), "P", {r.iid: (r.epoch, r.seq)}))
        original(msg)

    monkeypatch.setattr(client, "_on_message", spy)  # every message passes the spy first
    await client.subscribe(keys[:40])
    await client.set_priority(keys[:8])
    await asyncio.sleep(4.0)
    await client.close()

    assert len(clock.priority) >= 20, "too few priority updates to judge"
    # Ordering, not speed: every priority update arrives before any frame that carries its
    # symbol at that version or later; conflated, it would arrive with (or after) that frame.
    for i, (_, kind, versions) in enumerate(events):
        if kind != "P":
            continue
        ((iid, version),) = versions.items()
        earlier = [v[iid] for _, k, v in events[:i] if k == "F" and iid in v]
        assert all(v < version for v in earlier), "a frame carried it before the priority path"
    # And it is not a near thing: the typical lead over the next frame is a good part of the
    # 40 ms frame (ticks land uniformly inside it: ~20 ms expected), not ~0.
    ahead = []
    for t, _ in clock.priority:
        later = [f for f in frame_times if f >= t]
        if later:
            ahead.append(later[0] - t)
    assert statistics.median(ahead) > 0.040 / 8, "priority updates arrive with the frames"
    assert client.stats.regressions == 0

    # Each priority update this terminal received was one priority write (admitted → handed to
    # the kernel) in the `priority` stage, once a rotation has closed the interval holding it.
    admin = mint(server.data_dir, admin=True)
    received = client.stats.priority
    deadline = time.monotonic() + 10.0
    while True:
        body = json.loads(server.http("/admin/latency?stage=priority&window=1m", admin))
        if body["count"] >= received or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert body["stage"] == "priority"
    assert body["count"] >= received, f"{body['count']} priority values, {received} received"
    assert body["count"] <= server.metric_sum(m.PRIORITY_UPDATES_SENT)
    assert 0 < body["p99_us"] < 1_000_000, body


async def test_bad_input_gets_clear_errors_and_hurts_no_one(server_factory: ServerFactory) -> None:
    server = server_factory.start("--rate", "4000")
    keys = await _keys(server.url)
    bystander = TerminalClient(server.url)
    await bystander.connect()
    await bystander.subscribe(keys[:50])
    frames_before = bystander.stats.frames

    async def raw() -> websockets.ClientConnection:
        ws = await websockets.connect(server.url, compression=None, max_size=2**23)
        hello = codec.decode_message(await ws.recv(decode=False))
        assert isinstance(hello, codec.Hello)
        return ws

    async def next_error(ws: websockets.ClientConnection) -> codec.Error:
        while True:
            msg = codec.decode_message(await asyncio.wait_for(ws.recv(decode=False), 5))
            if isinstance(msg, codec.Error):
                return msg

    async def next_ack(ws: websockets.ClientConnection) -> codec.Ack:
        while True:
            msg = codec.decode_message(await asyncio.wait_for(ws.recv(decode=False), 5))
            if isinstance(msg, codec.Ack):
                return msg

    # Garbage bytes: an error, and the connection still works afterwards.
    ws = await raw()
    await ws.send(b"\xc1\x00garbage")  # 0xc1 is never valid msgpack
    err = await next_error(ws)
    assert err.code == codec.ErrorCode.BAD_MESSAGE
    # Malformed request: the message names the field.
    await ws.send(msgspec.msgpack.encode({"type": "subscribe", "req": "x", "keys": [keys[0]]}))
    err = await next_error(ws)
    assert err.code == codec.ErrorCode.INVALID_REQUEST and "req" in err.message

    async def next_refused(ws: websockets.ClientConnection) -> codec.Refused:
        while True:
            msg = codec.decode_message(await asyncio.wait_for(ws.recv(decode=False), 5))
            if isinstance(msg, codec.Refused):
                return msg

    # Unknown symbol: refused per key (REFUSED), the known key applied (wire protocol 2).
    await ws.send(encode_request(Subscribe(req=7, keys=[keys[0], "NOPE:NOTHING"])))
    refused = await next_refused(ws)
    assert refused.req == 7 and [(r.key, r.code) for r in refused.keys] == [
        ("NOPE:NOTHING", codec.ErrorCode.UNKNOWN_SYMBOL)
    ]
    ack = await next_ack(ws)
    assert (ack.req, ack.subscribed) == (7, 1)
    await ws.send(encode_request(Subscribe(req=8, keys=[keys[1]])))
    ack = await next_ack(ws)
    assert (ack.req, ack.subscribed) == (8, 2)
    # Too many subscriptions: 256 max per connection; the keys past it are refused.
    await ws.send(encode_request(Subscribe(req=9, keys=keys[2:200])))
    assert (await next_ack(ws)).subscribed == 200
    await ws.send(encode_request(Subscribe(req=10, keys=keys[200:300])))
    refused = await next_refused(ws)
    assert refused.req == 10 and [r.key for r in refused.keys] == keys[256:300]
    assert {r.code for r in refused.keys} == {codec.ErrorCode.TOO_MANY_SUBSCRIPTIONS}
    assert (await next_ack(ws)).subscribed == 256
    await ws.send(encode_request(Subscribe(req=11, keys=[keys[1]])))
    assert (await next_ack(ws)).subscribed == 256
    await ws.close()

    # Text where binary is expected: an error, then close 1003 with a reason.
    ws = await raw()
    await ws.send('{"type": "subscribe"}')
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await asyncio.wait_for(ws.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
    assert "binary" in closed.value.rcvd.reason

    # Oversized message: close 1009 (message too big).
    ws = await raw()
    await ws.send(b"\x00" * (64 * 1024))
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await asyncio.wait_for(ws.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009

    # Subscribe flood: rate-limited with a clear error, then closed with 1008.
    ws = await raw()
    codes: set[int] = set()

    async def read_until_closed() -> websockets.ConnectionClosed:
        while True:
            try:
                raw_msg = await asyncio.wait_for(ws.recv(decode=False), 10)
            except websockets.ConnectionClosed as exc:
                return exc
            msg = codec.decode_message(raw_msg)
            if isinstance(msg, codec.Error):
                codes.add(msg.code)

    reader = asyncio.create_task(read_until_closed())
    for i in range(5000):  # bounded: the server must have closed long before this ends
        if reader.done():
            break
        try:
            await ws.send(encode_request(Subscribe(req=i, keys=[keys[i % 100]])))
        except websockets.ConnectionClosed:
            break
        if i % 50 == 0:
            await asyncio.sleep(0)
    flooded = await asyncio.wait_for(reader, 15)
    assert codec.ErrorCode.RATE_LIMITED in codes, (codes, flooded)
    assert flooded.rcvd is not None and flooded.rcvd.code == 1008
    assert "flood" in flooded.rcvd.reason

    # The SDK surfaces a refusal as a typed error.
    with pytest.raises(ServerError, match="UNKNOWN_SYMBOL"):
        await bystander.subscribe(["NOPE:NOTHING"])

    # The bystander never noticed any of it.
    await asyncio.sleep(1.0)
    assert bystander.connected
    assert bystander.stats.frames > frames_before
    assert bystander.stats.regressions == 0 and bystander.stats.gaps == 0
    await bystander.close()
    assert server.metric_sum(m.REQUEST_ERRORS) >= 5
