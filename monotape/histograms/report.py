"""``monotape hdr report``: exact percentiles of one stage over a window, from the interval logs.

    monotape hdr report --stage write --last 40s
    monotape hdr report --stage decode --from 2025-11-30T09:00:00Z --to 2025-11-30T09:05:00Z --json

``--last`` takes a number with a unit (``ms``, ``s``, ``m``, ``h``, ``d``; bare = seconds).
``--from``/``--to`` take ISO-8601 (no offset = UTC) or epoch seconds; ``--to`` defaults to now.
With neither, the window is the last 60 s. Bad values exit 2 with a message naming the flag.
A window with no values says so (how many interval logs it read, and where) instead of a table
of zeros; ``--json`` still prints the (empty) result, with that note on stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
import sys
import time
from pathlib import Path

import msgspec

from .query import Percentiles, query
from .stages import ALL_STAGES

__all__ = [
    "DEFAULT_LAST",
    "ReportArgumentError",
    "add_report_arguments",
    "parse_duration_ms",
    "parse_time_ms",
    "resolve_window",
    "run_report",
]

DEFAULT_LAST = "60s"
_DURATION = re.compile(r"^\s*(\d{1,15}(?:\.\d{1,9})?)\s*(ms|s|m|h|d)?\s*$")
# A number of more digits than this is no duration anyone means (and 309 of them overflow a
# float); it is refused like any other unparseable value, never a 500.
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class ReportArgumentError(ValueError):
    """A report flag's value could not be used; ``flag`` names it."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stage", required=True, help=f"one of: {', '.join(ALL_STAGES)}")
    parser.add_argument("--last", help="window ending now, e.g. 40s, 5m, 2h (default 60s)")
    parser.add_argument("--from", dest="from_", metavar="T", help="ISO-8601 or epoch seconds")
    parser.add_argument("--to", metavar="T", help="ISO-8601 or epoch seconds (default now)")
    parser.add_argument("--dir", help="interval log directory (default <data-dir>/hdr)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def parse_duration_ms(text: str, flag: str = "--last", *, positive: bool = True) -> int:
    """``40s``, ``500ms``, ``5m``, ``2h``, ``1d`` (a bare number is seconds) in milliseconds;
    ``positive=False`` leaves the bounds to the caller (the admin API names its own range)."""
    match = _DURATION.match(text)
    if match is None:
        raise ReportArgumentError(
            flag, f"cannot parse {text[:40]!r} as a duration (e.g. 40s, 500ms, 5m, 2h, 1d)"
        )
    ms = round(float(match.group(1)) * _UNIT_MS[match.group(2) or "s"])
    if positive and ms <= 0:
        raise ReportArgumentError(flag, f"duration {text!r} must be positive")
    return ms


def parse_time_ms(text: str, flag: str) -> int:
    """Epoch seconds (``1764460800.5``) or ISO-8601 (naive means UTC) to epoch milliseconds."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or abs(seconds) > 1e12:
            raise ReportArgumentError(flag, f"{text[:40]!r} is not a time (epoch seconds)")
        return round(seconds * 1000)
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ReportArgumentError(
            flag, f"cannot parse {text!r} as ISO-8601 or epoch seconds"
        ) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return round(when.timestamp() * 1000)


def resolve_window(args: argparse.Namespace, now_ms: int) -> tuple[int, int]:
    last = getattr(args, "last", None)
    from_ = getattr(args, "from_", None)
    to = getattr(args, "to", None)
    if last is not None and (from_ is not None or to is not None):
        raise ReportArgumentError("--last", "use either --last or --from/--to, not both")
    if from_ is None:
        if to is not None:
            raise ReportArgumentError("--to", "--to needs --from")
        return now_ms - parse_duration_ms(last if last is not None else DEFAULT_LAST), now_ms
    start = parse_time_ms(from_, "--from")
    end = parse_time_ms(to, "--to") if to is not None else now_ms
    if end <= start:
        raise ReportArgumentError("--to", "the window must end after it starts (--from)")
    return start, end


def _iso(ms: int) -> str:
    when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _format_us(us: int) -> str:
    if us >= 1_000_000:
        return f"{us / 1e6:.3f} s"
    if us >= 1_000:
        return f"{us / 1e3:.3f} ms"
    return f"{us} µs"


def format_table(p: Percentiles) -> str:
    lines = [
        f"stage {p.stage}  window [{_iso(p.window_start_ms)}, {_iso(p.window_end_ms)})  "
        f"intervals {p.intervals}  count {p.count}",
    ]
    for label, value in (
        ("min", p.min_us),
        ("p50", p.p50_us),
        ("p90", p.p90_us),
        ("p99", p.p99_us),
        ("p99.9", p.p999_us),
        ("p99.99", p.p9999_us),
        ("max", p.max_us),
    ):
        lines.append(f"  {label:<7}{value:>12} µs  {_format_us(value):>12}")
    return "\n".join(lines)


def run_report(args: argparse.Namespace, data_dir: str, *, now_ms: int | None = None) -> int:
    """Print the report; 0 on success, 2 on a bad flag value (message names the flag)."""
    try:
        if args.stage not in ALL_STAGES:
            raise ReportArgumentError(
                "--stage", f"unknown stage {args.stage!r}; expected one of {', '.join(ALL_STAGES)}"
            )
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        start, end = resolve_window(args, now)
    except ReportArgumentError as exc:
        print(f"monotape hdr report: error: {exc}", file=sys.stderr)
        return 2
    given = getattr(args, "dir", None)
    directory = Path(given) if given else Path(data_dir) / "hdr"
    if not directory.is_dir():
        # blame what the user gave: --dir, or the data dir it defaulted from (run elsewhere
        # than beside the node, the default ./.monotape is not the node's)
        where = (
            f"--dir: no such directory: {directory}"
            if given
            else f"no interval logs at {directory.resolve()}: name the node's data dir "
            "(--data-dir DIR or MONOTAPE_DATA_DIR; monotape run prints it) or --dir"
        )
        print(f"monotape hdr report: error: {where}", file=sys.stderr)
        return 2
    result = query(directory, args.stage, start, end)
    empty = result.count == 0
    note = (
        f"no {args.stage} values in [{_iso(start)}, {_iso(end)}): {result.intervals} intervals "
        f"read under {directory} (is a node writing there? try a longer --last)"
    )
    if getattr(args, "json", False):
        print(msgspec.json.encode(result).decode())
        if empty:
            print(f"monotape hdr report: {note}", file=sys.stderr)
    else:
        print(f"stage {args.stage}: {note}" if empty else format_table(result))
    return 0
