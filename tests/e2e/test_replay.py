"""Adversarial replay through the real server: out-of-order, duplicate, stale-epoch and
restarted-handler ticks from tests/replays/adversarial.ndjson.

Every terminal's version stream per symbol must strictly increase, the sequencer's discarded
counts must equal what the file implies, and a terminal with the symbols in its order ticket
(the priority path, no conflation) must render exactly the versions the admit rule applies.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from monotape import metric_names as m
from monotape.platform.core.admit import APPLIED, VersionGuard
from monotape.platform.feeds.replay import expected_outcome, load_replay
from monotape.platform.sdk.client import Quote, TerminalClient
from tests.conftest import ServerFactory

pytestmark = [pytest.mark.e2e]

REPLAY = Path(__file__).parents[1] / "replays" / "adversarial.ndjson"


async def test_adversarial_replay_never_shows_a_regression(server_factory: ServerFactory) -> None:
    universe, lines = load_replay(REPLAY)
    keys = [i.key for i in universe]
    key_of = {i.iid: i.key for i in universe}
    applied: dict[str, list[tuple[int, int]]] = defaultdict(list)
    guard = VersionGuard()
    for line in lines:
        t = line.tick
        if guard.check(t.iid, (t.epoch, t.seq)) is APPLIED:
            applied[key_of[t.iid]].append((t.epoch, t.seq))

    server = server_factory.start("--replay", str(REPLAY), "--replay-start-delay", "3")
    seen: list[dict[str, list[tuple[int, int]]]] = [defaultdict(list) for _ in range(3)]

    def recorder(i: int) -> Callable[[Quote], None]:
        def record(q: Quote) -> None:
            seen[i][q.key].append(q.version)

        return record

    clients = [TerminalClient(server.url, on_render=recorder(i)) for i in range(3)]
    for c in clients:
        await c.connect()
        await c.subscribe(keys)
    await clients[2].set_priority(keys)
    await asyncio.sleep(5.0)  # 3 s start delay + a ~0.5 s file + margin

    for i, c in enumerate(clients):
        assert c.stats.regressions == 0 and c.stats.gaps == 0
        for key in keys:
            versions = seen[i][key]
            assert versions, f"client {i} never saw {key}"
            assert all(a < b for a, b in itertools.pairwise(versions)), (key, versions)
            assert versions[-1] == applied[key][-1], f"{key} did not end at the newest version"
    # The order-ticket terminal got every applied version, in order, nothing else.
    for key in keys:
        assert seen[2][key] == applied[key], key

    want = expected_outcome(lines)
    got = server.metrics()
    for venue, (n_applied, n_dup, n_reg) in want.items():
        labels = (("venue", venue),)
        assert got[(m.TICKS_ADMITTED, labels)] == n_applied
        assert got[(m.DUPLICATE_TICKS, labels)] == n_dup
        assert got[(m.SEQUENCE_REGRESSIONS, labels)] == n_reg
    for c in clients:
        await c.close()
