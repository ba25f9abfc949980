"""The client's supervisor against a small scripted WebSocket server: drain-style closes,
503 + Retry-After, 401, requests between connections, and the guard held across reconnects."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

import pytest
import websockets
from websockets.asyncio.server import Server, ServerConnection
from websockets.http11 import Request as HttpRequest
from websockets.http11 import Response as HttpResponse

from monotape.platform.model import Instrument, Tick
from monotape.platform.sdk.client import NotConnectedError, Quote, TerminalClient
from monotape.platform.wire import codec
from monotape.platform.wire.requests import SetPriority, Subscribe, Unsubscribe, decode_request
from tests.conftest import until

# -- a scripted server --------------------------------------------------------------------------

INSTRUMENTS = [Instrument(i, f"XT:S{i}", "XT", f"S{i}", 2, 1) for i in range(4)]
KEYS = [i.key for i in INSTRUMENTS]


def tick(iid: int, epoch: int, seq: int, px: int = 10_000) -> Tick:
    return Tick(iid, "XT", epoch, seq, 0, px + seq, px + seq + 2, px + seq + 1, 10)


class FakeServer:
    """Hello, ack + snapshot on subscribe, ack on priority; the test drives closes and frames."""

    def __init__(self) -> None:
        self.state: dict[int, Tick] = {i.iid: tick(i.iid, 1, 10) for i in INSTRUMENTS}
        self.refusals: list[tuple[int, dict[str, str]]] = []
        self.paths: list[str] = []
        self.requests: list[list[object]] = []  # per connection
        self.live: list[ServerConnection] = []
        self.upgrades: list[float] = []
        self.server: Server | None = None
        self.port = 0
        self.hello = codec.encode_hello(
            INSTRUMENTS, frame_ms=40, max_subscriptions=256, max_priority=16, server_id="fake"
        )

    async def start(self) -> None:
        self.server = await websockets.serve(
            self._serve, "127.0.0.1", 0, process_request=self._admit, compression=None
        )
        self.port = next(iter(self.server.sockets)).getsockname()[1]

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/?token=t0"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    def _admit(self, ws: ServerConnection, request: HttpRequest) -> HttpResponse | None:
        self.paths.append(request.path)
        self.upgrades.append(time.monotonic())
        if self.refusals:
            status, headers = self.refusals.pop(0)
            response = ws.respond(status, "refused\n")
            for k, v in headers.items():
                response.headers[k] = v
            return response
        return None

    async def _serve(self, ws: ServerConnection) -> None:
        log: list[object] = []
        self.requests.append(log)
        self.live.append(ws)
        try:
            await ws.send(self.hello)
            async for message in ws:
                req = decode_request(message)
                assert isinstance(req, Subscribe | Unsubscribe | SetPriority), req
                log.append(req)
                iids = [KEYS.index(k) for k in req.keys]
                sub = sum(1 for r in log if isinstance(r, Subscribe))
                await ws.send(codec.encode_ack(req.req, sub, 0))
                if isinstance(req, Subscribe):
                    chunks = [codec.encode_full_record(self.state[i]) for i in iids]
                    await ws.send(codec.encode_snapshot(1, chunks))
        except websockets.ConnectionClosed:
            pass
        finally:
            self.live.remove(ws)

    async def frame(self, base: Tick, new: Tick) -> None:
        self.state[new.iid] = new
        payload = codec.encode_frame(2, [codec.encode_delta_record(base, new)])
        for ws in list(self.live):
            await ws.send(payload)

    async def kick(self, hint_ms: int, *, message: bool = True) -> None:
        """What the server's drain does: a CLOSE message, then the WebSocket close."""
        for ws in list(self.live):
            if message:
                await ws.send(codec.encode_close(1001, hint_ms, "drain"))
            await ws.close(1001, f"drain; reconnect_after_ms={hint_ms}")


@pytest.fixture
async def fake() -> AsyncIterator[FakeServer]:
    f = FakeServer()
    await f.start()
    yield f
    await f.stop()


async def test_reconnect_restores_state_and_holds_the_guard_across(fake: FakeServer) -> None:
    states: list[str] = []
    rendered: list[tuple[str, tuple[int, int]]] = []
    c = TerminalClient(
        fake.url,
        reconnect=True,
        rng=random.Random(1),
        on_state=states.append,
        on_render=lambda q: rendered.append((q.key, q.version)),
        stable_after_s=0.0,
    )
    hello = await c.connect()
    assert hello.server_id == "fake" and c.connected and c.state == "connected"
    await c.subscribe(KEYS[:2])
    await c.set_priority(KEYS[:1])
    await until(lambda: KEYS[0] in c.view and KEYS[1] in c.view, "both snapshots on the glass")
    await fake.frame(fake.state[0], tick(0, 1, 11))
    await until(lambda: c.view[KEYS[0]].version == (1, 11), "the frame to (1, 11)")

    # The next node lags: its snapshot of S0 is older than the glass.
    fake.state[0] = tick(0, 1, 9)
    closed_at = time.monotonic()
    await fake.kick(300)
    await until(
        lambda: len(fake.requests) == 2 and len(fake.requests[1]) == 2,
        "the re-subscribe and re-priority",
    )
    assert fake.upgrades[-1] - closed_at >= 0.3, "the reconnect_after_ms hint was not honoured"
    await until(lambda: c.connected, "connected again")
    second = fake.requests[1]
    assert isinstance(second[0], Subscribe) and second[0].keys == KEYS[:2]
    assert isinstance(second[1], SetPriority) and second[1].keys == KEYS[:1]
    assert c.view[KEYS[0]].version == (1, 11), "a stale snapshot reached the glass"
    assert c.stats.stale >= 1
    # The new connection's frames chain from its own snapshot (1, 9): no gap, and (1, 10) is
    # still below the glass; (1, 12) renders.
    await fake.frame(fake.state[0], tick(0, 1, 10))
    await fake.frame(fake.state[0], tick(0, 1, 12))
    await until(lambda: c.view[KEYS[0]].version == (1, 12), "the frame to (1, 12)")
    assert c.stats.gaps == 0 and c.stats.regressions == 0
    s0 = [v for k, v in rendered if k == KEYS[0]]
    assert s0 == sorted(set(s0)), "versions on the glass went backwards"
    assert c.stats.connects == 2 and c.stats.reconnects == 1
    assert c.stats.closes == 1 and c.stats.closes_with_hint == 1
    assert c.stats.last_close_hint_ms == 300 and c.stats.last_close_code == 1001
    assert c.stats.resubscribed == 2
    assert c.stats.backoff_history[0][2] == "close" and c.stats.backoff_history[0][1] >= 0.3
    assert c.stats.connect_seconds is not None and c.stats.connect_seconds >= 0
    assert len(c.stats.connect_seconds_history) == 2
    assert c.stats.first_frame_seconds is not None
    await c.close()
    assert states == ["connecting", "connected", "backoff", "connecting", "connected", "closed"]
    assert not c.connected


async def test_hint_from_the_close_reason_alone(fake: FakeServer) -> None:
    c = TerminalClient(fake.url, reconnect=True, rng=random.Random(2))
    await c.connect()
    await fake.kick(250, message=False)
    await until(lambda: c.stats.reconnects == 1, "the reconnect")
    assert c.stats.last_close_hint_ms == 250
    assert c.stats.last_backoff_s >= 0.25
    await c.close()


async def test_503_retry_after_and_backoff_growth(fake: FakeServer) -> None:
    fake.refusals = [(503, {"Retry-After": "1"})] + [(503, {})] * 3
    c = TerminalClient(fake.url, reconnect=True, rng=random.Random(3), backoff_base_s=0.05)
    t0 = time.monotonic()
    await asyncio.wait_for(c.connect(), 10)
    assert time.monotonic() - t0 >= 1.0, "Retry-After was not honoured"
    assert c.stats.refused_503 == 4 and c.stats.connects == 1
    attempts = [a for a, _, why in c.stats.backoff_history]
    assert attempts == [0, 1, 2, 3]
    assert [why for *_, why in c.stats.backoff_history] == ["503"] * 4
    assert c.stats.backoff_history[0][1] >= 1.0
    await c.close()


async def test_401_backs_off_at_the_cap_and_asks_for_a_fresh_token(fake: FakeServer) -> None:
    fake.refusals = [(401, {})]
    tokens = iter(["stale", "fresh", "fresh2"])
    c = TerminalClient(
        fake.url,
        reconnect=True,
        backoff_cap_s=0.4,
        token_provider=lambda: next(tokens),
        rng=random.Random(4),
    )
    t0 = time.monotonic()
    await asyncio.wait_for(c.connect(), 10)
    assert time.monotonic() - t0 >= 0.2  # at least cap / 2
    assert c.stats.refused_401 == 1
    assert c.stats.backoff_history[0][2] == "401" and c.stats.backoff_history[0][1] >= 0.2
    assert fake.paths == ["/?token=stale", "/?token=fresh"]
    await c.close()


async def test_attempts_reset_after_a_stable_connection(fake: FakeServer) -> None:
    fake.refusals = [(503, {"Retry-After": "0"})] * 2
    c = TerminalClient(
        fake.url, reconnect=True, backoff_base_s=0.01, stable_after_s=0.0, rng=random.Random(5)
    )
    await c.connect()
    assert c.stats.backoff_attempt == 2
    await fake.kick(0)
    await until(lambda: c.stats.reconnects == 1, "the reconnect")
    assert c.stats.backoff_history[-1][0] == 0  # reset: the connection got a hello and stayed
    await c.close()


async def test_connection_errors_are_retried_and_requests_between_connections(
    fake: FakeServer,
) -> None:
    c = TerminalClient(fake.url, reconnect=True, backoff_base_s=0.05, backoff_cap_s=0.2)
    await c.connect()
    await c.subscribe(KEYS[:1])
    port = fake.port
    await fake.stop()  # every connection closed, nothing listening
    await until(lambda: c.stats.connect_errors >= 2, "two failed attempts")
    assert not c.connected and c.state in ("connecting", "backoff")
    assert not await c.wait_connected(0.05)
    with pytest.raises(NotConnectedError):
        await c.subscribe(KEYS[1:2])  # kept as intent: restored on the next connection
    assert c.held_keys == KEYS[:2]
    fake.server = await websockets.serve(
        fake._serve, "127.0.0.1", port, process_request=fake._admit, compression=None
    )
    assert await c.wait_connected(5)
    last = fake.requests[-1]
    assert isinstance(last[0], Subscribe) and last[0].keys == KEYS[:2]
    await c.unsubscribe(KEYS[:1])
    assert c.held_keys == KEYS[1:2]
    assert isinstance(fake.requests[-1][-1], Unsubscribe)
    await c.close()
    assert c.stats.closes >= 1 and not c.connected


async def test_without_reconnect_a_close_ends_the_client(fake: FakeServer) -> None:
    states: list[str] = []
    c = TerminalClient(fake.url, on_state=states.append)
    await c.connect()
    await c.subscribe(KEYS[:1])
    await until(lambda: KEYS[0] in c.view, "the snapshot")
    await fake.kick(100)
    await until(lambda: not c.connected, "the close")
    assert c.close_message is not None and c.close_message.reconnect_after_ms == 100
    assert [q async for q in c.updates()] == []  # ends: nothing will come
    await asyncio.sleep(0.3)
    assert len(fake.requests) == 1, "reconnect=False reconnected"
    assert states == ["connecting", "connected", "closed"]
    await c.close()


async def test_close_during_backoff_is_prompt(fake: FakeServer) -> None:
    fake.refusals = [(503, {"Retry-After": "30"})]
    c = TerminalClient(fake.url, reconnect=True)
    task = asyncio.create_task(c.connect())
    await until(lambda: c.state == "backoff", "the backoff")
    t0 = time.monotonic()
    await c.close()
    assert time.monotonic() - t0 < 1.0
    with pytest.raises(ConnectionError):
        await task
    assert c.state == "closed"


async def test_a_render_callback_that_raises_loses_no_quote(fake: FakeServer) -> None:
    """``on_render`` runs after the whole message is applied: a callback that raises on one
    quote must not cost the message's other quotes their callback or their place in the
    queue. The error is logged, as an ``on_state`` one is."""
    seen: list[str] = []

    def render(q: Quote) -> None:
        seen.append(q.key)
        if len(seen) == 1:
            raise ValueError("a bug in the desk's own code")

    c = TerminalClient(fake.url, on_render=render)
    await c.connect()
    queued: list[str] = []

    async def read() -> None:
        async for q in c.updates():
            queued.append(q.key)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0)  # the iterator's queue exists before the snapshot comes
    await c.subscribe(KEYS)  # one snapshot message with every key
    await until(lambda: len(queued) == len(KEYS), "every quote of the snapshot in the queue")
    assert sorted(seen) == sorted(queued) == KEYS
    assert sorted(c.view) == KEYS
    assert [e for e in c.stats.error_log if e.startswith("on_render raised ValueError")]
    await c.close()
    await reader
