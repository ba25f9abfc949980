"""The frame grid: the loop that calls ``frame(boundary)`` at every 40 ms boundary, shared by
the one-process node (``Pipeline.frame_loop``) and the sequencer process
(``SequencerRole.frame_loop``).

Boundaries sit on a fixed grid of the monotonic clock. An overdue one (the last frame overran
its 40 ms, or the loop woke late) is taken at once, after one pass of the loop for pending I/O
(``core.conflation.due_boundary`` says why); lateness never accumulates. An early wake-up
(uvloop's timers fire up to ~1 ms early) waits out the rest: a frame is never taken before its
boundary, and never twice for one boundary. A frame that raises is one frame lost, not the tape:
terminals whose chain it broke see a gap on the next frame and get a snapshot (docs/wire.md),
everyone else carries on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from monotape.platform.core.conflation import due_boundary
from monotape.platform.core.snapshots import FailureSink
from monotape.platform.node.rotation import sleep_until

__all__ = ["run_frame_grid"]


async def run_frame_grid(
    now_ns: Callable[[], int],
    frame_ns: int,
    frame: Callable[[int], object],
    failures: FailureSink,
) -> None:
    """Call ``frame(boundary_ns)`` once per boundary, forever; a frame's exception goes to
    ``failures`` (stage ``frame``) and the next boundary comes as usual."""
    last = 0
    while True:
        boundary = due_boundary(now_ns(), last, frame_ns)
        if boundary > now_ns():
            await sleep_until(now_ns, boundary)
            # woken late: the newest passed boundary, not this one and then the next at once
            boundary = due_boundary(now_ns(), last, frame_ns)
        else:
            await asyncio.sleep(0)
        last = boundary
        try:
            frame(boundary)
        except Exception as exc:
            failures.record("frame", exc, boundary_ns=boundary)
