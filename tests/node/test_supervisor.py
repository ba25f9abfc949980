"""The supervisor: a loop that died is started again; one that keeps dying, or cannot be
restarted, stops the node with the reason; a node on its way out restarts nothing."""

from __future__ import annotations

import asyncio

from monotape.clock import FakeClock
from monotape.platform.role.failures import StageFailures
from monotape.platform.role.supervisor import MAX_RESTARTS, RESTART_WINDOW_NS, Supervisor
from tests.conftest import until


class Loops:
    """Loops that die on demand, counting their starts."""

    def __init__(self, deaths: int) -> None:
        self.deaths = deaths  # how many starts die before one keeps running
        self.starts = 0
        self.forever = asyncio.Event()

    async def flaky(self) -> None:
        self.starts += 1
        if self.starts <= self.deaths:
            raise RuntimeError(f"death {self.starts}")
        await self.forever.wait()

    async def once(self) -> None:
        raise RuntimeError("not restartable")


def _supervisor(clock: FakeClock, stopped: asyncio.Event) -> tuple[Supervisor, list[str]]:
    reasons: list[str] = []
    sup = Supervisor(
        StageFailures(clock.now_ns, log=lambda *a, **k: None),
        clock.now_ns,
        stopped=stopped.is_set,
        on_give_up=reasons.append,
    )
    return sup, reasons


async def test_a_loop_that_died_is_started_again() -> None:
    clock, stopped = FakeClock(), asyncio.Event()
    sup, reasons = _supervisor(clock, stopped)
    loops = Loops(deaths=2)
    sup.start([loops.flaky()], [loops.flaky])
    await until(lambda: loops.starts == 3, "the third start")
    assert sup.restartable() == {"Loops.flaky": loops.flaky}
    assert reasons == []
    assert sup._failures.counts == {"supervisor": 2}
    assert [t.get_name() for t in sup.tasks] == ["Loops.flaky"]  # the dead ones are gone
    await sup.cancel_all()


async def test_a_loop_that_keeps_dying_gives_up_with_the_reason() -> None:
    clock, stopped = FakeClock(), asyncio.Event()
    sup, reasons = _supervisor(clock, stopped)
    loops = Loops(deaths=MAX_RESTARTS + 1)
    sup.start([loops.flaky()], [loops.flaky])
    await until(lambda: bool(reasons), "the supervisor gave up")
    assert loops.starts == MAX_RESTARTS + 1
    [reason] = reasons
    assert reason.startswith(f"Loops.flaky died {MAX_RESTARTS + 1} times in 60 s")
    assert f"death {MAX_RESTARTS + 1}" in reason
    await sup.cancel_all()


class Killable:
    """A loop that runs until it is told to die."""

    def __init__(self) -> None:
        self.starts = 0
        self.kill = asyncio.Event()

    async def run(self) -> None:
        self.starts += 1
        await self.kill.wait()
        self.kill.clear()
        raise RuntimeError(f"killed at start {self.starts}")


async def _kill(loop: Killable) -> None:
    starts = loop.starts
    loop.kill.set()
    await until(lambda: loop.starts == starts + 1 or not loop.kill.is_set(), "the kill landed")
    await asyncio.sleep(0.01)


async def test_restarts_older_than_the_window_do_not_count() -> None:
    clock, stopped = FakeClock(), asyncio.Event()
    sup, reasons = _supervisor(clock, stopped)
    loop = Killable()
    sup.start([loop.run()], [loop.run])
    for _ in range(MAX_RESTARTS):
        await _kill(loop)
    assert loop.starts == MAX_RESTARTS + 1 and reasons == []
    clock.advance(RESTART_WINDOW_NS)  # a minute later the budget is whole again
    await _kill(loop)
    assert loop.starts == MAX_RESTARTS + 2 and reasons == []
    for _ in range(MAX_RESTARTS - 1):
        await _kill(loop)
    assert reasons == []
    await _kill(loop)  # the sixth death inside one minute
    assert len(reasons) == 1 and "times in 60 s" in reasons[0]
    await sup.cancel_all()


async def test_a_loop_that_cannot_be_restarted_gives_up_at_once() -> None:
    clock, stopped = FakeClock(), asyncio.Event()
    sup, reasons = _supervisor(clock, stopped)
    loops = Loops(deaths=0)
    sup.start([loops.once()], [])
    await until(lambda: bool(reasons), "the supervisor gave up")
    assert reasons[0].startswith("Loops.once not restartable: RuntimeError")
    await sup.cancel_all()


async def test_a_stopping_node_restarts_nothing() -> None:
    clock, stopped = FakeClock(), asyncio.Event()
    sup, reasons = _supervisor(clock, stopped)
    loops = Loops(deaths=1)
    stopped.set()
    sup.start([loops.flaky()], [loops.flaky])
    await asyncio.sleep(0.05)
    assert loops.starts == 1 and reasons == []
    assert sup._failures.counts == {}
    await sup.cancel_all()
