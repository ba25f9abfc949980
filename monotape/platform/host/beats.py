"""Liveness: each role process beats into a small /dev/shm segment the host creates, and the
host replaces a role whose beat stops for longer than its limit (docs/processes.md, Liveness).

The segment is one slot of four u64 words per process the host runs: the beating process's pid,
its last beat (CLOCK_MONOTONIC ns, which every process of one host shares), when it started a
*hold* (0: none), and a beat count. A role beats from its event loop (``Beat.run``, started by
``lifeline.run_role`` for every role), so a loop that stops turning, a SIGSTOP and an endless
loop all stop the beat, while a loop that is merely busy keeps beating between its callbacks.
A hold marks a pause the role knows about and must not be replaced for: a garbage collection
(``Beat.install_gc``: the ``gc.callbacks`` pair) or a blocking write to a disk that may be slow
(``Beat.holding``; and the host itself treats a role it finds in uninterruptible disk wait,
state ``D`` in ``/proc/<pid>/stat``, as holding: ``disk_wait``); a held slot is judged by the
(longer) held limit instead.

``Liveness`` is the host's judge, values in and verdicts out: what each slot read, when, and
each role's limit. A host that itself ran late (a box so busy the host's own check slept far past
its time) cannot tell a hung role from a starved one, so such a round restarts every role's
clock instead of judging it; and a role that was runnable but waited for a core (its main
thread's run-queue wait, ``/proc/<pid>/task/<pid>/schedstat``: ``cpu_wait_ns``) is not charged
for that wait: a box short of cores is not a hang (SIGSTOP, an endless loop on a free core and a
deadlock do not wait on the run queue). Words are written and read one 8-byte store/load at a
time through a ``memoryview`` cast to ``"Q"`` (never seen half-written); the pid word tells the
host which process a beat is from, so a slot the dead process left behind is never read as the
new one's.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import mmap
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from monotape.platform.ring.segment import SHM_DIR, map_segment
from monotape.platform.role.process_metrics import parse_schedstat

__all__ = [
    "BEAT_EVERY_S",
    "Beat",
    "BeatTable",
    "Hung",
    "Liveness",
    "Reading",
    "cpu_wait_ns",
    "disk_wait",
]

BEAT_EVERY_S: Final = 0.05  # 6 beats in the sequencer's 300 ms limit
_SLOT_WORDS: Final = 4
W_PID, W_LAST, W_HELD, W_COUNT = 0, 1, 2, 3
_PAGE: Final = 4096


class BeatTable:
    """One mapping of the beats segment; the host creates it (and owns its unlink), a role
    attaches and writes its own slot only."""

    def __init__(self, path: Path, mm: mmap.mmap) -> None:
        self.path = path
        self.name = path.name
        self._mm = mm
        self.words = memoryview(mm).cast("Q")
        self.slots = len(self.words) // _SLOT_WORDS

    @classmethod
    def create(cls, name: str, slots: int, directory: Path = SHM_DIR) -> BeatTable:
        path = directory / name
        return cls(path, map_segment(path, max(_PAGE, slots * _SLOT_WORDS * 8)))

    @classmethod
    def attach(cls, name: str, directory: Path = SHM_DIR) -> BeatTable:
        path = directory / name
        return cls(path, map_segment(path, None))

    def read(self, slot: int) -> Reading:
        k = slot * _SLOT_WORDS
        w = self.words
        return Reading(int(w[k + W_PID]), int(w[k + W_LAST]), int(w[k + W_HELD]))

    def reset(self, slot: int) -> None:
        """Before a process starts in ``slot``: nothing of the one before it counts."""
        k = slot * _SLOT_WORDS
        for i in range(_SLOT_WORDS):
            self.words[k + i] = 0

    def close(self) -> None:
        if not self._mm.closed:
            self.words.release()
            self._mm.close()

    def unlink(self) -> None:
        self.path.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class Reading:
    pid: int  # 0: no beat since the slot was reset
    last_ns: int
    held_ns: int  # 0: not holding


class Beat:
    """A role's side of its slot: ``beat()`` from the event loop, a hold around a known pause."""

    def __init__(
        self,
        table: BeatTable,
        slot: int,
        now_ns: Callable[[], int] = time.monotonic_ns,
        pid: int | None = None,
    ) -> None:
        if not 0 <= slot < table.slots:
            raise ValueError(f"beat slot {slot} is outside 0..{table.slots - 1}")
        self.table = table
        self._k = slot * _SLOT_WORDS
        self._now_ns = now_ns
        self._pid = os.getpid() if pid is None else pid
        self._depth = 0  # holds nest (a collection inside a slow write)
        self._gc_cb: Callable[[str, dict[str, int]], None] | None = None

    def beat(self) -> None:
        w, k = self.table.words, self._k
        w[k + W_LAST] = self._now_ns()
        w[k + W_PID] = self._pid  # after the time: a new pid never shows with an old beat
        w[k + W_COUNT] += 1

    def hold(self) -> None:
        self._depth += 1
        if self._depth == 1:
            self.table.words[self._k + W_HELD] = self._now_ns() or 1

    def release(self) -> None:
        if self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0:
            self.beat()  # the pause ended: alive now
            self.table.words[self._k + W_HELD] = 0

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Around a blocking step that may take long for a reason outside the role (a slow
        disk): judged by the held limit meanwhile."""
        self.hold()
        try:
            yield
        finally:
            self.release()

    def install_gc(self) -> None:
        """Hold during every garbage collection (CPython calls the pair around each one)."""

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                self.hold()
            else:
                self.release()

        self._gc_cb = on_gc
        gc.callbacks.append(on_gc)

    def uninstall_gc(self) -> None:
        cb = self._gc_cb
        if cb is not None:
            gc.callbacks[:] = [c for c in gc.callbacks if c is not cb]
            self._gc_cb = None

    async def run(self, every_s: float = BEAT_EVERY_S) -> None:
        while True:
            self.beat()
            await asyncio.sleep(every_s)


@dataclass(frozen=True, slots=True)
class Hung:
    name: str
    pid: int
    silent_s: float  # how long it had not beaten (since its start, if it never did)
    limit_s: float
    held: bool  # judged by the held limit (a hold that never ended)
    started: bool  # it had beaten at least once


@dataclass
class Liveness:
    """The host's judge. ``limits_ns``: each process name's limit (0 or absent: not judged);
    ``held_limit_ns``: a slot holding; ``start_limit_ns``: before a process's first beat."""

    limits_ns: Mapping[str, int]
    held_limit_ns: int
    start_limit_ns: int
    late_ns: int = 150_000_000  # a check this far past its time is the host's own stall
    # the worst unheld silence seen, by name, since the host started (/metrics, the bench)
    worst_ns: dict[str, int] = field(default_factory=dict)
    _last_check_ns: int = 0
    _awake_since_ns: int = 0
    # name -> (pid, the beat seen, that pid's run-queue wait when it was seen)
    _base: dict[str, tuple[int, int, int | None]] = field(default_factory=dict)

    def check(
        self,
        now_ns: int,
        every_ns: int,
        running: Mapping[str, tuple[int, int, Reading]],
        disk_wait: Callable[[int], bool] = lambda pid: False,
        cpu_wait: Callable[[int], int | None] = lambda pid: None,
    ) -> list[Hung]:
        """``running``: name -> (pid the host started, its start ns, what its slot reads);
        ``every_ns``: how often the host checks; ``disk_wait(pid)``: the process waits on a
        disk now (asked only of one past its limit: it is then judged as held); ``cpu_wait(pid)``:
        its run-queue wait so far in ns (None: unknown), read at each new beat and of one past
        its limit, whose wait since its last beat is not counted as silence. The processes to
        replace now."""
        if self._last_check_ns and now_ns - self._last_check_ns > every_ns + self.late_ns:
            self._awake_since_ns = now_ns  # the host was not running: nobody is judged on it
        self._last_check_ns = now_ns
        out = []
        for name, (pid, started_ns, r) in running.items():
            limit = self.limits_ns.get(name, 0)
            if limit <= 0 or pid <= 0:
                continue
            started = r.pid == pid
            since = max(r.last_ns if started else started_ns, self._awake_since_ns)
            silent = max(0, now_ns - since)
            held = started and r.held_ns != 0
            if started:
                base = self._base.get(name)
                if base is None or base[:2] != (pid, r.last_ns):
                    base = self._base[name] = (pid, r.last_ns, cpu_wait(pid))
                elif silent > limit and base[2] is not None:
                    waited = cpu_wait(pid)
                    if waited is not None:  # starved, not hung: that wait is the box's
                        silent = max(0, silent - max(0, waited - base[2]))
            if started and not held and silent > self.worst_ns.get(name, 0):
                self.worst_ns[name] = silent
            allowed = self.start_limit_ns if not started else self.held_limit_ns if held else limit
            if silent > allowed and not held and started and disk_wait(pid):
                held, allowed = True, self.held_limit_ns  # a slow disk, not a hang
            if silent > allowed:
                out.append(Hung(name, pid, silent / 1e9, allowed / 1e9, held, started))
        return out


def disk_wait(pid: int, proc: Path = Path("/proc")) -> bool:
    """``pid``'s main thread (its event loop) is in uninterruptible sleep (``D``: blocked on
    I/O, a slow disk's fsync or dirty-page throttling); False when it cannot be told."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return False
    # "pid (comm) S ...": comm may hold spaces and parentheses, so the state follows the last ")"
    rest = stat.rpartition(")")[2].split()
    return bool(rest) and rest[0] == "D"


def cpu_wait_ns(pid: int, proc: Path = Path("/proc")) -> int | None:
    """How long ``pid``'s main thread (its event loop) was runnable but waited for a CPU, in
    ns (schedstat's second field); None when it cannot be told."""
    try:
        text = (proc / str(pid) / "task" / str(pid) / "schedstat").read_text()
        return parse_schedstat(text)[1]
    except (OSError, ValueError):
        return None
