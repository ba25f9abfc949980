"""Admission, hydration timing and the glass cohort on an in-process node."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import websockets

from monotape.platform.admission import TokenBucket
from monotape.platform.node import Node
from monotape.platform.sdk import TerminalClient
from tests.conftest import node_config

S = 1_000_000_000


def test_bucket_admits_the_burst_then_the_rate() -> None:
    bucket = TokenBucket(1200, 2500, now_ns=0)
    assert sum(bucket.take(0) for _ in range(3000)) == 2500  # the burst, then nothing
    assert sum(bucket.take(S) for _ in range(3000)) == 1200  # one second refills 1,200
    assert bucket.rejected == 500 + 1800
    assert all(2 <= bucket.retry_after_s() <= 5 for _ in range(100))  # 1-2x the 2.08 s refill


def test_bucket_never_exceeds_its_burst() -> None:
    bucket = TokenBucket(10, 5, now_ns=0)
    bucket.take(3600 * S)
    assert bucket.tokens == 4.0


async def test_storm_gets_503_with_retry_after_and_hydration_and_glass_are_measured(
    tmp_path: Path,
) -> None:
    cfg = node_config(
        tmp_path,
        {
            "simulator.rate": 2000,
            "server.admission_rate_per_s": 1,
            "server.admission_burst": 5,
            "server.glass_share": 1.0,
            "server.glass_interval_s": 0.2,
        },
    )
    node = Node(cfg)
    await node.start()
    url = f"ws://127.0.0.1:{node.ws_port}/"
    try:
        results = await asyncio.gather(
            *(websockets.connect(url, compression=None, max_size=2**23) for _ in range(12)),
            return_exceptions=True,
        )
        admitted = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, websockets.InvalidStatus)]
        assert len(admitted) == 5 and len(refused) == 7
        for exc in refused:
            assert exc.response.status_code == 503
            assert int(exc.response.headers["Retry-After"]) >= 1
        assert node.server.gate.rejected["rate"] == 7
        for ws in admitted:
            await ws.close()

        await asyncio.sleep(1.2)  # a token back for the SDK client below
        client = TerminalClient(url)
        hello = await client.connect()
        await client.subscribe([i.key for i in hello.instruments[:40]])
        await asyncio.sleep(0.8)  # a few glass pings
        assert node.server.cohort, "with glass_share 1.0 every connection is in the cohort"
        node.rotate_histograms()
        assert node.latest_latency["hydrate"].count >= 1
        assert node.latest_latency["glass"].count >= 1
        await client.close()
        await asyncio.sleep(0.2)
        assert not node.server.cohort  # teardown cleaned the cohort too
    finally:
        await node.stop()


@pytest.mark.parametrize("share", [0.005, 0.05])
def test_glass_cohort_is_about_the_share(share: float) -> None:
    from monotape.platform.server import _sampled

    n = sum(_sampled(i, share) for i in range(1, 100_001))
    assert abs(n - share * 100_000) < share * 100_000 * 0.2


async def test_admin_api_fails_closed_without_auth(tmp_path: Path) -> None:
    import urllib.error
    import urllib.request

    cfg = node_config(tmp_path, {"simulator.rate": 500})
    node = Node(cfg)
    await node.start()
    try:

        def get(path: str) -> int:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{node.admin_port}{path}") as r:
                    return int(r.status)
            except urllib.error.HTTPError as exc:
                return exc.code

        assert await asyncio.to_thread(get, "/admin/feeds") == 403
        assert await asyncio.to_thread(get, "/healthz") == 200
    finally:
        await node.stop()


async def test_upgrades_are_shed_while_the_event_loop_is_late(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, {"simulator.rate": 500, "server.admission_max_lag_ms": 100})
    node = Node(cfg)
    await node.start()
    url = f"ws://127.0.0.1:{node.ws_port}/"
    try:
        node.loop_lag.last_ns = 250_000_000  # the monitor just saw the loop 250 ms late
        assert node._overloaded()
        node.loop_lag.last_ns = 5_000_000
        assert not node._overloaded()
        late = [True]
        node.server.gate.overloaded = lambda: late[0]  # hold the verdict still for the check
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(url)
        assert refused.value.response.status_code == 503
        assert int(refused.value.response.headers["Retry-After"]) >= 1
        assert node.server.gate.rejected["overloaded"] == 1
        late[0] = False
        ws = await websockets.connect(url, max_size=2**23)
        await ws.close()
    finally:
        await node.stop()
