"""The glass audit against the real node: terminals report what their guards dropped (``report``),
the node counts it (capped per connection, distinct terminals), names the last offender at
``GET /admin/glass`` and rate-limits the reports (docs/wire.md, report)."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from monotape import metric_names as m
from monotape.loadgen.launch import sum_samples
from monotape.platform.core.glass import REPORT_CAP
from monotape.platform.wire import codec
from monotape.platform.wire.codes import ErrorCode
from monotape.platform.wire.requests import Report, encode_request
from tests.conftest import RunningServer, ServerFactory

pytestmark = [pytest.mark.e2e]


async def _terminal(server: RunningServer, sub: str) -> ClientConnection:
    ws = await websockets.connect(
        server.bare_url,
        additional_headers={"Authorization": f"Bearer {server.mint(sub=sub)}"},
        compression=None,
        open_timeout=20,
    )
    assert isinstance(codec.decode_message(await ws.recv(decode=False)), codec.Hello)
    return ws


async def _answer(ws: ClientConnection, req: int) -> codec.Ack | codec.Error:
    """The ACK or ERROR of ``req`` (frames and heartbeats in between are skipped)."""
    while True:
        msg = codec.decode_message(await asyncio.wait_for(ws.recv(decode=False), 20))
        if isinstance(msg, codec.Ack | codec.Error) and msg.req == req:
            return msg


def _glass(server: RunningServer) -> tuple[float, float, float]:
    samples = server.metrics()
    return (
        sum_samples(samples, m.GLASS_REGRESSIONS),
        sum_samples(samples, m.GLASS_GAPS),
        sum_samples(samples, m.GLASS_REGRESSING_TERMINALS),
    )


async def test_reports_raise_the_counters_and_the_admin_api_names_the_offender(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start()
    assert _glass(server) == (0, 0, 0)  # every series exists from the start
    desk = await _terminal(server, "desk-7")
    await desk.send(
        encode_request(Report(req=1, regressions=2, gaps=1, last=("XNAS:AAPL", 7, 1001, 7, 998)))
    )
    assert isinstance(await _answer(desk, 1), codec.Ack)
    assert _glass(server) == (2, 1, 1)
    glass = json.loads(server.http("/admin/glass", server.admin_token))
    assert glass["regressions"] == 2 and glass["regressing_terminals"] == 1
    last = glass["last"]
    assert (last["subject"], last["key"], last["held"], last["got"]) == (
        "desk-7",
        "XNAS:AAPL",
        [7, 1001],
        [7, 998],
    )
    assert last["regressions"] == 2 and last["wall_s"] > 1.7e9

    # sooner than 5 s after the last accepted report: RATE_LIMITED, not counted
    await desk.send(encode_request(Report(req=2, regressions=50, gaps=1)))
    limited = await _answer(desk, 2)
    assert isinstance(limited, codec.Error) and limited.code == ErrorCode.RATE_LIMITED
    assert _glass(server) == (2, 1, 1)
    assert desk.state is websockets.protocol.State.OPEN  # a rate-limited report is not a close
    await desk.close()


async def test_one_hostile_terminal_is_capped_and_counts_as_one_terminal(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start()
    hostile = await _terminal(server, "mallory")
    huge = 2**64 - 1
    await hostile.send(encode_request(Report(req=1, regressions=huge, gaps=huge)))
    assert isinstance(await _answer(hostile, 1), codec.Ack)
    assert _glass(server) == (REPORT_CAP, REPORT_CAP, 1)
    await asyncio.sleep(5.2)  # past the rate limit: the cap is per connection, not per report
    await hostile.send(encode_request(Report(req=2, regressions=huge, gaps=huge)))
    assert isinstance(await _answer(hostile, 2), codec.Ack)
    assert _glass(server) == (REPORT_CAP, REPORT_CAP, 1)
    glass = json.loads(server.http("/admin/glass", server.admin_token))
    assert glass["last"]["subject"] == "mallory" and glass["last"]["key"] is None
    await hostile.close()
