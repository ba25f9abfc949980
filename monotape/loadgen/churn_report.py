"""What the churn reports: the live ``ChurnProgress``, the final ``ChurnReport`` and the
``Tally`` the sessions count into (docs/churn.md explains each field)."""

from __future__ import annotations

from typing import Final

import msgspec

from monotape.loadgen.report import write_progress

__all__ = ["ChurnProgress", "ChurnReport", "Tally", "print_progress"]

_MAX_ERROR_SAMPLES: Final = 20


class ChurnProgress(msgspec.Struct, frozen=True):
    """A live snapshot, reported every ``progress_interval_s``."""

    elapsed_s: float
    open: int  # connections open right now
    opened: int  # sessions whose WebSocket opened
    closed: int  # left gracefully (close handshake)
    rst: int  # left abruptly (RST)
    errors: int  # failed to open, or lost without asking
    skipped: int  # arrivals dropped at max_connections


class ChurnReport(msgspec.Struct, frozen=True):
    """What happened (docs/churn.md explains each field)."""

    url: str
    elapsed_s: float
    target_arrivals_per_s: float
    started: int  # sessions started (arrivals admitted under the caps)
    opened: int
    closed: int
    rst: int
    errors: int
    attempts: int  # opening handshakes tried by the sessions, retries included
    rejected: int  # HTTP 503 + Retry-After at the upgrade (shedding, by design): retried
    gave_up: int  # sessions still refused (503) or timing out at their planned end: not errors
    timeouts: int  # opening handshakes that timed out (a starved node): retried, not errors
    server_closed: int  # the server closed the session first: part of errors
    skipped: int
    cancelled: int  # still running after drain_s and cancelled
    peak_open: int
    subscribes: int
    changes: int
    messages: int  # server messages received (hello, snapshots, frames, acks, heartbeats)
    error_samples: list[str]

    @property
    def rst_share(self) -> float:
        left = self.closed + self.rst
        return self.rst / left if left else 0.0


def print_progress(p: ChurnProgress) -> None:
    """The live progress line on stderr (a ``progress`` callback for the CLI)."""
    write_progress(
        f"churn {p.elapsed_s:6.1f}s  open {p.open:5d}  opened {p.opened:6d}"
        f"  closed {p.closed:6d}  rst {p.rst:5d}  errors {p.errors:4d}  skipped {p.skipped:4d}"
    )


class Tally:
    """The run's counters, written by its sessions (one event loop: no locks)."""

    def __init__(self) -> None:
        self.started = self.opened = self.closed = self.rst = self.errors = 0
        self.rejected = self.gave_up = self.server_closed = self.skipped = self.cancelled = 0
        self.timeouts = self.attempts = 0
        self.open = self.pending = self.peak_open = 0
        self.subscribes = self.changes = self.messages = 0
        self.error_samples: list[str] = []

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < _MAX_ERROR_SAMPLES:
            self.error_samples.append(what[:200])
