"""A browser's upgrade against the real node: the token in the subprotocol list, and refusals it
can read (docs/wire.md, Browsers). websockets' client offers the subprotocols as a browser's
``new WebSocket(url, ["monotape.v2", "bearer." + token])`` does; a client that offers none keeps
the HTTP statuses."""

from __future__ import annotations

import pytest
import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from monotape import metric_names as m
from monotape.platform.wire import codec
from monotape.platform.wire.requests import Subscribe, encode_request
from tests.conftest import ServerFactory

pytestmark = [pytest.mark.e2e]


def _browser(url: str, token: str) -> connect:
    return connect(
        url,
        subprotocols=[Subprotocol("monotape.v2"), Subprotocol(f"bearer.{token}")],
        compression=None,
        open_timeout=20,
    )


async def _refused(ws: ClientConnection) -> tuple[codec.Close, int, str]:
    """The in-band refusal: the CLOSE message (nothing before it: no HELLO), then the close
    frame's code and reason."""
    first = codec.decode_message(await ws.recv(decode=False))
    assert isinstance(first, codec.Close), f"expected CLOSE first, got {first!r}"
    with pytest.raises(ConnectionClosed) as closed:
        await ws.recv(decode=False)
    rcvd = closed.value.rcvd
    assert rcvd is not None, "the server sent no close frame"
    return first, rcvd.code, rcvd.reason


async def test_the_token_rides_in_the_subprotocol_and_is_never_echoed(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start()
    async with _browser(server.bare_url, server.token) as ws:
        assert ws.subprotocol == "monotape.v2"
        assert ws.response is not None
        answered = ws.response.headers.get_all("Sec-WebSocket-Protocol")
        assert answered == ["monotape.v2"], answered  # the bearer entry never comes back
        assert server.token not in str(ws.response.headers)
        hello = codec.decode_message(await ws.recv(decode=False))
        assert isinstance(hello, codec.Hello) and hello.protocol == codec.PROTOCOL_VERSION
        keys = [i.key for i in hello.instruments[:3]]
        await ws.send(encode_request(Subscribe(req=1, keys=keys)))
        while True:
            msg = codec.decode_message(await ws.recv(decode=False))
            if isinstance(msg, codec.Ack):
                assert msg.req == 1 and msg.subscribed == 3
                break
    # the same subprotocols without a token entry: the query parameter still works beside them
    async with websockets.connect(
        server.url, subprotocols=[Subprotocol("monotape.v2")], compression=None
    ) as ws:
        assert ws.subprotocol == "monotape.v2"
        assert isinstance(codec.decode_message(await ws.recv(decode=False)), codec.Hello)


async def test_a_bad_token_is_refused_in_band_with_1008_and_thirty_seconds(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start()
    before = server.metric_sum(m.AUTH_REFUSED)
    async with _browser(server.bare_url, "not.a.jwt") as ws:
        assert ws.subprotocol == "monotape.v2"
        close, code, reason = await _refused(ws)
    assert (close.code, close.reconnect_after_ms) == (1008, 30_000)
    assert close.reason.startswith("unauthorized: ")
    assert code == 1008 and reason.endswith("; reconnect_after_ms=30000")
    # counted as the HTTP 401 is
    assert server.metric_sum(m.AUTH_REFUSED) == before + 1
    # a client that does not offer monotape.v2 keeps the HTTP status
    with pytest.raises(InvalidStatus) as refused:
        async with websockets.connect(
            server.bare_url, additional_headers={"Authorization": "Bearer not.a.jwt"}
        ):
            pass
    assert refused.value.response.status_code == 401
    assert server.metric_sum(m.AUTH_REFUSED) == before + 2


async def test_a_drain_refusal_arrives_as_1013_with_the_retry_after_as_hint(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start()
    server.post("/admin/drain", server.admin_token)  # out of rotation until resumed
    before = server.metric_sum(m.ADMISSION_REJECTED, reason="draining")
    async with _browser(server.bare_url, server.token) as ws:
        close, code, reason = await _refused(ws)
    assert close.code == 1013 and code == 1013
    # Retry-After is a jittered 1-5 s while draining: the hint is the same, in ms
    assert close.reconnect_after_ms in {1000, 2000, 3000, 4000, 5000}
    assert close.reason.startswith("draining")
    assert reason.endswith(f"; reconnect_after_ms={close.reconnect_after_ms}")
    assert server.metric_sum(m.ADMISSION_REJECTED, reason="draining") == before + 1
    with pytest.raises(InvalidStatus) as refused:
        async with websockets.connect(server.url):
            pass
    assert refused.value.response.status_code == 503
    assert refused.value.response.headers["Retry-After"] in {"1", "2", "3", "4", "5"}
