"""The client against a scripted server on loopback: per-key answers (REFUSED then ACK), the
protocols it speaks, and the resync requests its screen asks for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import msgspec
import pytest
import websockets
from websockets.asyncio.server import Server, ServerConnection

from monotape.clock import FakeClock
from monotape.platform.model import Instrument, Tick
from monotape.platform.sdk.client import KeysRefused, ServerError, TerminalClient
from monotape.platform.sdk.view import RESYNC_RETRY_NS
from monotape.platform.wire import codec
from monotape.platform.wire.codec import ErrorCode
from monotape.platform.wire.requests import (
    Request,
    SetPriority,
    Subscribe,
    Unsubscribe,
    decode_request,
    judge,
)
from tests.conftest import until

INSTRUMENTS = [Instrument(i, f"XT:S{i}", "XT", f"S{i}", 2, 1) for i in range(4)]
IDS = {i.key: i.iid for i in INSTRUMENTS}


def full(iid: int) -> bytes:
    return codec.encode_full_record(Tick(iid, "XT", 1, 10, 0, 100, 102, 101, 10))


class ScriptedServer:
    """Answers as a protocol-2 node does (``judge``, REFUSED, snapshot, ACK) unless ``answer``
    is replaced; records each connection's requests."""

    def __init__(self, hello: bytes | None = None, max_subscriptions: int = 256) -> None:
        self.hello = hello or codec.encode_hello(
            INSTRUMENTS, frame_ms=40, max_subscriptions=256, max_priority=16, server_id="s"
        )
        self.max_subscriptions = max_subscriptions
        self.requests: list[list[Request]] = []
        self.live: list[ServerConnection] = []
        self.answer: Callable[[Request, set[int], set[int]], list[bytes]] = self._as_a_node
        self.server: Server | None = None
        self.port = 0

    def _as_a_node(self, req: Request, subs: set[int], prio: set[int]) -> list[bytes]:
        assert isinstance(req, Subscribe | Unsubscribe | SetPriority), req  # what these tests send
        ruling = judge(
            req, IDS, subs, prio, max_subscriptions=self.max_subscriptions, max_priority=16
        )
        out = [codec.encode_refused(req.req, ruling.refused)] if ruling.refused else []
        if isinstance(req, Subscribe):
            subs.update(ruling.iids)
            if ruling.iids:
                out.append(codec.encode_snapshot(1, [full(i) for i in ruling.iids]))
        elif isinstance(req, SetPriority):
            prio.update(ruling.iids) if req.on else prio.difference_update(ruling.iids)
        else:
            subs.difference_update(ruling.iids)
        return [*out, codec.encode_ack(req.req, len(subs), len(prio))]

    async def _serve(self, ws: ServerConnection) -> None:
        log: list[Request] = []
        self.requests.append(log)
        self.live.append(ws)
        subs: set[int] = set()
        prio: set[int] = set()
        try:
            await ws.send(self.hello)
            async for message in ws:
                req = decode_request(message)
                log.append(req)
                for out in self.answer(req, subs, prio):
                    await ws.send(out)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.live.remove(ws)

    async def start(self) -> None:
        self.server = await websockets.serve(self._serve, "127.0.0.1", 0, compression=None)
        self.port = next(iter(self.server.sockets)).getsockname()[1]

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedServer]:
    s = ScriptedServer(max_subscriptions=3)
    await s.start()
    yield s
    await s.stop()


async def test_refused_keys_are_reported_not_held_and_not_restored(
    scripted: ScriptedServer,
) -> None:
    c = TerminalClient(scripted.url, reconnect=True, backoff_base_s=0.01, backoff_cap_s=0.05)
    await c.connect()
    answer = await c.subscribe(["XT:S0", "xt:s1", "XT:NOPE", "XT:S0", "XT:S1"])
    assert answer.applied == ["XT:S0", "XT:S1"] and answer.subscribed == 2
    assert [(r.key, ErrorCode(r.code)) for r in answer.refused] == [
        ("xt:s1", ErrorCode.MALFORMED_KEY),
        ("XT:NOPE", ErrorCode.UNKNOWN_SYMBOL),
    ]
    assert c.held_keys == ["XT:S0", "XT:S1"]
    await until(lambda: set(c.view) == {"XT:S0", "XT:S1"}, "both keys shown")
    # Over the limit (3 here): the key past it is refused, the one under it held.
    over = await c.subscribe(["XT:S2", "XT:S3"])
    assert over.applied == ["XT:S2"]
    assert [(r.key, ErrorCode(r.code)) for r in over.refused] == [
        ("XT:S3", ErrorCode.TOO_MANY_SUBSCRIPTIONS)
    ]
    assert c.held_keys == ["XT:S0", "XT:S1", "XT:S2"] and c.stats.refused_keys == 3
    # Priority: one key not subscribed is refused, the mark on the other stands.
    marked = await c.set_priority(["XT:S3", "XT:S0"])
    assert marked.applied == ["XT:S0"] and c.priority_keys == ["XT:S0"]
    # A reconnect restores what is held, nothing refused.
    for ws in list(scripted.live):
        await ws.close(1001, "drain; reconnect_after_ms=10")
    await until(
        lambda: len(scripted.requests) == 2 and len(scripted.requests[1]) == 2, "the re-subscribe"
    )
    restored = scripted.requests[1]
    assert restored[0] == Subscribe(req=restored[0].req, keys=["XT:S0", "XT:S1", "XT:S2"])
    assert restored[1] == SetPriority(req=restored[1].req, keys=["XT:S0"])
    await c.close()


async def test_every_key_refused_is_a_typed_error_saying_why(scripted: ScriptedServer) -> None:
    c = TerminalClient(scripted.url)
    await c.connect()
    with pytest.raises(KeysRefused, match="UNKNOWN_SYMBOL: XT:NOPE: not in the dictionary") as e:
        await c.subscribe(["XT:NOPE", "bad"])
    assert isinstance(e.value, ServerError) and e.value.code == ErrorCode.UNKNOWN_SYMBOL
    assert [r.key for r in e.value.answer.refused] == ["XT:NOPE", "bad"]
    assert c.held_keys == []
    await c.close()


async def test_a_protocol_1_server_s_whole_refusal_is_a_server_error(
    scripted: ScriptedServer,
) -> None:
    def v1(req: Request, subs: set[int], prio: set[int]) -> list[bytes]:
        return [codec.encode_error(ErrorCode.UNKNOWN_SYMBOL, "unknown symbol: XT:NOPE", req.req)]

    scripted.answer = v1
    c = TerminalClient(scripted.url)
    await c.connect()
    with pytest.raises(ServerError, match="UNKNOWN_SYMBOL") as e:
        await c.subscribe(["XT:S0", "XT:NOPE"])
    assert not isinstance(e.value, KeysRefused) and c.held_keys == []
    await c.close()


async def test_unknown_kinds_and_codes_from_a_newer_server_do_not_break_the_client(
    scripted: ScriptedServer,
) -> None:
    def newer(req: Request, subs: set[int], prio: set[int]) -> list[bytes]:
        if req.req == 1:  # a kind this client does not know, then a normal answer
            return [b"\x2a" + msgspec.msgpack.encode([1, 2]), *scripted._as_a_node(req, subs, prio)]
        # 99 is no ErrorCode on purpose: a code from a newer server, which this client must show
        return [codec.encode_error(99, "a reason from the future", req.req)]  # type: ignore[arg-type]

    scripted.answer = newer
    c = TerminalClient(scripted.url)
    await c.connect()
    assert (await c.subscribe(["XT:S0"])).applied == ["XT:S0"]
    assert c.stats.errors == 0  # skipped, not counted as undecodable
    with pytest.raises(ServerError, match="code 99: a reason from the future"):
        await c.subscribe(["XT:S1"])
    assert c.connected
    await c.close()


@pytest.mark.parametrize("reconnect", [False, True])
async def test_a_protocol_this_sdk_does_not_speak_is_refused(reconnect: bool) -> None:
    hello = bytes([codec.Kind.HELLO]) + msgspec.msgpack.encode([99, "s", 40, 256, 16, []])
    s = ScriptedServer(hello=hello)
    await s.start()
    try:
        c = TerminalClient(s.url, reconnect=reconnect, backoff_base_s=0.01, backoff_cap_s=0.05)
        if reconnect:
            task = asyncio.create_task(c.connect())
            await until(lambda: c.stats.connect_errors >= 2, "two connect errors")
            assert not task.done() and c.stats.connects == 0
            await c.close()
            with pytest.raises(ConnectionError):
                await task
        else:
            with pytest.raises(ConnectionError, match="protocol 99"):
                await c.connect()
            assert c.state == "closed"
        assert any("protocol 99" in e for e in c.stats.error_log)
    finally:
        await s.stop()


async def test_a_burst_of_gaps_is_one_subscribe_and_a_lost_one_is_asked_again(
    scripted: ScriptedServer,
) -> None:
    clock = FakeClock()
    c = TerminalClient(scripted.url, clock=clock)
    await c.connect()
    await c.subscribe(["XT:S0", "XT:S1", "XT:S2"])
    await until(lambda: len(c.view) == 3, "the snapshots")
    scripted.answer = lambda req, subs, prio: []  # the node answers no more: a lost request
    (ws,) = scripted.live
    behind = Tick(0, "XT", 1, 9, 0, 100, 102, 101, 10)  # the terminal holds seq 10, not 9
    deltas = [
        codec.encode_delta_record(
            msgspec.structs.replace(behind, iid=i), Tick(i, "XT", 1, 11, 0, 1, 2, 3, 1)
        )
        for i in range(3)
    ]
    await ws.send(codec.encode_frame(2, deltas))
    await until(lambda: len(scripted.requests[0]) == 2, "the resync")
    assert scripted.requests[0][1] == Subscribe(
        req=scripted.requests[0][1].req, keys=["XT:S0", "XT:S1", "XT:S2"]
    )  # one request for the three gaps, not three
    assert c.stats.gaps == 3 and c.stats.regressions == 0
    await ws.send(codec.encode_heartbeat(3, 0))
    await until(lambda: c.stats.heartbeats == 1, "the heartbeat")
    assert len(scripted.requests[0]) == 2  # asked a moment ago: not again yet
    clock.advance(RESYNC_RETRY_NS + 1)
    await ws.send(codec.encode_heartbeat(4, 0))
    await until(lambda: len(scripted.requests[0]) == 3, "the resync asked again")
    assert isinstance(scripted.requests[0][2], Subscribe)
    assert scripted.requests[0][2].keys == ["XT:S0", "XT:S1", "XT:S2"]
    await c.close()
