"""The endpoint's token-expiry timer on fake clocks: armed where the session says, re-armed when
it fires before the wall clock reaches ``exp``, and never more than a bounded number of times."""

from __future__ import annotations

import asyncio
from asyncio import TimerHandle
from collections.abc import Callable

import pytest

from monotape.clock import FakeClock
from monotape.config import ServerConfig
from monotape.platform.core.disconnect import Close, Disconnect
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.core.session import EXPIRY_RECHECK_S, EXPIRY_SLACK_NS, Session
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.server.connection import Connection
from monotape.platform.server.endpoint import FanoutServer
from tests.server.fakes import fake_ws
from tests.server.test_priority_stage import FakeTransport

S = 1_000_000_000
TTL_S = 600


class SteppedClock:
    """A monotonic clock and a wall clock a test moves apart: the wall one may be stepped back."""

    def __init__(self) -> None:
        self.mono_ns = 5 * S
        self.wall = 1_764_460_800 * S

    def now_ns(self) -> int:
        return self.mono_ns

    def wall_ns(self) -> int:
        return self.wall

    def advance(self, ns: int, *, wall_step_ns: int = 0) -> None:
        self.mono_ns += ns
        self.wall += ns + wall_step_ns


class Desk:
    """One terminal with a token on a server on the fake clocks; ``fire`` lets its expiry
    timer fire, the wall clock stepped by ``wall_step_ns`` meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.clock = clock = SteppedClock()
        universe = build_universe(venues=1, instruments=4, seed=1)
        self.server = FanoutServer(ServerConfig(), universe, Sequencer(1), clock)
        self.closes: list[Close] = []
        self.armed: list[float] = []  # the delay of every timer armed, in order
        loop = asyncio.get_running_loop()
        call_later = loop.call_later

        def armed(delay: float, callback: Callable[[int], None], conn_id: int) -> TimerHandle:
            self.armed.append(delay)
            return call_later(delay, callback, conn_id)

        def close_later(conn: Connection, close: Close) -> None:  # the handshake: not here
            self.closes.append(close)

        monkeypatch.setattr(loop, "call_later", armed)
        monkeypatch.setattr(self.server.terminals, "close_later", close_later)
        wall_s = clock.wall_ns() / 1e9
        session = Session(
            1,
            self.server.rules,
            self.server.index,
            opened_ns=clock.now_ns(),
            opened_wall_s=wall_s,
            expires_at_s=wall_s + TTL_S,
            subject="desk-1",
        )
        ws = fake_ws(FakeTransport(FakeClock()))  # nothing is written to it
        self.conn = Connection(
            1, ws, outbox_frames=8, high_water=1 << 16, opened_ns=0, session=session
        )
        self.server.terminals.admit(self.conn)
        self.deadline_ns = clock.now_ns() + TTL_S * S
        self.server._arm_expiry(self.conn)

    def fire(self, wall_step_ns: int) -> float:
        """The armed timer fires on the fake clocks (the loop's own is real: it is cancelled);
        returns the delay it was armed with."""
        timer = self.conn.expiry
        assert timer is not None and not timer.cancelled()
        timer.cancel()
        delay = self.armed[-1]
        self.clock.advance(round(delay * S), wall_step_ns=wall_step_ns)
        self.server._expire(self.conn.conn_id)
        return delay


async def test_a_timer_that_fires_before_the_wall_clock_says_exp_rearms_once_then_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    desk = Desk(monkeypatch)
    assert desk.fire(wall_step_ns=-5 * S) == TTL_S
    assert desk.closes == [] and len(desk.armed) == 2  # 5 s to go by the wall: re-armed
    assert desk.fire(wall_step_ns=0) == 5.0
    assert len(desk.closes) == 1 and desk.closes[0].reason is Disconnect.AUTH_EXPIRED
    assert len(desk.armed) == 2


async def test_a_wall_clock_stepped_back_at_every_firing_rearms_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    desk = Desk(monkeypatch)
    while not desk.closes:
        # each time the timer fires, the wall clock has been stepped back an hour
        desk.fire(wall_step_ns=-3_600 * S)
        assert len(desk.armed) <= EXPIRY_SLACK_NS / S / EXPIRY_RECHECK_S + 2, "without bound"
    assert desk.closes[0].reason is Disconnect.AUTH_EXPIRED
    assert desk.clock.now_ns() - desk.deadline_ns == EXPIRY_SLACK_NS
    # the deadline, then straight to the end of the slack: not one look per second
    assert desk.armed == [TTL_S, EXPIRY_SLACK_NS / S]


async def test_a_wall_clock_creeping_back_rearms_no_sooner_than_the_recheck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    desk = Desk(monkeypatch)
    desk.fire(wall_step_ns=-10_000_000)  # 10 ms to go by the wall
    back = -round(EXPIRY_RECHECK_S * S) - 10_000_000
    while not desk.closes:
        # and each later look, the wall clock was stepped back just past it: by the wall,
        # exp is always a moment away
        desk.fire(wall_step_ns=back)
        assert len(desk.armed) <= EXPIRY_SLACK_NS / S / EXPIRY_RECHECK_S + 2, "without bound"
    assert min(desk.armed[1:]) == EXPIRY_RECHECK_S  # never a busy loop
    assert desk.clock.now_ns() - desk.deadline_ns <= EXPIRY_SLACK_NS + EXPIRY_RECHECK_S * S
