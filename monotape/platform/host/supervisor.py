"""The host's process table: which roles should run, which to start now, how long a crashed one
waits before it starts again, and in which order they stop. Values in, decisions out: no
processes, no clock, no randomness of its own (the driver, host.py, passes ``now_ns`` and a
``rand`` in [0, 1)), so every rule here is tested without starting anything.

Start order (docs/processes.md): the sequencer first (the writers read what it publishes, the
handlers send to it), then the writers, then the feed handlers, then the venue; each stage starts
once every role of the stages before it is ready (its metrics port file is written) or
``start_wait_ns`` has passed. Stop order (``STOP_ORDER``): the writers first, while the
sequencer and the feeds keep the prices moving (their drain moves terminals elsewhere with
reconnect hints: a screen's prices never stop before its CLOSE), then the venue, the handlers
and the sequencer.

Restarts: exponential backoff with jitter, capped (``Backoff``: 0.1 s doubling to 5 s, each delay
drawn from the upper half of its step, so a crash loop of several roles does not restart them
in lockstep, and a restart never comes sooner than half the step). A role that stayed up for
``stable_ns`` starts its count again from the first step. Every exit is counted by its reason
(``exit_<code>`` or the signal's name, ``SIGKILL``; ``hung`` for one the host killed because
its beat stopped: ``mark_hung``) and never gives up: a role that keeps
crashing keeps coming back every ``cap_s`` at most, and says so in the log each time.
"""

from __future__ import annotations

import enum
import signal
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = [
    "START_ORDER",
    "STOP_ORDER",
    "Backoff",
    "Exit",
    "ProcessTable",
    "Slot",
    "SlotState",
    "exit_reason",
]

START_ORDER = ("sequencer", "writer", "handler", "venue")
STOP_ORDER = ("writer", "venue", "handler", "sequencer")
HUNG = "hung"
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Backoff:
    base_s: float = 0.1
    factor: float = 2.0
    cap_s: float = 5.0  # the "cap ~5 s": a crash loop costs one start per 5 s at most
    jitter: float = 0.5  # a delay is drawn from [step * (1 - jitter), step]
    stable_s: float = 30.0  # up this long: the next crash starts again from base_s

    def delay_s(self, failures: int, rand: float) -> float:
        """The wait before start number ``failures + 1`` after ``failures`` crashes in a row."""
        step = min(self.cap_s, self.base_s * self.factor ** max(0, failures - 1))
        return step * (1.0 - self.jitter + self.jitter * rand)


def exit_reason(returncode: int) -> str:
    """``SIGKILL`` for a process killed by a signal (Popen's negative code), else ``exit_<n>``."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal_{-returncode}"
    return f"exit_{returncode}"


class SlotState(enum.Enum):
    WAITING = "waiting"  # not started yet (its stage waits for the stages before it)
    RUNNING = "running"
    BACKOFF = "backoff"  # exited; starts again at restart_at_ns
    STOPPING = "stopping"  # told to stop (SIGTERM sent)
    STOPPED = "stopped"


@dataclass(slots=True)
class Slot:
    """One role process: what the admin API's /admin/processes shows of it."""

    name: str  # "writer-0": the process label, the log field, the port file's name
    role: str  # one of START_ORDER
    stage: int
    state: SlotState = SlotState.WAITING
    pid: int = 0
    ready: bool = False
    started_ns: int = 0  # monotonic, of the current run
    up_since_ms: int = 0  # wall clock, of the current run (for people)
    starts: int = 0
    restarts: int = 0  # starts after an exit: what the role's spec.restarts says
    failures: int = 0  # exits in a row without a stable run between them
    last_reason: str = ""
    restart_at_ns: int = 0
    hung: bool = False  # the host killed this run for a beat that stopped (its exit: "hung")
    beat_silence_max_s: float = 0.0  # the worst beat silence the host saw of this role


@dataclass(frozen=True, slots=True)
class Exit:
    """What the table decided about an exit: its reason and, unless stopping, the wait."""

    name: str
    reason: str
    uptime_s: float
    restart_in_s: float | None  # None: not restarted (the host is stopping)
    failures: int


@dataclass
class ProcessTable:
    roles: Iterable[tuple[str, str]]  # (name, role) of every process the host runs
    backoff: Backoff = field(default_factory=Backoff)
    rand: Callable[[], float] = lambda: 1.0
    start_wait_ns: int = 30 * _NS  # a stage that never gets ready holds the next this long

    def __post_init__(self) -> None:
        slots = []
        for name, role in self.roles:
            if role not in START_ORDER:
                raise ValueError(f"unknown role {role!r} (one of {', '.join(START_ORDER)})")
            slots.append(Slot(name, role, START_ORDER.index(role)))
        if len({s.name for s in slots}) != len(slots):
            raise ValueError("process names must be unique")
        # stable sort: by stage, then in the order given (writer-0 before writer-1)
        self.slots: dict[str, Slot] = {s.name: s for s in sorted(slots, key=lambda s: s.stage)}
        self.stopping = False
        self.restart_counts: Counter[tuple[str, str, str]] = Counter()  # (role, name, reason)
        self._stage_opened_ns: dict[int, int] = {}

    # -- what to start -------------------------------------------------------------------------
    def _stage_open(self, stage: int, now_ns: int) -> bool:
        """May the first start of ``stage`` happen: every earlier role ready, or waited enough."""
        earlier = [s for s in self.slots.values() if s.stage < stage]
        if all(s.ready for s in earlier):
            return True
        opened = max((self._stage_opened_ns.get(s.stage, now_ns) for s in earlier), default=0)
        return now_ns - opened >= self.start_wait_ns

    def due(self, now_ns: int) -> list[str]:
        """Names to start now, in start order."""
        if self.stopping:
            return []
        out = []
        for s in self.slots.values():
            first = s.state is SlotState.WAITING and self._stage_open(s.stage, now_ns)
            again = s.state is SlotState.BACKOFF and s.restart_at_ns <= now_ns
            if first or again:
                out.append(s.name)
        return out

    def next_due_ns(self, now_ns: int) -> int | None:
        """When ``due`` may next return something (None: only an event can change it)."""
        if self.stopping:
            return None
        times = [s.restart_at_ns for s in self.slots.values() if s.state is SlotState.BACKOFF]
        if any(s.state is SlotState.WAITING for s in self.slots.values()):
            opened = list(self._stage_opened_ns.values())
            times.append(max(opened, default=now_ns) + self.start_wait_ns)
        return min(times) if times else None

    # -- what happened -------------------------------------------------------------------------
    def started(self, name: str, pid: int, now_ns: int, wall_ms: int) -> Slot:
        s = self.slots[name]
        if s.starts:
            s.restarts += 1
        s.starts += 1
        s.state, s.pid, s.ready, s.hung = SlotState.RUNNING, pid, False, False
        s.started_ns, s.up_since_ms = now_ns, wall_ms
        self._stage_opened_ns.setdefault(s.stage, now_ns)
        return s

    def mark_ready(self, name: str) -> None:
        s = self.slots[name]
        if s.state is SlotState.RUNNING:
            s.ready = True

    def mark_hung(self, name: str) -> bool:
        """The host is killing ``name`` for a stopped beat: its exit counts as ``hung``. False
        when it is not running (stopping already, or gone): nothing to kill."""
        s = self.slots[name]
        if s.state is not SlotState.RUNNING or s.hung:
            return False
        s.hung = True
        return True

    def exited(self, name: str, returncode: int, now_ns: int) -> Exit:
        """A role process ended: counted by reason, and (unless stopping) scheduled again."""
        s = self.slots[name]
        reason = HUNG if s.hung else exit_reason(returncode)
        uptime_ns = now_ns - s.started_ns
        s.pid, s.ready, s.last_reason = 0, False, reason
        if self.stopping or s.state is SlotState.STOPPING:
            s.state = SlotState.STOPPED
            return Exit(name, reason, uptime_ns / _NS, None, s.failures)
        self.restart_counts[(s.role, s.name, reason)] += 1
        if uptime_ns >= self.backoff.stable_s * _NS:
            s.failures = 0  # it had settled: this crash is news, not a loop
        s.failures += 1
        delay = self.backoff.delay_s(s.failures, self.rand())
        s.state, s.restart_at_ns = SlotState.BACKOFF, now_ns + int(delay * _NS)
        return Exit(name, reason, uptime_ns / _NS, delay, s.failures)

    # -- stopping ------------------------------------------------------------------------------
    def stop(self) -> list[tuple[str, list[str]]]:
        """From now on nothing starts; the stages to stop, in ``STOP_ORDER``, each as
        (role, names of its processes still running), empty stages left out."""
        self.stopping = True
        stages: list[tuple[str, list[str]]] = []
        for role in STOP_ORDER:
            stage = START_ORDER.index(role)
            names = []
            for s in self.slots.values():
                if s.stage != stage:
                    continue
                if s.state is SlotState.RUNNING:
                    names.append(s.name)
                elif s.state in (SlotState.WAITING, SlotState.BACKOFF):
                    s.state = SlotState.STOPPED  # never (re)started: nothing to stop
            if names:
                stages.append((role, names))
        return stages

    def stopping_now(self, name: str) -> None:
        s = self.slots[name]
        if s.state is SlotState.RUNNING:
            s.state = SlotState.STOPPING

    # -- what the admin API reads --------------------------------------------------------------
    def running(self) -> list[Slot]:
        return [
            s for s in self.slots.values() if s.state in (SlotState.RUNNING, SlotState.STOPPING)
        ]

    def all_up(self) -> bool:
        return all(s.state is SlotState.RUNNING for s in self.slots.values())

    def all_ready(self) -> bool:
        return all(s.state is SlotState.RUNNING and s.ready for s in self.slots.values())
