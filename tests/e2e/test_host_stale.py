"""STALE for a venue on the multi-process host: the sequencer judges feed liveness from the
batches (and header-only beats) it hears (core/feed_liveness.py); when every handler of the
venues goes silent (both feed processes stopped with SIGSTOP) the terminals are told STALE, and
it clears when the handlers are heard again. Bounds are generous (a busy 2-core box)."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from typing import Any

import pytest

from monotape.platform.sdk.client import TerminalClient
from tests.conftest import RunningServer, ServerFactory, until

pytestmark = [pytest.mark.e2e]


def _processes(node: RunningServer) -> dict[str, dict[str, Any]]:
    req = urllib.request.Request(node.admin_url + "/admin/processes")
    req.add_header("Authorization", f"Bearer {node.admin_token}")
    with urllib.request.urlopen(req, timeout=10) as r:
        body: dict[str, Any] = json.loads(r.read())
    return {row["name"]: row for row in body["processes"]}


async def test_silent_handlers_make_their_venues_stale_and_a_beat_clears_them(
    server_factory: ServerFactory,
) -> None:
    node = server_factory.start("--writers", "1", "--rate", "4000")
    client = TerminalClient(node.url)
    hello = await client.connect()
    keys = [i.key for i in hello.instruments[::40]]
    await client.subscribe(keys)
    await until(lambda: client.stats.frames > 10, "frames")
    assert not any(client.stale(k) for k in keys)
    pids = [row["pid"] for name, row in _processes(node).items() if name.startswith("handler")]
    assert len(pids) == 2
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        await until(lambda: all(client.stale(k) for k in keys), "every venue told stale", 10)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    await until(lambda: not any(client.stale(k) for k in keys), "the venues cleared", 10)
    assert client.stats.regressions == 0
    log = "".join(node.output)
    assert '"venue_stale"' in log and '"venue_fresh"' in log
    await client.close()
