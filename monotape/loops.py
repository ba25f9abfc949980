"""One way to run a process's event loop: on uvloop where it is installed (every Linux install).

The command line (``commands/flags.run_loop``) and every role process of a host
(``platform/host/lifeline.run_role``) run on it, so a writer process moves bytes on the same loop
as the one-process node, and a feed process, which passes through its loop for every venue
batch and every due tick, pays uvloop's pass, not the stdlib loop's dearer one
(docs/processes.md, "Process tree").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["run_loop"]

T = TypeVar("T")


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh uvloop loop (the stdlib loop without uvloop)."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)
