"""A real ``monotape run`` with the native writer on, and with it off (``--no-native-writer``):
the start-up line and the gauge say which path is in use, and the same client check passes on
both: every message parses, frame numbers only go up, no version ever goes back, the SDK's own
guard drops nothing, and no terminal is torn down while they all read."""

from __future__ import annotations

import asyncio
import random
import re
import time

import pytest

from monotape import metric_names as m
from monotape.platform.sdk.client import TerminalClient
from monotape.platform.wire import codec
from monotape.platform.wire.requests import SetPriority, Subscribe, encode_request
from tests.conftest import RunningServer, ServerFactory, until
from tests.server.test_native_writer import (
    Terminal,
    _need_native,
    check_stream,
    connect,
    messages,
)

pytestmark = [pytest.mark.e2e]

TERMINALS = 40
FRAMES = 40  # frames every terminal must see: counted, never timed


async def _client_check(server: RunningServer) -> None:
    path = f"/?token={server.token}"
    terms: list[Terminal] = [await connect(server.ws_port, path=path) for _ in range(TERMINALS)]
    await until(lambda: all(messages(bytes(t.data), whole=False) for t in terms), "hello")
    hello = codec.decode_message(messages(bytes(terms[0].data), whole=False)[0])
    assert isinstance(hello, codec.Hello)
    keys = [inst.key for inst in hello.instruments]
    rng = random.Random(3)
    for i, term in enumerate(terms):
        watchlist = rng.sample(keys, rng.randint(5, 250))
        term.send(encode_request(Subscribe(req=1, keys=watchlist)))
        if i % 8 == 0:  # order tickets: the priority path
            term.send(encode_request(SetPriority(req=2, keys=watchlist[:3])))
    sdk = TerminalClient(server.url)
    await sdk.connect()
    await sdk.subscribe(keys[:200])

    def frames(term: Terminal) -> int:
        return check_stream(bytes(term.data), whole=False)["Frame"]

    await until(lambda: all(frames(t) >= FRAMES for t in terms), f"{FRAMES} frames each", 90.0)
    for term in terms:
        assert not term.lost
        kinds = check_stream(bytes(term.data), whole=False)
        assert kinds["Hello"] == 1 and kinds["Snapshot"] >= 1
    assert sdk.stats.frames > 0
    assert sdk.stats.regressions == 0 and sdk.stats.gaps == 0
    # nobody left while they were all reading: no write error, no teardown of any kind
    assert await asyncio.to_thread(server.metric_sum, m.DISCONNECTS) == 0
    await sdk.close()
    for term in terms:
        assert term.transport is not None
        term.transport.close()


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_the_same_client_check_passes_on_both_paths(
    server_factory: ServerFactory, native: bool
) -> None:
    if native:
        _need_native()
    server = server_factory.start(*(() if native else ("--no-native-writer",)))
    banner = "".join(server.output)
    line = re.search(r"writer\s+(.*)", banner)
    assert line is not None, banner
    if native:
        assert line.group(1).startswith("native"), line.group(1)
    else:
        assert line.group(1).startswith("python (native writer switched off)"), line.group(1)
    assert server.metric_sum(m.NATIVE_WRITER) == (1.0 if native else 0.0)
    asyncio.run(_client_check(server))
    # the counter is exported (a counter family drops its _total), and no terminal here
    # went without its entry
    assert m.NATIVE_UNATTACHED.removesuffix("_total") in server.metric_families()
    assert server.metric_sum(m.NATIVE_UNATTACHED) == 0.0
    # and when they all leave at once, each is named as on the other path: the SDK's close
    # "closed", the raw sockets' FIN (then a reset, for frames still coming) "connection_lost"
    deadline = time.monotonic() + 60.0
    while server.metric_sum(m.DISCONNECTS) < TERMINALS + 1:
        assert time.monotonic() < deadline, "not every terminal was torn down"
        time.sleep(0.2)
    assert server.metric_sum(m.DISCONNECTS, reason="closed") == 1
    assert server.metric_sum(m.DISCONNECTS, reason="connection_lost") == TERMINALS
