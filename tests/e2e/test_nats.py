"""`monotape run --nats`: the feed handlers publish to a real nats-server, the sequencer
subscribes, and terminals see the tape exactly as with the in-process bus."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict

import pytest

from monotape import metric_names as m
from monotape.platform.sdk.client import Quote, TerminalClient
from tests.conftest import ServerFactory

pytestmark = [pytest.mark.e2e]


async def test_the_tape_through_nats(server_factory: ServerFactory, nats_url: str) -> None:
    server = server_factory.start("--rate", "4000", "--nats", nats_url, "--restart-every", "3")
    seen: dict[str, list[tuple[int, int]]] = defaultdict(list)

    def record(q: Quote) -> None:
        seen[q.key].append(q.version)

    client = TerminalClient(server.url, on_render=record)
    hello = await client.connect()
    keys = [i.key for i in hello.instruments[:60]]
    await client.subscribe(keys)
    await asyncio.sleep(8)
    await client.close()

    assert client.stats.regressions == 0 and client.stats.gaps == 0
    assert sum(len(v) for v in seen.values()) > 100
    for key, versions in seen.items():
        assert all(a[1] < b[1] for a, b in itertools.pairwise(versions)), key
    metrics = server.metrics()
    received = sum(
        v for (name, _), v in metrics.items() if name == m.NATS_BUS_PREFIX + "received_ticks_total"
    )
    assert received > 0, "nothing came through NATS"
    assert server.metric_sum(m.TICKS_ADMITTED) > 0
    assert server.metric_sum(m.SEQUENCE_REGRESSIONS) > 0  # both handlers' copies crossed the bus
