"""The load report: what a run measured, a table for humans, msgspec JSON for machines."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import msgspec

__all__ = [
    "LoadProgress",
    "LoadReport",
    "Percentiles",
    "Second",
    "compare",
    "percentile",
    "print_progress",
    "summarize",
    "write_progress",
]


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of ascending values: the smallest value with at least ``p``% of
    the values at or below it (p=0 gives the minimum, p=100 the maximum; 0.0 when empty)."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    n = len(sorted_values)
    if n == 0:
        return 0.0
    rank = max(1, math.ceil(p / 100 * n))
    return float(sorted_values[rank - 1])


class Percentiles(msgspec.Struct, frozen=True):
    """Milliseconds; nearest-rank percentiles over ``count`` values."""

    count: int = 0
    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    max: float = 0.0


def summarize(values_ms: Sequence[float]) -> Percentiles:
    v = sorted(values_ms)
    return Percentiles(
        count=len(v),
        p50=round(percentile(v, 50), 3),
        p90=round(percentile(v, 90), 3),
        p99=round(percentile(v, 99), 3),
        max=round(percentile(v, 100), 3),
    )


class Second(msgspec.Struct, array_like=True, frozen=True):
    """One second of the run, summed over the workers (``connected`` sampled at its end)."""

    t: int
    scheduled: int  # connects the trace asked for in this second
    attempts: int  # upgrade attempts (first tries and retries)
    rejected: int  # HTTP 503s
    opened: int  # WebSockets opened
    first_frames: int
    connected: int


class LoadProgress(msgspec.Struct, frozen=True):
    """The live line, every second, summed over the workers."""

    elapsed_s: float
    connected: int  # open right now
    connecting: int  # an upgrade in flight
    backing_off: int  # waiting out a backoff (503 or failure)
    rejected: int  # HTTP 503s so far
    retries: int
    first_frames: int
    errors: int
    loop_lag_s: float | None = None  # the server's, from /metrics (with an admin URL)


def write_progress(line: str) -> None:
    """One progress line on stderr: rewritten in place on a terminal (``\\r``), a line of its
    own anywhere else, so a log or a CI transcript gets one line a second, not one line that
    holds the whole run."""
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{line}")
    else:
        sys.stderr.write(f"{line}\n")
    sys.stderr.flush()


def print_progress(p: LoadProgress) -> None:
    """The live progress line on stderr (the default ``progress`` callback of ``run_load``)."""
    lag = f"  lag {p.loop_lag_s * 1000:6.1f}ms" if p.loop_lag_s is not None else ""
    write_progress(
        f"load {p.elapsed_s:6.1f}s  connected {p.connected:6d}  connecting {p.connecting:5d}"
        f"  backoff {p.backing_off:5d}  503s {p.rejected:6d}  retries {p.retries:6d}"
        f"  first-frames {p.first_frames:6d}  errors {p.errors:4d}{lag}"
    )


class LoadReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a ``run_load`` measured (docs/load.md explains each field)."""

    url: str  # without its query string: tokens are never reported
    trace: str
    processes: int
    elapsed_s: float
    scheduled: int  # terminals (sessions) the trace planned
    scheduled_connects_per_s_max: int
    mean_connects_per_s: float
    connected: int  # sessions that opened at least once
    first_frames: int  # sessions that got at least one frame
    connect_ms: Percentiles  # wanted to connect -> WebSocket open, backoffs included
    first_frame_ms: Percentiles  # wanted to connect -> first FRAME (after hello + subscribe)
    attempts: int
    rejected_503: int
    retries: int
    attempt_waves: list[int]  # attempts by attempt number: [first tries, 1st retries, ...]
    connect_failures: int  # refused, timed out, reset (not 503)
    disconnects_graceful: int
    disconnects_abrupt: int
    closed_at_end: int  # still connected at the end of the trace, closed gracefully
    lost: int  # the server (or the network) ended a session early; it reconnected
    abandoned: int  # sessions whose scheduled end came before they ever connected
    errors: int  # what raised or was refused, workers that failed, and ``cancelled``
    error_samples: list[str]
    peak_concurrent: int
    last_wave_s: int  # first second of the trace's last arrival wave
    recovered_at_s: float | None  # first second from which every due terminal was receiving
    recovery_s: float | None  # recovered_at_s - last_wave_s
    all_connected_at_end: bool
    due_at_end: int
    up_at_end: int
    loop_lag_max_s: float | None = None  # the server's worst event-loop lag during the run
    loop_lag_samples: int = 0
    auth_cache_hits: int | None = None  # deltas over the run, from /metrics
    auth_cache_misses: int | None = None
    auth_cache_hit_rate: float | None = None
    timeline: list[Second] = msgspec.field(default_factory=list)
    # of ``errors``: terminal tasks still running at the trace's end plus drain_s, cancelled
    # (still connecting, reading, or in their closing handshake)
    cancelled: int = 0

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)

    def rows(self) -> list[tuple[str, str]]:
        def pct(p: Percentiles) -> str:
            return f"{p.p50:.0f} / {p.p90:.0f} / {p.p99:.0f} / {p.max:.0f}"

        def opt(v: float | None, fmt: str) -> str:
            return "-" if v is None else format(v, fmt)

        lag = None if self.loop_lag_max_s is None else self.loop_lag_max_s * 1000
        hit = self.auth_cache_hit_rate
        mean_max = f"{self.mean_connects_per_s:.1f} / {self.scheduled_connects_per_s_max}"
        leaves = f"{self.disconnects_graceful} / {self.disconnects_abrupt} / {self.closed_at_end}"
        steady = f"{opt(self.recovered_at_s, '.0f')} ({opt(self.recovery_s, '.0f')})"
        return [
            ("trace", self.trace),
            ("terminals scheduled", str(self.scheduled)),
            ("mean / max connects per s", mean_max),
            ("connected / first frame", f"{self.connected} / {self.first_frames}"),
            ("connect ms p50/p90/p99/max", pct(self.connect_ms)),
            ("first frame ms p50/p90/p99/max", pct(self.first_frame_ms)),
            ("attempts", str(self.attempts)),
            ("503s", str(self.rejected_503)),
            ("retries", str(self.retries)),
            ("attempt waves", " ".join(str(w) for w in self.attempt_waves[:8])),
            ("connect failures", str(self.connect_failures)),
            ("leaves graceful / abrupt / at end", leaves),
            (
                "lost / abandoned / errors (cancelled)",
                f"{self.lost} / {self.abandoned} / {self.errors} ({self.cancelled})",
            ),
            ("peak concurrent", str(self.peak_concurrent)),
            ("last wave at s", str(self.last_wave_s)),
            ("steady from s (recovery s)", steady),
            ("up at end / due", f"{self.up_at_end} / {self.due_at_end}"),
            ("server loop lag max ms", opt(lag, ".1f")),
            ("auth cache hit rate", "-" if hit is None else f"{hit * 100:.1f}%"),
            ("elapsed s", f"{self.elapsed_s:.1f}"),
        ]

    def format_table(self) -> str:
        rows = self.rows()
        width = max(len(k) for k, _ in rows)
        lines = [f"load report: {self.url} ({self.processes} processes)"]
        lines += [f"  {k:<{width}}  {v}" for k, v in rows]
        if self.error_samples:
            lines.append("  error samples:")
            lines += [f"    {e}" for e in self.error_samples[:5]]
        return "\n".join(lines)


def compare(a: LoadReport, b: LoadReport) -> str:
    """Two reports side by side (correlated storm vs its Poisson contrast, say)."""
    ra, rb = a.rows(), b.rows()
    width = max(len(k) for k, _ in ra)
    col = max(12, *(len(v) for _, v in ra))
    lines = [f"  {'':<{width}}  {'A':<{col}}  B"]
    for (k, va), (_, vb) in zip(ra, rb, strict=True):
        mark = "" if va == vb or k == "trace" else "  *"
        lines.append(f"  {k:<{width}}  {va:<{col}}  {vb}{mark}")
    return "\n".join(lines)
