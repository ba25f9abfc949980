"""What a load worker is given (``Job``, ``Knobs``) and what it reports (``WorkerResult``):
msgpack across the 'spawn' boundary between ``harness.run_load`` and ``worker.worker_main``."""

from __future__ import annotations

import math

import msgspec

from monotape.loadgen.trace import SessionPlan

__all__ = ["Job", "Knobs", "WorkerResult", "last_gap"]


class Knobs(msgspec.Struct, frozen=True):
    """The part of LoadConfig a worker needs."""

    backoff_base_s: float
    backoff_cap_s: float
    open_timeout_s: float
    close_timeout_s: float
    first_frame_timeout_s: float
    settle_s: float
    drain_s: float
    seed: int


class Job(msgspec.Struct, frozen=True):
    wid: int
    url: str
    duration_s: int
    knobs: Knobs
    plans: list[SessionPlan]
    watchlists: list[list[str]]  # one per plan


class WorkerResult(msgspec.Struct, frozen=True):
    wid: int
    connect_ms: list[float]
    first_frame_ms: list[float]
    attempts: int
    rejected: int
    retries: int
    waves: list[int]
    connect_failures: int
    graceful: int
    abrupt: int
    closed_at_end: int
    lost: int
    abandoned: int
    errors: int
    error_samples: list[str]
    connected_sessions: int
    first_frame_sessions: int
    peak: int
    last_gap: int  # the last whole second some due terminal of this worker was not receiving
    due_at_end: int
    up_at_end: int
    seconds: list[list[int]]  # per second: attempts, rejected, opened, first_frames, connected
    cancelled: int


def last_gap(due_lo: float, due_hi: float, ups: list[tuple[float, float]]) -> int:
    """The last whole second s in [due_lo, due_hi) not covered by any [start, end) of ``ups``
    (disjoint, in order); -1 if every such second is covered."""
    s = math.ceil(due_hi) - 1
    lo = math.ceil(due_lo)
    for start, end in reversed(ups):
        if s < lo:
            return -1
        if s >= end:
            return s
        if s >= start:
            s = math.ceil(start) - 1
    return s if s >= lo else -1
