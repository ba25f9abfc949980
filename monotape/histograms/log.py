"""Interval logs: HdrHistogram's interval-log format (v1.3), one file per process per hour.

File layout: ``<dir>/<YYYYMMDD>T<HH>Z_<proc>_<host>.hlog``; the hour (UTC) is the hour in which
the intervals it holds *start*, so a window query opens only the files whose hour overlaps it.
``proc`` and ``host`` are percent-encoded in the name (the tags are the authority, not the name).
Each file (re)opened by a writer starts with::

    #[Histogram log format version 1.3]
    #[monotape: values in microseconds; Interval_Max in milliseconds]
    #[StartTime: 1764460800.000 (seconds since epoch), 2025-11-30 00:00:00.000 UTC]
    #[BaseTime: 0.000 (seconds since epoch)]
    "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"

then one line per stage per interval::

    Tag=stage=write;proc=writer-1;host=h1,1764460800.000,10.000,0.734,HISTFAAA...

Timestamps are absolute seconds since the epoch with millisecond precision (BaseTime 0). The
``StartTime`` header is written here: ``hdrh``'s ``output_start_time()`` misreads milliseconds
(a trap measured here). Tags: the format forbids commas and whitespace in a tag, so the tag is
``stage=<s>;proc=<p>;host=<h>`` with every value percent-encoded (``urllib.parse.quote`` with no
safe characters: ``,`` ``;`` ``=`` ``%`` and whitespace never appear raw).

Retention (``max_age_s``, ``max_bytes``), applied by every writer to the whole directory each
time it writes: a file older than ``max_age_s`` (measured from the end of its hour) is deleted;
then, while the directory's ``.hlog`` files exceed ``max_bytes``, the oldest are deleted. A file
of the writer's current hour or later is never deleted (another process may be appending to it).
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote

from . import hdr
from .recorder import Interval

__all__ = [
    "HOUR_MS",
    "IntervalLogWriter",
    "decode_tag",
    "encode_tag",
    "file_hour_ms",
    "log_files",
    "log_path",
    "read_intervals",
]

HOUR_MS = 3_600_000
SUFFIX = ".hlog"
_NAME = re.compile(r"^(\d{8}T\d{2})Z_.*\.hlog$")
_BASE_TIME = re.compile(r"#\[BaseTime: *([\d.]+) ")
LEGEND = '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"'

PathLike = str | os.PathLike[str]


def encode_tag(stage: str, proc: str, host: str) -> str:
    """``stage=<s>;proc=<p>;host=<h>``, values percent-encoded (no comma, space, ``;`` or ``=``)."""
    return ";".join(
        f"{k}={quote(v, safe='')}" for k, v in (("stage", stage), ("proc", proc), ("host", host))
    )


def decode_tag(tag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in tag.split(";"):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"tag part without '=': {part!r}")
        out[key] = unquote(value)
    return out


def _seconds(ms: int) -> str:
    """Milliseconds as seconds with exactly three decimals, without a float round trip."""
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    return f"{sign}{ms // 1000}.{ms % 1000:03d}"


def _parse_ms(text: str) -> int:
    return round(float(text) * 1000)


def _hour_label(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms // HOUR_MS * 3600, dt.UTC).strftime("%Y%m%dT%H")


def log_path(directory: PathLike, proc: str, host: str, start_ms: int) -> Path:
    """The file holding intervals of ``proc``@``host`` that start in ``start_ms``'s hour."""
    name = f"{_hour_label(start_ms)}Z_{quote(proc, safe='')}_{quote(host, safe='')}{SUFFIX}"
    return Path(directory) / name


def file_hour_ms(path: PathLike) -> int | None:
    """Start of the hour a log file covers (epoch ms), or None if the name is not ours."""
    match = _NAME.match(Path(path).name)
    if match is None:
        return None
    hour = dt.datetime.strptime(match.group(1), "%Y%m%dT%H").replace(tzinfo=dt.UTC)
    return int(hour.timestamp()) * 1000


class IntervalLogWriter:
    """Appends a process's intervals to ``<directory>``, one file per hour, with retention."""

    def __init__(
        self,
        directory: PathLike,
        proc: str,
        host: str,
        *,
        max_age_s: float = 7 * 86_400,
        max_bytes: int = 1 << 30,
    ) -> None:
        if max_age_s <= 0 or max_bytes <= 0:
            raise ValueError("max_age_s and max_bytes must be positive")
        self.directory = Path(directory)
        self.proc = proc
        self.host = host
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self._file: IO[str] | None = None
        self._path: Path | None = None
        self._hour_ms: int | None = None
        self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path | None:
        """The file currently open for appending, if any."""
        return self._path

    def _open(self, start_ms: int) -> IO[str]:
        hour_ms = start_ms // HOUR_MS * HOUR_MS
        if self._file is not None and self._hour_ms == hour_ms:
            try:
                if os.fstat(self._file.fileno()).st_nlink > 0:
                    return self._file
            except OSError:
                pass  # deleted or unreadable under us: reopen below
        self.close()
        path = log_path(self.directory, self.proc, self.host, start_ms)
        f = open(path, "a", encoding="ascii", newline="\n")  # noqa: SIM115 (held open)
        when = dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC)
        f.write(
            "#[Histogram log format version 1.3]\n"
            "#[monotape: values in microseconds; Interval_Max in milliseconds]\n"
            f"#[StartTime: {_seconds(start_ms)} (seconds since epoch), "
            f"{when.strftime('%Y-%m-%d %H:%M:%S')}.{start_ms % 1000:03d} UTC]\n"
            "#[BaseTime: 0.000 (seconds since epoch)]\n"
            f"{LEGEND}\n"
        )
        self._file, self._path, self._hour_ms = f, path, hour_ms
        return f

    def write(self, intervals: Sequence[Interval]) -> None:
        """Append the intervals (encoded now, so the recorder may reuse them afterwards)."""
        for interval in intervals:
            f = self._open(interval.start_ms)
            hist = interval.histogram
            payload = hist.encode().decode("ascii")
            f.write(
                f"Tag={encode_tag(interval.stage, self.proc, self.host)},"
                f"{_seconds(interval.start_ms)},{_seconds(interval.end_ms - interval.start_ms)},"
                f"{hist.get_max_value() / 1000:.3f},{payload}\n"
            )
        if self._file is not None:
            self._file.flush()
        if intervals:
            self.apply_retention(max(i.end_ms for i in intervals))

    def apply_retention(self, now_ms: int) -> list[Path]:
        """Delete files beyond ``max_age_s`` and then the oldest beyond ``max_bytes``."""
        protect_from = self._hour_ms if self._hour_ms is not None else now_ms // HOUR_MS * HOUR_MS
        files: list[tuple[int, str, Path, int]] = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            hour = file_hour_ms(path)
            if hour is None:
                continue
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            files.append((hour, path.name, path, size))
        files.sort()
        deleted: list[Path] = []
        total = sum(f[3] for f in files)
        for hour, _name, path, size in files:
            if hour >= protect_from:
                break
            too_old = hour + HOUR_MS + self.max_age_s * 1000 <= now_ms
            if too_old or total > self.max_bytes:
                path.unlink(missing_ok=True)
                deleted.append(path)
                total -= size
        return deleted

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = None
        self._path = None
        self._hour_ms = None


def log_files(
    paths_or_dir: PathLike | Iterable[PathLike],
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> list[Path]:
    """The log files to read: a directory's ``*.hlog`` files whose hour overlaps the window."""
    if isinstance(paths_or_dir, str | os.PathLike):
        root = Path(paths_or_dir)
        if not root.is_dir():
            return [root]
        candidates = sorted(root.glob(f"*{SUFFIX}"))
        out = []
        for path in candidates:
            hour = file_hour_ms(path)
            if hour is not None and (
                (start_ms is not None and hour + HOUR_MS <= start_ms)
                or (end_ms is not None and hour >= end_ms)
            ):
                continue
            out.append(path)
        return out
    return [Path(p) for p in paths_or_dir]


def read_intervals(
    paths_or_dir: PathLike | Iterable[PathLike],
    *,
    stage: str | None = None,
    start_ms: int | None = None,
    end_ms: int | None = None,
    errors: list[str] | None = None,
) -> Iterator[Interval]:
    """Intervals read back from logs, with stage, proc and host from their tags.

    Window rule: an interval belongs to [start_ms, end_ms) if its *start* lies in it (half-open,
    so consecutive windows never count an interval twice). Only lines that pass the stage and
    window filters are decoded. A malformed line (say, truncated by a crash) is skipped and
    described in ``errors`` when a list is passed.
    """
    for path in log_files(paths_or_dir, start_ms=start_ms, end_ms=end_ms):
        try:
            f = open(path, encoding="ascii", errors="replace")  # noqa: SIM115
        except FileNotFoundError:
            continue  # deleted by retention since listing
        with f:
            base_ms = 0
            for lineno, raw in enumerate(f, 1):
                line = raw.rstrip("\n")
                if not line or line.startswith('"'):
                    continue
                if line.startswith("#"):
                    match = _BASE_TIME.match(line)
                    if match:
                        base_ms = _parse_ms(match.group(1))
                    continue
                try:
                    interval = _parse_line(line, base_ms, stage, start_ms, end_ms)
                except Exception as exc:  # any decoding failure: skip the line, say why
                    if errors is not None:
                        errors.append(f"{path}:{lineno}: {type(exc).__name__}: {exc}")
                    continue
                if interval is not None:
                    yield interval


def _parse_line(
    line: str, base_ms: int, stage: str | None, start_ms: int | None, end_ms: int | None
) -> Interval | None:
    tags: dict[str, str] = {}
    if line.startswith("Tag="):
        tag, _, line = line[4:].partition(",")
        tags = decode_tag(tag)
    fields = line.split(",")
    if len(fields) != 4:
        raise ValueError(f"expected 4 fields after the tag, got {len(fields)}")
    line_stage = tags.get("stage", "")
    if stage is not None and line_stage != stage:
        return None
    begin = base_ms + _parse_ms(fields[0])
    if (start_ms is not None and begin < start_ms) or (end_ms is not None and begin >= end_ms):
        return None
    length = _parse_ms(fields[1])
    hist: Any = hdr.HdrHistogram.decode(fields[3])
    return Interval(
        line_stage, begin, begin + length, hist, tags.get("proc", ""), tags.get("host", "")
    )
