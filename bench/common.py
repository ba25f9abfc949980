"""Shared helpers for the benchmarks: the one row type, statistics, machine facts, process setup."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import resource
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from monotape.loadgen.launch import Samples
from monotape.metric_names import CPU_WAIT

__all__ = [
    "Row",
    "box_gauge_ms",
    "cpu_waits",
    "goal",
    "machine_summary",
    "median_min_max",
    "most_waiting",
    "per_second",
    "percentile",
    "pin_to_cpu",
    "print_rows",
    "raise_nofile",
    "row",
    "run_queue_wait_s",
    "waits_text",
]


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the benchmark table: what every bench module's ``run(quick)`` returns."""

    benchmark: str
    variant: str
    value: float | None  # the median; None: not measured here (the note says why)
    unit: str
    min: float | None = None
    max: float | None = None
    ratio: float | None = None  # value / the peer's value
    peer: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready fields (what ``python -m bench.<room>.bench_x`` prints)."""
        return dataclasses.asdict(self)


def row(
    benchmark: str,
    variant: str,
    value: float,
    unit: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    ratio: float | None = None,
    peer: str = "",
    note: str = "",
) -> Row:
    """A measured row; min and max default to the value (one run)."""
    return Row(
        benchmark,
        variant,
        value,
        unit,
        min=value if lo is None else lo,
        max=value if hi is None else hi,
        ratio=ratio,
        peer=peer,
        note=note,
    )


def print_rows(rows: Sequence[Row]) -> None:
    """One JSON object per row on stdout (each module's ``main``)."""
    for r in rows:
        print(json.dumps(r.as_dict(), ensure_ascii=False))


def box_gauge_ms(loops: int = 1_000_000, tries: int = 3) -> float:
    """CPU milliseconds of a fixed pure-Python loop in this process, the least of ``tries``: how
    fast the box runs right now (lower is faster). This VM has run the same work ~1.8x slower
    within the hour (docs/benchmarks.md, 2026-12-03); taken before each run, the gauge says
    which runs ran on the same box and which must not be compared."""
    best = float("inf")
    for _ in range(tries):
        t = time.process_time()
        total = 0
        for i in range(loops):
            total += i
        best = min(best, time.process_time() - t)
    return best * 1e3


def cpu_waits(m0: Samples, m1: Samples, window: float) -> dict[str, float]:
    """Seconds per second each process's loop was runnable but had no core, from the
    ``monotape_cpu_wait_seconds_total`` of two /metrics samples (the node's has no ``process``
    label: "node"; a process that restarted inside the window counts from its start)."""
    out: dict[str, float] = {}
    for (name, labels), v in m1.items():
        if name != CPU_WAIT or window <= 0:
            continue
        before = m0.get((name, labels))
        grew = v - before if before is not None and v >= before else v
        out[dict(labels).get("process", "node")] = grew / window
    return out


def waits_text(waits: dict[str, float]) -> str:
    """Every process's wait for a core, for a log line ("not read" without)."""
    return ", ".join(f"{n} {w:.2f}" for n, w in sorted(waits.items())) or "not read"


def most_waiting(waits: dict[str, float]) -> str:
    """The process that waited longest for a core, for a row's note ("not read" without)."""
    if not waits:
        return "not read"
    name = max(waits, key=lambda n: waits[n])
    return f"{name} {waits[name]:.2f}"


def median_min_max(values: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``values``: a value that occurred,
    as HdrHistogram reports one; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def goal(value: float, limit: float, what: str) -> str:
    """A goal line for a row's note: ``what <= limit: met`` or ``NOT met``."""
    return f"goal {what} <= {limit:g}: {'met' if value <= limit else 'NOT met'}"


def per_second(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]], window: float
) -> dict[str, float]:
    """name -> (pid, a running total such as CPU seconds) at two reads: each name's growth per
    second over the window. A process that restarted inside it (another pid) counts from its
    own start, as does one that was not there at the first read."""
    out = {}
    for name, (pid, v1) in after.items():
        pid0, v0 = before.get(name, (pid, 0.0))
        out[name] = (v1 - (v0 if pid0 == pid else 0.0)) / window
    return out


def run_queue_wait_s(pid: int) -> float | None:
    """Seconds every thread of process ``pid`` has spent runnable on a run queue without a core
    since it started: the second field of /proc/PID/task/TID/schedstat, summed over threads.
    None when the process is gone or the kernel keeps no schedstat. Any process can be read
    this way, a load client as well as a server's role."""
    total_ns, read = 0, False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                total_ns += int(f.read().split()[1])
            read = True
        except (OSError, IndexError, ValueError):  # a thread that left between the two reads
            continue
    return total_ns / 1e9 if read else None


def raise_nofile() -> tuple[int, int]:
    """Soft RLIMIT_NOFILE up to the hard limit (1,000 sockets per side need > 1,024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 65_536)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def pin_to_cpu(cpu: int) -> bool:
    """Pin this process to one CPU; False (and no pinning) if that CPU is not available."""
    try:
        available = os.sched_getaffinity(0)
        if cpu not in available:
            return False
        os.sched_setaffinity(0, {cpu})
        return True
    except (AttributeError, OSError):
        return False


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_summary() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{_cpu_model()}, {cores} cores, Linux {platform.release()}, "
        f"Python {platform.python_version()} ({platform.python_implementation()}), {now}"
    )
