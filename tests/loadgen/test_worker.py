"""loadgen/worker.py: one worker's terminals against a scripted websockets server on loopback.

The storm e2e tests (tests/e2e/test_storm.py) run the workers against the real node; these
make the server do what the node rarely does (an ERROR, a CLOSE with a hint, a first message
that is not the hello) and check what the worker counts of it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from monotape.loadgen.trace import SessionPlan
from monotape.loadgen.worker import Job, Knobs, WorkerResult, _run
from monotape.platform.wire.codes import ErrorCode, Kind
from monotape.platform.wire.messages import (
    encode_close,
    encode_error,
    encode_frame,
    encode_snapshot,
)
from monotape.platform.wire.requests import Subscribe, decode_request

HELLO = bytes([Kind.HELLO]) + b"dictionary"  # the worker reads the kind only


class _Results:
    """The worker's result queue, in process."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, ...]] = []

    def put(self, item: tuple[Any, ...]) -> None:
        self.items.append(item)


def _job(url: str, plans: list[SessionPlan], duration_s: int = 3) -> Job:
    knobs = Knobs(
        backoff_base_s=0.05,
        backoff_cap_s=0.2,
        open_timeout_s=5.0,
        close_timeout_s=2.0,
        first_frame_timeout_s=10.0,
        settle_s=0.5,
        drain_s=3.0,
        seed=1,
    )
    watchlists = [[f"XNAS:S{i}"] for i in range(len(plans))]
    return Job(
        wid=0, url=url, duration_s=duration_s, knobs=knobs, plans=plans, watchlists=watchlists
    )


async def _replay(handler: Any, plans: list[SessionPlan], duration_s: int = 3) -> WorkerResult:
    async with serve(handler, "127.0.0.1", 0, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        job = _job(f"ws://127.0.0.1:{port}/?token=t", plans, duration_s)
        return await _run(job, time.time(), _Results())  # type: ignore[arg-type]


async def _stream(ws: ServerConnection, first: int = 1) -> None:
    """A snapshot, then a frame every 40 ms until the terminal leaves."""
    await ws.send(encode_snapshot(first, []))
    n = first
    while True:
        n += 1
        await ws.send(encode_frame(n, []))
        await asyncio.sleep(0.04)


async def test_an_error_is_counted_and_a_close_hint_is_honoured() -> None:
    seen: dict[str, Any] = {"connections": 0, "codes": []}
    t_lost: list[float] = []

    async def handler(ws: ServerConnection) -> None:
        seen["connections"] += 1
        first = seen["connections"] == 1
        await ws.send(HELLO)
        seen["subscribe"] = decode_request(await ws.recv())
        if first:
            await ws.send(encode_snapshot(1, []))
            await ws.send(encode_frame(2, []))
            await ws.send(encode_error(ErrorCode.RATE_LIMITED, "slow down"))
            await ws.send(encode_close(4001, 400, "restart"))
            t_lost.append(time.monotonic())
            await ws.close(1012, "restart")
            return
        t_lost.append(time.monotonic())
        try:
            await _stream(ws)
        except ConnectionClosed as exc:
            seen["codes"].append(exc.rcvd.code if exc.rcvd is not None else None)

    r = await _replay(handler, [SessionPlan(0, 0.0, None, False, 1)])
    assert seen["connections"] == 2
    assert seen["subscribe"] == Subscribe(req=1, keys=["XNAS:S0"])
    assert r.lost == 1 and r.attempts == 2 and r.connected_sessions == 1
    assert t_lost[1] - t_lost[0] >= 0.4  # the CLOSE message's reconnect_after_ms
    assert r.errors == 1 and "server error" in r.error_samples[0], r.error_samples
    assert "slow down" in r.error_samples[0]
    assert len(r.first_frame_ms) == 2 and r.first_frame_sessions == 1
    assert r.closed_at_end == 1 and r.cancelled == 0
    assert seen["codes"] == [1000]  # left gracefully at the trace's end


async def test_a_first_message_that_is_not_the_hello_is_an_error() -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.send(encode_frame(1, []))
        await asyncio.sleep(5)

    r = await _replay(handler, [SessionPlan(0, 0.0, None, False, 1)], duration_s=1)
    assert r.errors >= 1
    assert any(f"first message is kind {int(Kind.FRAME)}, not hello" in e for e in r.error_samples)
    assert r.lost >= 1 and r.first_frame_ms == []


async def test_leavers_leave_as_planned_gracefully_or_with_an_rst() -> None:
    closes: dict[int, Any] = {}

    async def handler(ws: ServerConnection) -> None:
        await ws.send(HELLO)
        sub = decode_request(await ws.recv())
        assert isinstance(sub, Subscribe)
        try:
            await _stream(ws)
        except ConnectionClosed as exc:
            closes[int(sub.keys[0].removeprefix("XNAS:S"))] = exc.rcvd

    # they leave at 2 s: time enough to subscribe first on a busy box
    plans = [SessionPlan(0, 0.0, 2.0, False, 1), SessionPlan(1, 0.0, 2.0, True, 1)]
    r = await _replay(handler, plans)
    assert r.graceful == 1 and r.abrupt == 1 and r.errors == 0, r.error_samples
    assert closes[0] is not None and closes[0].code == 1000
    assert closes[1] is None  # an RST: no close frame reached the server
