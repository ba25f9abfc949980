"""The SDK's glass report against the real node: what the terminal's guard dropped reaches the
node's counters and ``GET /admin/glass``; a report the node rate-limits is sent again on a later
turn; a healthy terminal sends none. The node never sends a regression, so the test plays one:
it feeds the terminal's screen the records a buggy node would have sent."""

from __future__ import annotations

import asyncio
import json

import pytest

from monotape import metric_names as m
from monotape.loadgen.launch import sum_samples
from monotape.platform.sdk.client import TerminalClient
from monotape.platform.wire import codec
from monotape.platform.wire.codes import ErrorCode
from tests.conftest import RunningServer, ServerFactory, until

pytestmark = [pytest.mark.e2e]


def glass_counters(server: RunningServer) -> tuple[float, float, float]:
    samples = server.metrics()
    return (
        sum_samples(samples, m.GLASS_REGRESSIONS),
        sum_samples(samples, m.GLASS_GAPS),
        sum_samples(samples, m.GLASS_REGRESSING_TERMINALS),
    )


def record(iid: int, seq: int, *, base_seq: int | None = None) -> codec.Record:
    has_base = base_seq is not None
    return codec.Record(iid, 9, seq, has_base, 9 if has_base else 0, base_seq or 0, 1, 2, 1, 10)


async def test_what_the_guard_dropped_reaches_the_node(server_factory: ServerFactory) -> None:
    server = server_factory.start()
    c = TerminalClient(server.bare_url)
    c.upkeep.report_every_s = 1.0  # the node takes one report per 5 s: some are refused
    auth = {"Authorization": f"Bearer {server.mint(sub='desk-7')}"}
    await asyncio.wait_for(c.connect(additional_headers=auth), 20)
    assert c.hello is not None
    keys = [i.key for i in c.hello.instruments[:3]]
    await c.subscribe(keys)
    await until(lambda: set(keys) <= set(c.view), "the snapshots")
    await asyncio.sleep(2.5)  # a few report turns: a healthy terminal reports nothing
    assert c.stats.glass_reports == 0 and glass_counters(server) == (0, 0, 0)

    # a priority update below the previous one: a regression the guard drops
    off_list = c.hello.instruments[50]
    c.screen.receive(codec.PriorityUpdate(record(off_list.iid, 1_000_001)))
    c.screen.receive(codec.PriorityUpdate(record(off_list.iid, 1_000_000)))
    await until(lambda: c.stats.glass_reports == 1, "the first report")
    assert glass_counters(server) == (1, 0, 1)
    glass = json.loads(server.http("/admin/glass", server.admin_token))
    last = glass["last"]
    assert (last["subject"], last["key"], last["held"], last["got"]) == (
        "desk-7",
        off_list.key,
        [9, 1_000_001],
        [9, 1_000_000],
    )

    # a delta on a base the chain does not hold: a gap, reported cumulatively; the turns
    # inside the node's 5 s are refused (RATE_LIMITED) and the report goes again
    c.screen.receive(codec.Frame(1, [record(c.ids[keys[0]], 5, base_seq=4)]))
    await until(lambda: c.stats.glass_reports == 2, "the second report", timeout_s=30)
    assert glass_counters(server) == (1, 1, 1)
    limited = f"{int(ErrorCode.RATE_LIMITED)}: "  # the ERROR's code, as the error log shows it
    assert any(line.startswith(limited) for line in c.stats.error_log), list(c.stats.error_log)
    await c.close()
