"""The node's loops as tasks: a loop that died is started again, one that keeps dying stops
the node with the reason.

Each loop contains its own per-iteration failures (``StageFailures``); a loop that still died
is counted as a ``supervisor`` failure and started again, at most ``MAX_RESTARTS`` times per
minute. Past that, restarting is not helping: the node stops and exits non-zero, saying which
loop and why, so whatever supervises the process sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from monotape.log import log_event
from monotape.platform.role.failures import StageFailures

__all__ = ["MAX_RESTARTS", "RESTART_WINDOW_NS", "LoopFactory", "Supervisor"]

MAX_RESTARTS = 5  # a loop that died is started again at most this often per minute...
RESTART_WINDOW_NS = 60 * 1_000_000_000  # ...after that the node exits non-zero, saying why

LoopFactory = Callable[[], Coroutine[Any, Any, None]]


class Supervisor:
    """Runs the loops; ``on_give_up(reason)`` is called once a loop cannot be restarted.
    Pure bookkeeping around ``asyncio.Task``: the clock (``now_ns``) is passed in."""

    def __init__(
        self,
        failures: StageFailures,
        now_ns: Callable[[], int],
        *,
        stopped: Callable[[], bool],
        on_give_up: Callable[[str], None],
    ) -> None:
        self._failures = failures
        self._now_ns = now_ns
        self._stopped = stopped  # a node on its way out lets its loops die unrestarted
        self._on_give_up = on_give_up
        self._restartable: dict[str, LoopFactory] = {}
        self._restarts: dict[str, list[int]] = {}  # task name -> monotonic times restarted
        self.tasks: list[asyncio.Task[None]] = []

    def restartable(self) -> dict[str, LoopFactory]:
        """The loops that may be started again, by task name (the coroutine's qualname)."""
        return dict(self._restartable)

    def start(
        self,
        loops: Iterable[Coroutine[Any, Any, None]],
        restartable: Iterable[LoopFactory],
    ) -> None:
        self._restartable = {loop.__qualname__: loop for loop in restartable}
        # Named by the coroutine's qualname ("Pipeline.frame_loop"): how a restart finds it.
        for coro in loops:
            task = asyncio.create_task(coro, name=getattr(coro, "__qualname__", None))
            task.add_done_callback(self._task_done)
            self.tasks.append(task)

    async def cancel_all(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._stopped():
            return
        exc = task.exception()
        if exc is None:
            return
        name = task.get_name()
        self._failures.record("supervisor", exc, task=name)
        factory = self._restartable.get(name)
        now = self._now_ns()
        recent = [t for t in self._restarts.get(name, []) if now - t < RESTART_WINDOW_NS]
        if factory is not None and len(recent) < MAX_RESTARTS:
            self._restarts[name] = [*recent, now]
            log_event("task_restarted", level="error", task=name, error=repr(exc))
            if task in self.tasks:
                self.tasks.remove(task)
            again = asyncio.get_running_loop().create_task(factory(), name=name)
            again.add_done_callback(self._task_done)
            self.tasks.append(again)
            return
        # Cannot restart it: stop, and exit non-zero with the reason so a supervisor sees it.
        why = "not restartable" if factory is None else f"died {MAX_RESTARTS + 1} times in 60 s"
        log_event("task_failed", level="error", task=name, error=repr(exc), reason=why)
        self._on_give_up(f"{name} {why}: {exc!r}")
