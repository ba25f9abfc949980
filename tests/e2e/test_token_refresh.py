"""Token refresh against the real node: a terminal whose tokens live 3 s each stays connected
through three refreshes; one that does not refresh is closed with 1008 and a jittered hint
(docs/wire.md, refresh). Nothing here asserts how fast: the refreshes leave 2 s of margin."""

from __future__ import annotations

import asyncio

import pytest
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from monotape import metric_names as m
from monotape.platform.wire import codec
from monotape.platform.wire.codes import ErrorCode
from monotape.platform.wire.requests import Refresh, encode_request
from tests.conftest import RunningServer, ServerFactory

pytestmark = [pytest.mark.e2e]

TTL_S = 3  # each token's lifetime: the session outlives every one of them


async def _terminal(server: RunningServer, token: str) -> ClientConnection:
    ws = await websockets.connect(
        server.bare_url,
        additional_headers={"Authorization": f"Bearer {token}"},
        compression=None,
        open_timeout=20,
    )
    assert isinstance(codec.decode_message(await ws.recv(decode=False)), codec.Hello)
    return ws


async def _answer(ws: ClientConnection, req: int) -> codec.Ack | codec.Error:
    while True:
        msg = codec.decode_message(await asyncio.wait_for(ws.recv(decode=False), 20))
        if isinstance(msg, codec.Ack | codec.Error) and msg.req == req:
            return msg


async def _expiry_close(ws: ClientConnection) -> tuple[codec.Close, int]:
    """Wait for the expiry: the CLOSE message, then the close frame's code."""
    close: codec.Close | None = None
    try:
        while True:
            msg = codec.decode_message(await asyncio.wait_for(ws.recv(decode=False), 30))
            if isinstance(msg, codec.Close):
                close = msg
    except ConnectionClosed as exc:
        assert close is not None, "closed without a CLOSE message"
        assert exc.rcvd is not None
        return close, exc.rcvd.code


async def test_a_terminal_refreshes_three_times_without_reconnecting(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start()
    ws = await _terminal(server, server.mint(ttl_s=TTL_S))
    for req in (1, 2, 3):
        await asyncio.sleep(1.0)
        await ws.send(encode_request(Refresh(req=req, token=server.mint(ttl_s=TTL_S))))
        answer = await _answer(ws, req)
        assert isinstance(answer, codec.Ack), answer
    await asyncio.sleep(1.5)  # past the first token's 3 s (and the second's)
    # still the same connection: a 4th refresh is answered on it
    await ws.send(encode_request(Refresh(req=4, token=server.mint(ttl_s=TTL_S))))
    assert isinstance(await _answer(ws, 4), codec.Ack)
    assert server.metric_sum(m.DISCONNECTS, reason="auth_expired") == 0

    # a token of another subject, or with wider claims: TOKEN_REJECTED, the session goes on
    for req, token in ((5, server.mint(sub="someone-else")), (6, server.mint(admin=True))):
        await ws.send(encode_request(Refresh(req=req, token=token)))
        rejected = await _answer(ws, req)
        assert isinstance(rejected, codec.Error) and rejected.code == ErrorCode.TOKEN_REJECTED
    # and then it stops refreshing: closed at its last token's expiry, with a jittered hint
    close, code = await _expiry_close(ws)
    assert code == 1008 and close.code == 1008 and close.reason == "token expired"
    assert 500 <= close.reconnect_after_ms <= 5000


async def test_terminals_that_do_not_refresh_are_closed_with_different_hints(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start()
    # minted together, expiring together: what a fixed hint turned into a reconnect storm
    terminals = [await _terminal(server, server.mint(ttl_s=2)) for _ in range(4)]
    closes = await asyncio.gather(*(_expiry_close(ws) for ws in terminals))
    hints = [close.reconnect_after_ms for close, _ in closes]
    assert all(code == 1008 for _, code in closes)
    assert all(500 <= h <= 5000 for h in hints), hints
    assert len(set(hints)) > 1, f"the same hint for every terminal: {hints}"
    assert server.metric_sum(m.DISCONNECTS, reason="auth_expired") == 4
