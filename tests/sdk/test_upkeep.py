"""The session's own requests against a scripted node on loopback: ``rate`` after every HELLO,
the token refreshed on the open connection (and a reconnect presenting the latest one), the
glass report sent when a count moves, and every timer gone with the connection.

Token lifetimes are read on ``CLOCK``, whose wall clock runs slow (see ``SlowWallClock``): a
busy machine delays a refresh in real seconds, and must not thereby expire the token it
replaces. The tests still prove every refresh reached the node before that token's ``exp``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TypeVar

import jwt
import pytest
import websockets
from websockets.asyncio.server import Server, ServerConnection

from monotape.platform.model import Instrument, Tick
from monotape.platform.sdk.client import TerminalClient
from monotape.platform.sdk.refresh import RETRY_AFTER_NS, token_expiry
from monotape.platform.sdk.upkeep import check_max_hz
from monotape.platform.wire import codec
from monotape.platform.wire.codec import ErrorCode
from monotape.platform.wire.requests import (
    Rate,
    Refresh,
    Report,
    Request,
    SetPriority,
    Subscribe,
    decode_request,
)
from tests.conftest import until

R = TypeVar("R")  # a request kind

INSTRUMENTS = [Instrument(i, f"XT:S{i}", "XT", f"S{i}", 2, 1) for i in range(4)]
KEYS = [i.key for i in INSTRUMENTS]
SECRET = "a test secret of thirty-two bytes"


class SlowWallClock:
    """The real monotonic clock (the client's timers sleep in real time), and a wall clock that
    runs at ``rate`` of real speed. The client reads a token's remaining lifetime on the wall
    clock and schedules its refresh on the monotonic one, so a token of ``ttl_s`` is refreshed
    0.6-0.85 x ``ttl_s`` real seconds after it is taken, and expires ``ttl_s / rate`` real
    seconds after: the difference is the margin a busy machine may use up."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._mono0 = time.monotonic_ns()
        self._wall0 = time.time_ns()

    def now_ns(self) -> int:
        return time.monotonic_ns()

    def wall_ns(self) -> int:
        return self._wall0 + int((time.monotonic_ns() - self._mono0) * self.rate)


# 1 s tokens live 20 real seconds: ~0.6-0.85 s between refreshes, 19 s of margin for the scheduler.
CLOCK = SlowWallClock(rate=0.05)


def token(ttl_s: float, n: int = 0) -> str:
    """A JWT living ``ttl_s`` on ``CLOCK``'s wall clock (float ``exp``: sub-second lifetimes
    stay exact)."""
    exp = CLOCK.wall_ns() / 1e9 + ttl_s
    return jwt.encode({"sub": "desk-7", "n": n, "exp": exp}, SECRET, algorithm="HS256")


HELLO = codec.encode_hello(
    INSTRUMENTS, frame_ms=40, max_subscriptions=256, max_priority=16, server_id="s"
)


def full(iid: int, seq: int) -> bytes:
    return codec.encode_full_record(Tick(iid, "XT", 1, seq, 0, 100, 102, 101, 10))


class SessionNode:
    """Hello; ACK (+ snapshot) for key requests; ``rate``, ``refresh`` and ``report`` answered
    as scripted (ACK unless told otherwise). Records each connection's path and requests."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.requests: list[list[Request]] = []
        self.live: list[ServerConnection] = []
        self.unknown: set[str] = set()  # request types answered INVALID_REQUEST (an older node)
        self.reject_refresh = 0  # answer this many refreshes with ERROR 11
        self.refreshed_at: list[float] = []  # CLOCK's wall seconds as each refresh arrived
        self.server: Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def of(self, kind: type[R], conn: int = -1) -> list[R]:
        return [r for r in self.requests[conn] if isinstance(r, kind)]

    def _answer(self, req: Request) -> list[bytes]:
        tag = {Rate: "rate", Refresh: "refresh", Report: "report"}.get(type(req))
        if tag in self.unknown:
            return [codec.encode_error(ErrorCode.INVALID_REQUEST, f"unknown {tag}", req.req)]
        if isinstance(req, Refresh) and self.reject_refresh > 0:
            self.reject_refresh -= 1
            return [codec.encode_error(ErrorCode.TOKEN_REJECTED, "another subject", req.req)]
        out = []
        if isinstance(req, Subscribe):
            out.append(codec.encode_snapshot(1, [full(KEYS.index(k), 10) for k in req.keys]))
        return [*out, codec.encode_ack(req.req, 0, 0)]

    async def _serve(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        self.paths.append(ws.request.path)
        log: list[Request] = []
        self.requests.append(log)
        self.live.append(ws)
        try:
            await ws.send(HELLO)
            async for message in ws:
                req = decode_request(message)
                log.append(req)
                if isinstance(req, Refresh):
                    self.refreshed_at.append(CLOCK.wall_ns() / 1e9)
                for out in self._answer(req):
                    await ws.send(out)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.live.remove(ws)

    async def send(self, payload: bytes) -> None:
        for ws in list(self.live):
            await ws.send(payload)

    async def kick(self) -> None:
        for ws in list(self.live):
            await ws.close(1001, "drain; reconnect_after_ms=10")


@pytest.fixture
async def node() -> AsyncIterator[SessionNode]:
    n = SessionNode()
    n.server = await websockets.serve(n._serve, "127.0.0.1", 0, compression=None)
    n.port = next(iter(n.server.sockets)).getsockname()[1]
    yield n
    n.server.close()
    await n.server.wait_closed()


# -- max_hz -------------------------------------------------------------------------------------
@pytest.mark.parametrize("hz", [25, 12.5, 5, 2.5, 1, 5.0])
def test_the_rates_the_node_takes(hz: float) -> None:
    assert check_max_hz(hz) == float(hz)
    assert TerminalClient("ws://127.0.0.1:1/", max_hz=hz).upkeep.max_hz == hz


@pytest.mark.parametrize("hz", [10, 0, -5, 4, 50, float("nan"), True, "5"])
def test_any_other_rate_is_refused_in_the_constructor(hz: object) -> None:
    with pytest.raises(ValueError, match=r"max_hz must be one of 25, 12\.5, 5, 2\.5, 1"):
        # not a float on purpose (True, "5"): the constructor's own check is under test
        TerminalClient("ws://127.0.0.1:1/", max_hz=hz)  # type: ignore[arg-type]


async def test_rate_goes_first_after_every_hello(node: SessionNode) -> None:
    c = TerminalClient(node.url, reconnect=True, max_hz=5, backoff_cap_s=0.05)
    await asyncio.wait_for(c.connect(), 10)
    await c.subscribe(KEYS[:2])
    await c.set_priority(KEYS[:1])
    first = node.requests[0]
    assert first[0] == Rate(req=first[0].req, max_hz=5.0)
    assert [type(r) for r in first] == [Rate, Subscribe, SetPriority]
    await node.kick()
    await until(lambda: len(node.requests) == 2 and len(node.requests[1]) == 3, "the restore")
    # the rate before the re-subscribe: the restored snapshot's frames come at 5 Hz
    assert [type(r) for r in node.requests[1]] == [Rate, Subscribe, SetPriority]
    assert c.stats.rate_refused == 0 and c.stats.reconnects == 1
    await c.close()


async def test_no_rate_at_the_full_25_hz(node: SessionNode) -> None:
    c = TerminalClient(node.url)
    await asyncio.wait_for(c.connect(), 10)
    await c.subscribe(KEYS[:1])
    assert [type(r) for r in node.requests[0]] == [Subscribe]
    await c.close()


async def test_an_older_node_refusing_the_rate_still_serves(node: SessionNode) -> None:
    node.unknown = {"rate"}
    c = TerminalClient(node.url, max_hz=2.5)
    await asyncio.wait_for(c.connect(), 10)
    answer = await c.subscribe(KEYS[:1])
    assert answer.applied == KEYS[:1]
    assert c.stats.rate_refused == 1
    assert any("max_hz 2.5 refused: INVALID_REQUEST" in line for line in c.stats.error_log)
    await c.close()


# -- token refresh ------------------------------------------------------------------------------
async def test_the_token_is_refreshed_on_the_open_connection(node: SessionNode) -> None:
    minted: list[str] = []

    async def refresh() -> str:
        minted.append(token(1.0, len(minted) + 1))
        return minted[-1]

    first = token(1.0)
    c = TerminalClient(
        f"{node.url}?token={first}",
        reconnect=True,
        refresh_token=refresh,
        backoff_cap_s=0.05,
        clock=CLOCK,
    )
    await asyncio.wait_for(c.connect(), 10)
    await until(lambda: len(node.of(Refresh, 0)) >= 3, "three refreshes", timeout_s=30)
    sent = node.of(Refresh, 0)
    assert [r.token for r in sent[:3]] == minted[:3]
    # each came before the token it replaced expired (on the clock the client read it by)
    replaced = [first, *minted[:2]]
    for arrived, old in zip(node.refreshed_at[:3], replaced, strict=True):
        exp = token_expiry(old)
        assert exp is not None and arrived < exp
    # the client counts a refresh when the node's answer arrives, after the node took it
    await until(lambda: c.stats.refreshes >= 3, "the client holds three answers")
    assert c.stats.refresh_failures == 0
    assert c.stats.connects == 1 and c.stats.reconnects == 0
    # a reconnect presents the latest token the node took, not the first one
    latest = c.upkeep.token
    assert latest in minted
    await node.kick()
    await until(lambda: len(node.paths) == 2, "the reconnect")
    assert node.paths[1] == f"/?token={latest}" != node.paths[0]
    await c.close()


async def test_the_header_token_is_the_one_replaced(node: SessionNode) -> None:
    async def refresh() -> str:
        return token(60.0, 9)

    c = TerminalClient(
        node.url, reconnect=True, refresh_token=refresh, backoff_cap_s=0.05, clock=CLOCK
    )
    await asyncio.wait_for(
        c.connect(additional_headers={"Authorization": f"Bearer {token(0.5)}"}), 10
    )
    await until(lambda: c.stats.refreshes == 1, "the refresh")
    assert c.upkeep.token == token_of(node.of(Refresh, 0)[0])
    await c.close()


def token_of(request: Request) -> str:
    assert isinstance(request, Refresh)
    return request.token


async def test_a_refused_refresh_is_retried_later_and_close_stops_it(node: SessionNode) -> None:
    node.reject_refresh = 1
    calls = 0

    async def refresh() -> str:
        nonlocal calls
        calls += 1
        return token(60.0, calls)

    c = TerminalClient(f"{node.url}?token={token(0.5)}", refresh_token=refresh, clock=CLOCK)
    await asyncio.wait_for(c.connect(), 10)
    await until(lambda: c.stats.refresh_failures == 1, "the refused refresh")
    assert any("TOKEN_REJECTED: another subject" in line for line in c.stats.error_log)
    due = c.upkeep.refresh.due_ns
    assert due is not None
    # the retry waits 10 s (by the client's clock), no sooner
    assert due - c.clock.now_ns() > RETRY_AFTER_NS - 2_000_000_000
    assert c.stats.refreshes == 0 and calls == 1
    timers = set(c.upkeep._timers)
    assert timers
    await c.close()
    assert c.upkeep.refresh.due_ns is None and not c.upkeep._timers
    assert all(t.done() for t in timers)
    assert calls == 1 and len(node.of(Refresh, 0)) == 1


async def test_a_failing_callback_counts_and_nothing_is_sent(node: SessionNode) -> None:
    async def refresh() -> str:
        raise RuntimeError("the identity provider is down")

    c = TerminalClient(f"{node.url}?token={token(0.3)}", refresh_token=refresh, clock=CLOCK)
    await asyncio.wait_for(c.connect(), 10)
    await until(lambda: c.stats.refresh_failures == 1, "the failed callback")
    assert any("identity provider is down" in line for line in c.stats.error_log)
    assert node.of(Refresh, 0) == []
    await c.close()


# -- the glass report ---------------------------------------------------------------------------
async def test_the_glass_report_goes_out_when_a_count_moves(node: SessionNode) -> None:
    c = TerminalClient(node.url)
    c.upkeep.report_every_s = 0.05
    await asyncio.wait_for(c.connect(), 10)
    await c.subscribe(KEYS[:2])
    await asyncio.sleep(0.3)  # several periods: a healthy terminal sends nothing
    assert node.of(Report, 0) == []
    # a priority update at or below the previous one: a regression the guard drops
    await node.send(codec.encode_priority(full(1, 21)))
    await node.send(codec.encode_priority(full(1, 20)))
    await until(lambda: node.of(Report, 0), "the report")
    report = node.of(Report, 0)[0]
    assert report == Report(req=report.req, regressions=1, gaps=0, last=("XT:S1", 1, 21, 1, 20))
    await until(lambda: c.stats.glass_reports == 1, "its ACK")
    await asyncio.sleep(0.3)
    assert len(node.of(Report, 0)) == 1, "sent again though nothing moved"
    # the next connection's counts start at 0: nothing to report there
    await c.close()


async def test_no_report_on_a_node_that_knows_none_after_the_first(node: SessionNode) -> None:
    node.unknown = {"report"}
    c = TerminalClient(node.url)
    c.upkeep.report_every_s = 0.05
    await asyncio.wait_for(c.connect(), 10)
    await c.subscribe(KEYS[:2])
    await node.send(codec.encode_priority(full(1, 21)))
    await node.send(codec.encode_priority(full(1, 20)))
    await until(lambda: node.of(Report, 0), "the report")
    await asyncio.sleep(0.3)
    assert len(node.of(Report, 0)) == 1 and c.upkeep.glass.stopped
    await c.close()
