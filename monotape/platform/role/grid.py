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

``GridCounts`` says how the loop kept the grid: the boundaries it took, and the ones it passed
over because it was late (their ticks went into the next frame, so terminals saw fewer than 25
frames that second). Skipped boundaries are otherwise invisible: no error, no gap, only a tape
that runs below 25 Hz (``monotape_frame_boundaries_skipped_total``, the FrameRateBelowGrid
alert).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from monotape.platform.core.conflation import due_boundary
from monotape.platform.core.snapshots import FailureSink
from monotape.platform.role.rotation import sleep_until

__all__ = ["GridCounts", "run_frame_grid"]


@dataclass(slots=True)
class GridCounts:
    """The frame loop's record of the grid (its one writer), read at scrape time."""

    taken: int = 0  # boundaries the loop took: one frame each (one that raised included)
    skipped: int = 0  # grid boundaries passed over while late, conflated into the next frame


async def run_frame_grid(
    now_ns: Callable[[], int],
    frame_ns: int,
    frame: Callable[[int], object],
    failures: FailureSink,
    counts: GridCounts,
) -> None:
    """Call ``frame(boundary_ns)`` once per boundary, forever; a frame's exception goes to
    ``failures`` (stage ``frame``) and the next boundary comes as usual; ``counts`` counts the
    boundaries taken and skipped."""
    last = 0
    while True:
        boundary = due_boundary(now_ns(), last, frame_ns)
        if boundary > now_ns():
            await sleep_until(now_ns, boundary)
            # woken late: the newest passed boundary, not this one and then the next at once
            boundary = due_boundary(now_ns(), last, frame_ns)
        else:
            await asyncio.sleep(0)
        if last:
            counts.skipped += (boundary - last) // frame_ns - 1
        counts.taken += 1
        last = boundary
        try:
            frame(boundary)
        except Exception as exc:
            failures.record("frame", exc, boundary_ns=boundary)
