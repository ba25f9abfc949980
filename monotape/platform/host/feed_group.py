"""The handlers of one feed process on one event loop (issue 12): every venue's A handler
in ``handler-A``, every venue's B handler in ``handler-B`` (host/handler.py says why).

One timer, for the earliest delay-line head among them; per wake-up, each handler's due batch
on the bus; a handler whose step raises is counted and the others still publish.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

from prometheus_client.registry import Collector

from monotape.clock import Clock
from monotape.platform.bus.link import LinkReceiver
from monotape.platform.bus.memory import TickBus
from monotape.platform.host.handler_role import HandlerRole
from monotape.platform.role.collectors import FeedCollector, IngestCollector
from monotape.platform.role.failures import StageFailures
from monotape.platform.wire.batch import TickBatch

__all__ = ["FeedGroup"]


class FeedGroup:
    """The handlers of one process (every venue's A, or every venue's B) on one loop: one
    timer, for the earliest delay-line head among them, and one bus publish per wake-up with
    what every handler has due. ``pump`` is one step (tests call it); ``run`` drives it."""

    def __init__(self, roles: Sequence[HandlerRole], bus: TickBus, clock: Clock) -> None:
        self.roles = list(roles)
        self.bus = bus
        self.clock = clock
        self.failures = StageFailures(clock.now_ns)
        self._wake: asyncio.Event | None = None  # the driver's, while ``run`` runs
        self._timer: asyncio.TimerHandle | None = None  # the driver's wake-up for the head
        self._timer_due = 0  # the head the timer is for (ns), while there is one
        self._turn = 0  # pumps so far: which venue goes first in the next batch
        for role in self.roles:
            role.on_head = self._head_arrived

    @property
    def published(self) -> int:
        return sum(r.published for r in self.roles)

    def start(self) -> None:
        for role in self.roles:
            role.start()

    def pump(self) -> int:
        """Every handler's due updates, a batch per handler (and epoch) on the bus, all stamped
        decoded at one time. A handler that fails is counted and the others still publish (one
        bad venue costs the others nothing)."""
        batches: list[TickBatch] = []
        roles = self.roles
        # Each pump starts at the next venue. A wake-up's batches go as one bus message, or
        # as several in this order when they do not fit one, and when the sequencer's socket
        # is full the later messages are the ones dropped: in a fixed order the same venues
        # would lose every time and freeze (measured at 120k ticks/s on a full 2-core box:
        # ARCX and BATS admitted, four venues ~0), where rotating spreads the loss over every
        # venue.
        first = self._turn % len(roles) if roles else 0
        self._turn += 1
        now = self.clock.now_ns()
        for role in roles[first:] + roles[:first]:
            try:
                batches += role.due(now)
            except Exception as exc:  # contained: the next wake-up pumps as usual
                self.failures.record("pump", exc, venue=role.plan.venue)
        # one message for all of them on the IPC bus (wire/bundle.py): a send and a receive per
        # wake-up instead of one per venue
        self.bus.publish_many(batches)
        return sum(b.count for b in batches)

    def next_due_ns(self) -> int | None:
        """The earliest delay-line head, or liveness beat, of the process's handlers (a handler
        with nothing due still beats: HandlerRole.due, so the process wakes for it)."""
        due: int | None = None
        for role in self.roles:
            handler = role.handler
            if not handler.up:
                continue
            head = handler.next_due_ns
            soonest = role.next_beat_ns if head is None else min(head, role.next_beat_ns)
            if due is None or soonest < due:
                due = soonest
        return due

    def _head_arrived(self, due: int) -> None:
        """A handler's empty delay line got an update due at ``due``: arm for it if that is
        before the timer set (or there is none). Otherwise the timer wakes first, and re-arms.
        One comparison: this runs for most feed messages (a handler's delay line empties
        between its venue's messages), and a scan of every handler here cost more than the
        message."""
        if self._wake is not None and (self._timer is None or due < self._timer_due):
            self._arm(self._wake)

    def _arm(self, wake: asyncio.Event) -> None:
        """The driver's timer: ``wake`` when the earliest head is due (none: no timer)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = self.next_due_ns()
        if due is not None:
            # Whole milliseconds, rounded up: uvloop's timers are whole milliseconds rounded to
            # the nearest, and a head rounded down would wake to nothing due, again and again
            # until it is (the one-process node pumps on a 1 ms step: the same granularity).
            # At least 1 ms: a head still due right after a pump is a handler whose step
            # raised, and a 0 ms timer would spin the process (and its other venues) on it.
            delay_ms = max(1, math.ceil((due - self.clock.now_ns()) / 1e6))
            self._timer_due = due
            self._timer = asyncio.get_running_loop().call_later(delay_ms / 1e3, wake.set)

    def collectors(self) -> list[Collector]:
        gate = self.roles[0].gate
        return [
            FeedCollector(lambda: [r.handler for r in self.roles]),
            IngestCollector(lambda: gate, self.failures),
        ]

    async def run(self, receivers: Sequence[LinkReceiver], stop: asyncio.Event) -> None:
        """Pump when the earliest delay-line head is due, and sleep otherwise: a quiet venue
        does not wake the process every millisecond for nothing, and a due update waits for no
        1 ms poll."""
        loop = asyncio.get_running_loop()
        wake = self._wake = asyncio.Event()
        stopper = loop.create_task(_set_when(stop, wake))
        for receiver in receivers:
            receiver.open()
        try:
            while not stop.is_set():
                self.pump()
                wake.clear()
                self._arm(wake)
                await wake.wait()  # the head is due (on_feed may have set it), or stop
        finally:
            stopper.cancel()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._wake = None
            for receiver in receivers:
                receiver.close()
            for role in self.roles:
                role.handler.stop()


async def _set_when(stop: asyncio.Event, wake: asyncio.Event) -> None:
    await stop.wait()
    wake.set()
