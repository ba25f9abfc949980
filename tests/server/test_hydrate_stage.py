"""The ``hydrate`` stage on the endpoint's driver: one value per (re)subscription, from before
the session applies the subscribe to the index until the snapshot is handed to the socket."""

from __future__ import annotations

import time
from collections.abc import Iterable

import pytest
from websockets.asyncio.client import connect

from monotape.config import ServerConfig
from monotape.histograms import StageRecorder
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.server.endpoint import FanoutServer
from monotape.platform.wire import codec
from monotape.platform.wire.requests import Request, Subscribe, Unsubscribe, encode_request

SUBSCRIBE_NS = 3_000_000_000  # what the index's subscribe costs on the stepped clock


class SteppedClock:
    """The real clocks, plus a monotonic offset a test steps (the cost of a stage, made
    visible however busy the machine is)."""

    def __init__(self) -> None:
        self.offset_ns = 0

    def now_ns(self) -> int:
        return time.monotonic_ns() + self.offset_ns

    def wall_ns(self) -> int:
        return time.time_ns()


async def test_hydrate_counts_the_subscribe_as_well_as_the_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = SteppedClock()
    universe = build_universe(venues=1, instruments=16, seed=1)
    recorder = StageRecorder("hydrate", start_ms=0)
    cfg = ServerConfig(ws_port=0, admission_max_lag_ms=0)
    server = FanoutServer(cfg, universe, Sequencer(1), clock, hydrate=recorder)
    subscribe = SubscriptionIndex.subscribe

    def slow_subscribe(index: SubscriptionIndex, conn: int, iids: Iterable[int]) -> frozenset[int]:
        clock.offset_ns += SUBSCRIBE_NS
        return subscribe(index, conn, iids)

    monkeypatch.setattr(SubscriptionIndex, "subscribe", slow_subscribe)
    port = await server.start()
    try:
        async with connect(f"ws://127.0.0.1:{port}/", compression=None) as ws:
            assert isinstance(codec.decode_message(_binary(await ws.recv())), codec.Hello)
            keys = [inst.key for inst in universe[:3]]
            requests: list[Request] = [Subscribe(1, keys), Unsubscribe(2, keys[:1])]
            for req, request in enumerate(requests, 1):
                await ws.send(encode_request(request))
                msg = codec.decode_message(_binary(await ws.recv()))
                while not isinstance(msg, codec.Ack):  # the snapshot comes before its ACK
                    msg = codec.decode_message(_binary(await ws.recv()))
                assert msg.req == req
    finally:
        await server.stop()
    interval = recorder.rotate(1_000)
    assert interval.count == 1  # the subscribe hydrated; the unsubscribe did not
    # µs in the histogram: at least the subscribe's stepped cost, so the start was taken
    # before the session applied it
    assert interval.histogram.get_min_value() >= SUBSCRIBE_NS // 1_000 * 0.999


def _binary(message: str | bytes) -> bytes:
    assert isinstance(message, bytes)
    return message
