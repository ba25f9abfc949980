"""The drain's driver: closes what core/drain.py says to close, when it says so.

A finished drain leaves the node out of rotation (503 to upgrades, /readyz 503) until an
operator resumes it (POST /admin/resume).
"""

from __future__ import annotations

import asyncio
from typing import Any

from monotape.clock import Clock
from monotape.config import ServerConfig
from monotape.log import log_event
from monotape.platform.core.disconnect import Disconnect
from monotape.platform.core.drain import Drain
from monotape.platform.server.terminals import Terminals

__all__ = ["DrainDriver"]


class DrainDriver:
    def __init__(self, cfg: ServerConfig, clock: Clock, terminals: Terminals) -> None:
        self.cfg = cfg
        self.clock = clock
        self.terminals = terminals
        self.drain: Drain | None = None  # set once a drain starts: new upgrades get 503
        self.task: asyncio.Task[None] | None = None

    def start(self) -> bool:
        """Begin a staggered drain of every connection; False if one is already under way."""
        if self.drain is not None:
            return False
        self.drain = Drain(
            self.terminals.connections,
            started_ns=self.clock.now_ns(),
            fraction=self.cfg.drain_fraction,
            interval_ns=int(self.cfg.drain_interval_s * 1e9),
            hint_spread_ms=self.cfg.drain_hint_spread_ms,
        )
        log_event(
            "drain_started",
            connections=self.drain.total,
            per_step=self.drain.batch,
            expected_s=self.drain.expected_duration_ns() / 1e9,
        )
        self.task = asyncio.get_running_loop().create_task(self._run(self.drain))
        return True

    async def _run(self, drain: Drain) -> None:
        clock = self.clock
        connections = self.terminals.connections
        last_log = clock.now_ns()
        while True:
            for cid, hint in drain.step(clock.now_ns()):
                conn = connections.get(cid)
                if conn is None or conn.closing:
                    continue
                self.terminals.close_later(conn, Disconnect.DRAIN.close(reconnect_after_ms=hint))
            if drain.done:
                break
            now = clock.now_ns()
            if now - last_log >= 1_000_000_000:
                last_log = now
                log_event("drain_progress", closed=drain.closed, remaining=drain.remaining)
            await asyncio.sleep(drain.interval_ns / 1e9)
        drain.finished_ns = clock.now_ns()
        log_event(
            "drain_complete",
            closed=drain.closed,
            seconds=round((drain.finished_ns - drain.started_ns) / 1e9, 3),
        )

    async def wait(self, timeout_s: float) -> bool:
        task = self.task
        if task is None:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            return False
        return True

    async def before_stop(self, hurry: asyncio.Event) -> None:
        """A stop's drain (``drain_on_stop``), the node's and a writer's alike: terminals leave
        staggered with reconnect hints while frames keep flowing, not as a storm, until every
        one is closed, ``drain_timeout_s`` has passed, or ``hurry`` is set (a second Ctrl-C or
        SIGTERM, a host that is gone): the rest are then closed at once by the stop."""
        if not (self.cfg.drain_on_stop and self.terminals.connections) or hurry.is_set():
            return
        self.start()
        drained = asyncio.ensure_future(self.wait(self.cfg.drain_timeout_s))
        hurried = asyncio.ensure_future(hurry.wait())
        await asyncio.wait({drained, hurried}, return_when=asyncio.FIRST_COMPLETED)
        for fut in (drained, hurried):
            fut.cancel()
        if hurry.is_set():
            log_event("drain_cut_short", remaining=len(self.terminals.connections))

    def resume(self) -> bool:
        """Take new terminals again after a drain; False if there was no drain; a drain still
        running is stopped where it is."""
        if self.drain is None:
            return False
        if self.task is not None and not self.task.done():
            self.task.cancel()
        log_event("drain_resumed", closed=self.drain.closed, remaining=self.drain.remaining)
        self.drain = None
        self.task = None
        return True

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def status(self) -> dict[str, Any]:
        d = self.drain
        connections = len(self.terminals.connections)
        if d is None:
            return {"draining": False, "connections": connections}
        return {
            "draining": not d.done,
            "drained": d.done,
            "total": d.total,
            "closed": d.closed,
            "remaining": d.remaining,
            "per_step": d.batch,
            "interval_s": d.interval_ns / 1e9,
            "elapsed_s": round(((d.finished_ns or self.clock.now_ns()) - d.started_ns) / 1e9, 3),
            "expected_s": d.expected_duration_ns() / 1e9,
            "connections": connections,
        }
