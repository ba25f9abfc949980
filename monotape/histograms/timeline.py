"""Per-interval stage percentiles with the GC pauses of each interval overlaid: the body of
GET /admin/latency/timeline (design: Admin API).

Slots are the 10 s rotation grid of the wall clock (``query.timeline``); a pause goes to the slot
its start lies in, the same window rule as the intervals, so every pause is listed once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import msgspec

from .gc import GcMonitor, GcPause
from .log import PathLike
from .query import Percentiles, timeline
from .stages import STAGES

__all__ = ["timeline_rows", "timeline_with_gc"]


def timeline_with_gc(
    hdr_dir: PathLike | Iterable[PathLike],
    start_ms: int,
    end_ms: int,
    gc_monitor: GcMonitor | None,
    stages: Iterable[str] = STAGES,
    *,
    step_ms: int = 10_000,
) -> list[dict[str, Any]]:
    """One dict per ``step_ms`` slot of [start_ms, end_ms), in time order::

        {"start_ms": ..., "end_ms": ...,
         "stages": {stage: Percentiles as a dict, ...},   # stages with an interval in the slot
         "gc_pauses": [{"generation": 2, "start_ms": ..., "duration_ms": 4.2}, ...]}

    A slot is listed when it holds a latency interval or a pause (a pause with no traffic
    around it is still worth seeing).
    """
    rows = timeline_rows(hdr_dir, start_ms, end_ms, stages, step_ms=step_ms)
    pauses = gc_monitor.pauses_between(start_ms, end_ms) if gc_monitor is not None else []
    return overlay(rows, pauses, step_ms=step_ms)


def timeline_rows(
    hdr_dir: PathLike | Iterable[PathLike],
    start_ms: int,
    end_ms: int,
    stages: Iterable[str] = STAGES,
    *,
    step_ms: int = 10_000,
) -> dict[str, list[Percentiles]]:
    """Stage -> its per-slot percentiles (the ``rows`` argument of ``plot.render_latency_svg``)."""
    # A directory or file is read per stage; any other iterable of paths is listed once so a
    # generator is not used up by the first stage.
    paths: PathLike | list[PathLike] = (
        hdr_dir if isinstance(hdr_dir, str | os.PathLike) else list(hdr_dir)
    )
    return {s: timeline(paths, s, start_ms, end_ms, step_ms=step_ms) for s in stages}


def overlay(
    rows: dict[str, list[Percentiles]], pauses: Iterable[GcPause], *, step_ms: int = 10_000
) -> list[dict[str, Any]]:
    """Join per-stage slots and pauses into one list of slots (pure: no I/O)."""
    if step_ms <= 0:
        raise ValueError("step_ms must be positive")
    slots: dict[int, dict[str, Any]] = {}

    def slot(start: int) -> dict[str, Any]:
        return slots.setdefault(
            start, {"start_ms": start, "end_ms": start + step_ms, "stages": {}, "gc_pauses": []}
        )

    for stage, series in rows.items():
        for p in series:
            slot(p.window_start_ms)["stages"][stage] = msgspec.structs.asdict(p)
    for pause in pauses:
        slot(pause.start_ms // step_ms * step_ms)["gc_pauses"].append(pause.overlay())
    return [slots[k] for k in sorted(slots)]
