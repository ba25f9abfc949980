"""Epochs of a venue's redundancy group, and the fence at which each takes effect.

A version is ``(epoch, seq)`` (design: Ordering). ``seq`` comes from the venue's own per-symbol
stream (its update id, else its timestamp), so the twins of a pair derive the same ``seq`` for the
same venue update. The epoch belongs to the group (group name = venue), is persisted, and
increments whenever a handler of the group starts.

Why a fence, not "stamp the new epoch on everything from now on": a restarted handler lags its
twin by 6-9 ms (design: Workload). If it stamped a higher epoch on everything it emits, its late
copy of an *older* venue update would outrank the twin's newer one: versions would increase while
the price on screen moved backwards. So an epoch takes effect at a point of the venue's own
stream: ``EpochRecord(epoch, fence_ts_ns)`` means "venue updates with ``venue_ts_ns >=
fence_ts_ns`` carry this epoch". A starting handler bumps with ``fence = venue wall now +
FeedConfig.epoch_fence_ms`` (250 ms, far above the drift and the time for the twin to learn of the
bump), live handlers adopt the record as soon as they see it (in-process: ``watch`` callbacks run
synchronously inside ``bump``), and every handler stamps an update with ``epoch_for(records,
venue_ts_ns)``. Consequences:

- both handlers stamp identical versions on identical updates, so version order equals venue
  order: a late copy is a duplicate or a regression and is never applied over a newer price;
- a restart never yields a regression of new data nor a frozen symbol: the survivor's numbers and
  the restarted handler's numbers are the same numbers;
- the epoch still guards against a venue whose update ids restart (after a handler restart): from
  the fence on, the restarted ids compare above everything of the previous epoch.

The fence is for a handler restarting beside a live twin. A node that starts starts both
handlers of every pair itself: nothing to race, so it bumps with ``fence_ts_ns = 0`` (clamped to
the group's last fence, already past) and its epoch applies at once, above everything any earlier
run on the same data dir issued (``FeedHandler.start(at_once=True)``; docs/ordering.md).

Records are kept newest-last and trimmed to ``RETAINED_RECORDS``; 16 restarts within one fence
window (250 ms) is far beyond anything a supervisor does, so trimming never changes a stamp.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import msgspec

__all__ = [
    "RETAINED_RECORDS",
    "EpochRecord",
    "EpochStore",
    "EpochStoreError",
    "FileEpochStore",
    "MemoryEpochStore",
    "epoch_for",
]

RETAINED_RECORDS = 16

# Group names become file names: keep them boring (venue MICs are 4 capitals).
_GROUP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class EpochStoreError(RuntimeError):
    """The epoch store cannot be read or written; the message names the file or group."""


class EpochRecord(msgspec.Struct, frozen=True):
    """Venue updates of the group with ``venue_ts_ns >= fence_ts_ns`` carry ``epoch``."""

    epoch: int
    fence_ts_ns: int


class EpochStore(Protocol):
    """Persistent epochs per redundancy group.

    Ordering guarantee: the records of a group are strictly increasing in ``epoch`` and
    non-decreasing in ``fence_ts_ns``; ``bump`` is atomic (two concurrent bumps get distinct
    epochs) and durable before it returns; watchers of a group are called after each bump of that
    group, in bump order, before ``bump`` returns (in-process).
    """

    def records(self, group: str) -> list[EpochRecord]:
        """The retained records, ascending; ``[]`` if the group never started."""
        ...

    def bump(self, group: str, fence_ts_ns: int) -> EpochRecord:
        """New epoch = last + 1 (1 if none), fence = max(fence_ts_ns, last fence)."""
        ...

    def watch(self, group: str, callback: Callable[[EpochRecord], None]) -> None:
        """Call ``callback(record)`` after each bump of ``group``."""
        ...


def epoch_for(records: Sequence[EpochRecord], venue_ts_ns: int) -> int:
    """The epoch of the newest record whose fence is at or before ``venue_ts_ns``; 0 if none."""
    # Newest first: a live handler's updates are almost always past the newest fence.
    for record in reversed(records):
        if record.fence_ts_ns <= venue_ts_ns:
            return record.epoch
    return 0


def _check_group(group: str) -> None:
    if not _GROUP_RE.match(group):
        raise ValueError(f"invalid epoch group name {group!r}: expected [A-Za-z0-9_.-], max 64")


def _next_record(records: Sequence[EpochRecord], fence_ts_ns: int) -> EpochRecord:
    if not records:
        return EpochRecord(1, fence_ts_ns)
    last = records[-1]
    # max(): fences never go back, so "newest record whose fence <= ts" is well defined.
    return EpochRecord(last.epoch + 1, max(fence_ts_ns, last.fence_ts_ns))


class _Watchers:
    def __init__(self) -> None:
        self._by_group: dict[str, list[Callable[[EpochRecord], None]]] = {}

    def add(self, group: str, callback: Callable[[EpochRecord], None]) -> None:
        self._by_group.setdefault(group, []).append(callback)

    def notify(self, group: str, record: EpochRecord) -> None:
        for callback in list(self._by_group.get(group, ())):
            callback(record)


class MemoryEpochStore:
    """In-memory epochs (tests, single-process runs without a data directory)."""

    def __init__(self) -> None:
        self._records: dict[str, list[EpochRecord]] = {}
        self._watchers = _Watchers()
        self._lock = threading.Lock()

    def records(self, group: str) -> list[EpochRecord]:
        _check_group(group)
        return list(self._records.get(group, ()))

    def bump(self, group: str, fence_ts_ns: int) -> EpochRecord:
        _check_group(group)
        with self._lock:
            records = self._records.setdefault(group, [])
            record = _next_record(records, fence_ts_ns)
            records.append(record)
            del records[:-RETAINED_RECORDS]
        self._watchers.notify(group, record)
        return record

    def watch(self, group: str, callback: Callable[[EpochRecord], None]) -> None:
        _check_group(group)
        self._watchers.add(group, callback)


class _EpochFile(msgspec.Struct, forbid_unknown_fields=True):
    group: str
    records: list[EpochRecord]


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_EpochFile)


class FileEpochStore:
    """Epochs in ``<directory>/<group>.json`` (design: embedded persistence).

    ``directory`` is the epochs directory: the node passes ``<data-dir>/epochs``. Each bump holds
    an exclusive ``flock`` on ``<group>.lock`` (so handler processes sharing the directory never
    hand out the same epoch), writes a temp file, fsyncs it, ``os.replace``s it over the old one
    and fsyncs the directory: a crash leaves either the old or the new file, never a torn one.
    ``watch`` callbacks fire for bumps made through this instance; another process's bumps are
    seen by calling ``records`` (``FeedHandler.refresh_epochs``), well within the 250 ms fence.
    """

    def __init__(self, directory: str | Path) -> None:
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._watchers = _Watchers()
        self._lock = threading.Lock()

    def path(self, group: str) -> Path:
        _check_group(group)
        return self._dir / f"{group}.json"

    def records(self, group: str) -> list[EpochRecord]:
        return self._read(group, self.path(group))

    def bump(self, group: str, fence_ts_ns: int) -> EpochRecord:
        path = self.path(group)
        with self._lock, self._flock(group):
            records = self._read(group, path)
            record = _next_record(records, fence_ts_ns)
            records.append(record)
            self._write(path, _EpochFile(group, records[-RETAINED_RECORDS:]))
        self._watchers.notify(group, record)
        return record

    def watch(self, group: str, callback: Callable[[EpochRecord], None]) -> None:
        _check_group(group)
        self._watchers.add(group, callback)

    @contextlib.contextmanager
    def _flock(self, group: str) -> Iterator[None]:
        fd = os.open(self._dir / f"{group}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    @staticmethod
    def _read(group: str, path: Path) -> list[EpochRecord]:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise EpochStoreError(f"cannot read epoch file {path}: {exc}") from exc
        try:
            data = _decoder.decode(raw)
        except msgspec.DecodeError as exc:
            raise EpochStoreError(f"corrupt epoch file {path}: {exc}") from exc
        if data.group != group:
            raise EpochStoreError(f"corrupt epoch file {path}: holds group {data.group!r}")
        for before, after in zip(data.records, data.records[1:], strict=False):
            if after.epoch <= before.epoch or after.fence_ts_ns < before.fence_ts_ns:
                raise EpochStoreError(f"corrupt epoch file {path}: records out of order")
        return data.records

    def _write(self, path: Path, data: _EpochFile) -> None:
        fd, tmp = tempfile.mkstemp(dir=self._dir, prefix=f".{path.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_encoder.encode(data))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        # The rename is durable only once the directory entry is on disk.
        dir_fd = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
