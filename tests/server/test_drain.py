"""The drain's driver at a stop (the node's and a writer's): staggered closes until every
terminal is gone, skipped when there is none or when told to hurry, cut short by a hurry."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec

from monotape.clock import SystemClock
from monotape.config import ServerConfig
from monotape.platform.server.drain import DrainDriver
from monotape.platform.server.terminals import Terminals


@dataclass
class FakeConn:
    closing: bool = False


@dataclass
class FakeTerminals:
    """What the driver touches: the connections, and a close that takes effect at once."""

    connections: dict[int, FakeConn] = field(default_factory=dict)
    closed: list[int] = field(default_factory=list)

    def close_later(self, conn: FakeConn, close: Any) -> None:
        cid = next(c for c, known in self.connections.items() if known is conn)
        del self.connections[cid]
        self.closed.append(cid)


def _driver(terminals: FakeTerminals, **cfg: Any) -> DrainDriver:
    srv = msgspec.structs.replace(
        ServerConfig(), **{"drain_fraction": 0.5, "drain_interval_s": 0.01, **cfg}
    )
    return DrainDriver(srv, SystemClock(), cast(Terminals, terminals))


async def test_a_stop_drains_every_terminal_a_share_at_a_time() -> None:
    terminals = FakeTerminals({cid: FakeConn() for cid in range(4)})
    driver = _driver(terminals)
    await asyncio.wait_for(driver.before_stop(asyncio.Event()), 5)
    assert sorted(terminals.closed) == [0, 1, 2, 3] and not terminals.connections
    assert driver.drain is not None and driver.drain.done


async def test_no_terminals_a_hurry_or_drain_on_stop_off_skip_the_drain() -> None:
    hurry = asyncio.Event()
    empty = _driver(FakeTerminals())
    await empty.before_stop(hurry)
    assert empty.drain is None
    off = _driver(FakeTerminals({1: FakeConn()}), drain_on_stop=False)
    await off.before_stop(hurry)
    assert off.drain is None
    hurry.set()
    hurried = _driver(FakeTerminals({1: FakeConn()}))
    await hurried.before_stop(hurry)
    assert hurried.drain is None


async def test_a_hurry_cuts_a_running_drain_short() -> None:
    terminals = FakeTerminals({cid: FakeConn() for cid in range(100)})
    driver = _driver(terminals, drain_interval_s=10.0)  # one share, then a long wait
    hurry = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, hurry.set)
    await asyncio.wait_for(driver.before_stop(hurry), 5)
    assert 0 < len(terminals.closed) < 100  # the stop closes the rest at once
    driver.cancel()
