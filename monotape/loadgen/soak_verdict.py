"""The soak's verdict and its report lines: pure functions of the samples, so they are
unit-tested apart from the hours a soak normally takes (docs/soak.md explains each check).

One verdict for both shapes of the node, the one process and the host of processes
(``monotape run --writers N``: tasks, fds and RSS judged per process, its supervision as the
``processes`` check), so the two runs differ only where the node does."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

import msgspec

from monotape import metric_names as m
from monotape.loadgen.churn import ChurnProgress, ChurnReport
from monotape.loadgen.soak_plan import Sample, Tolerances, Usage

__all__ = [
    "NO_TRIPS_ANSWER",
    "Check",
    "SoakVerdict",
    "format_report_line",
    "format_verdict",
    "hms",
    "judge",
]

MAX_TRIP_LINES: Final = 20
_MB: Final = 1024 * 1024
# A host whose /admin/invariants did not answer for every writer: its trips are not judged.
NO_TRIPS_ANSWER: Final = "/admin/invariants trips: not every writer answered"


class Check(msgspec.Struct, frozen=True):
    name: str
    ok: bool
    detail: str


class SoakVerdict(msgspec.Struct, kw_only=True, frozen=True):
    passed: bool
    checks: list[Check]
    baseline: Sample | None
    final: Sample | None
    samples: list[Sample]  # every successful scrape, baseline and final included
    missed_scrapes: int
    churn: ChurnReport | None
    tripped_log_lines: list[str]
    invariant_trips: dict[str, int] | None  # GET /admin/invariants "trips" at the end
    server_exit: int | None
    elapsed_s: float

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)


# -- the report line ---------------------------------------------------------------------------
def hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _num(v: float | None, fmt: str = ".0f") -> str:
    return "-" if v is None else format(v, fmt)


def format_report_line(s: Sample, p: ChurnProgress | None, phase: str) -> str:
    """One line: elapsed, open connections, churn totals, invariants, RSS, fds, tasks, p99."""
    if not s.invariants:
        inv = "inv ?"
    elif s.tripped:
        inv = "inv TRIPPED:" + ",".join(s.tripped)
    else:
        inv = "inv 0"
    churn = (
        f"opened {p.opened:7d}  closed {p.closed:7d}  rst {p.rst:6d}  errors {p.errors:3d}"
        if p is not None
        else f"opened {'-':>7}  closed {'-':>7}  rst {'-':>6}  errors {'-':>3}"
    )
    rss = None if s.rss_bytes is None else s.rss_bytes / _MB
    p99 = None if s.p99_write_s is None else s.p99_write_s * 1e3
    return (
        f"soak {hms(s.elapsed_s)} {phase:<7} open {_num(s.connections):>5}  {churn}  {inv}"
        f"  rss {_num(rss, '.1f')}MB  fds {_num(s.fds)}  tasks {_num(s.tasks)}"
        f"  p99w {_num(p99, '.2f')}ms"
    )


# -- the verdict -------------------------------------------------------------------------------
def _mb(v: float) -> str:
    return f"{v / _MB:.1f} MB"


def judge(
    *,
    baseline: Sample | None,
    samples: Sequence[Sample],
    final: Sample | None,
    churn: ChurnReport | None,
    tolerances: Tolerances,
    tripped_log_lines: Iterable[str] = (),
    invariant_trips: Mapping[str, int] | None = None,
    server_exit: int | None = 0,
    missed_scrapes: int = 0,
    elapsed_s: float = 0.0,
    writers: int = 0,
) -> SoakVerdict:
    """PASS only if every check holds; each failed check names its numbers (docs/soak.md).

    ``writers`` > 0: the samples are a host's (``monotape run --writers N``): tasks, fds and
    RSS are judged per process against its own baseline (the same bounds), and ``processes``
    asks that every process stayed up, none restarted and every writer served terminals."""
    tol = tolerances
    on_host = writers > 0
    # A writer missing from the final scrape would make its connections and entries look like 0.
    silent = (
        [f"writer-{i}" for i in range(writers) if f"writer-{i}" not in final.processes]
        if on_host and final is not None
        else []
    )
    trips = list(tripped_log_lines)
    checks: list[Check] = []

    # 1. Invariants: 0 at every sample, present at all, and never logged as tripped.
    seen = [s for s in samples if s.invariants]
    bad = [(s.elapsed_s, name) for s in samples for name in s.tripped]
    if bad:
        first: dict[str, float] = {}
        count: collections.Counter[str] = collections.Counter()
        for t, name in bad:
            first.setdefault(name, t)
            count[name] += 1
        detail = "; ".join(
            f"{name}=1 in {count[name]} of {len(seen)} samples, first at {hms(first[name])}"
            for name in sorted(first)
        )
        checks.append(Check("invariants", False, detail))
    elif not seen:
        checks.append(Check("invariants", False, f"no sample carried {m.INVARIANT_VIOLATION}"))
    elif any(invariant_trips.values() if invariant_trips else ()):
        counted = {k: v for k, v in sorted((invariant_trips or {}).items()) if v}
        detail = ", ".join(f"{k} tripped {v}x" for k, v in counted.items())
        checks.append(Check("invariants", False, f"{detail} (GET /admin/invariants trips)"))
    elif trips:
        checks.append(
            Check("invariants", False, f"{len(trips)} invariant_tripped log line(s): {trips[0]}")
        )
    else:
        names = sorted({n for s in seen for n in s.invariants})
        also = "" if invariant_trips is None else ", no trip in /admin/invariants"
        if on_host:
            # The host's /admin/invariants sums every writer's trips (host/admin_merge.py).
            also = " (each the worst writer's)" + (also or f"; {NO_TRIPS_ANSWER}")
        detail = f"{', '.join(names)} 0 in {len(seen)} samples{also}"
        checks.append(Check("invariants", True, detail))

    # 2. Scrapes: enough samples read that "at every sample" means something.
    total = len(samples) + missed_scrapes
    missing = [w for w, s in (("baseline", baseline), ("final", final)) if s is None]
    if missing or (total and missed_scrapes > tol.max_missed_share * total):
        detail = f"{missed_scrapes} of {total} scrapes failed"
        if missing:
            detail += f"; no {' and no '.join(missing)} sample"
        checks.append(Check("scrapes", False, detail))
    else:
        checks.append(Check("scrapes", True, f"{len(samples)} read, {missed_scrapes} failed"))

    # 3. Connections and indexes: exactly empty once every client has left.
    if silent:
        gone = f"no final sample from {', '.join(silent)}"
        checks.append(Check("connections", False, gone))
        checks.append(Check("index_empty", False, gone))
    elif final is None or final.connections is None:
        checks.append(Check("connections", False, f"no final {m.CONNECTIONS}"))
    else:
        checks.append(
            Check("connections", final.connections == 0, f"{final.connections:.0f} open (want 0)")
        )
    if silent:
        pass  # said above
    elif final is None or not final.index_entries:
        checks.append(Check("index_empty", False, f"no final {m.INDEX_ENTRIES}"))
    else:
        leaked = {k: v for k, v in sorted(final.index_entries.items()) if v != 0}
        detail = (
            ", ".join(f"{k}={v:.0f}" for k, v in leaked.items()) + " (want 0)"
            if leaked
            else f"all {len(final.index_entries)} indexes 0"
        )
        checks.append(Check("index_empty", not leaked, detail))

    # 4. Tasks, fds, RSS against the baseline.
    def against(name: str, b: float | None, f: float | None, limit: float, fmt: str) -> None:
        if b is None or f is None:
            checks.append(Check(name, False, "no baseline or final value"))
            return
        ok = f <= limit
        if fmt == "mb":
            detail = f"{_mb(f)} vs baseline {_mb(b)} (limit {_mb(limit)})"
        else:
            detail = f"{f:.0f} vs baseline {b:.0f} (limit {limit:.0f})"
        checks.append(Check(name, ok, detail))

    if on_host:
        base = baseline.processes if baseline else {}
        end = final.processes if final else {}
        slack = tol.rss_slack_mb * _MB
        checks.append(_per_process("tasks", "tasks", base, end, lambda b: b + tol.task_slack))
        checks.append(_per_process("fds", "fds", base, end, lambda b: b + tol.fd_slack))
        checks.append(
            _per_process("rss", "rss_bytes", base, end, lambda b: b * tol.rss_ratio + slack)
        )
    else:
        b_tasks = baseline.tasks if baseline else None
        b_fds = baseline.fds if baseline else None
        b_rss = baseline.rss_bytes if baseline else None
        against(
            "tasks",
            b_tasks,
            final.tasks if final else None,
            (b_tasks or 0) + tol.task_slack,
            "n",
        )
        against("fds", b_fds, final.fds if final else None, (b_fds or 0) + tol.fd_slack, "n")
        against(
            "rss",
            b_rss,
            final.rss_bytes if final else None,
            (b_rss or 0) * tol.rss_ratio + tol.rss_slack_mb * _MB,
            "mb",
        )

    # 5. The churn: it ran, and without errors or stragglers.
    if churn is None:
        checks.append(Check("churn", False, "the churn did not report"))
    else:
        problems = []
        if churn.opened == 0:
            problems.append("no session opened")
        if churn.errors:
            sample = f" (e.g. {churn.error_samples[0]})" if churn.error_samples else ""
            problems.append(f"{churn.errors} errors{sample}")
        if churn.cancelled:
            problems.append(f"{churn.cancelled} sessions cancelled after the drain")
        unanswered = churn.timeouts + churn.gave_up
        if unanswered > tol.max_unanswered_share * churn.attempts:
            share = unanswered / churn.attempts if churn.attempts else 1.0
            problems.append(
                f"{churn.timeouts} handshake timeouts + {churn.gave_up} gave up = {share:.1%} "
                f"of {churn.attempts} upgrade attempts (limit {tol.max_unanswered_share:.0%})"
            )
        summary = (
            f"opened {churn.opened}, closed {churn.closed}, rst {churn.rst}, "
            f"errors {churn.errors}, skipped {churn.skipped}, peak open {churn.peak_open}, "
            f"upgrade attempts {churn.attempts}, 503 refusals {churn.rejected}, "
            f"handshake timeouts {churn.timeouts} (retried; {churn.gave_up} gave up)"
        )
        checks.append(
            Check(
                "churn",
                not problems,
                "; ".join(problems) + f" [{summary}]" if problems else summary,
            )
        )

    # 6. The processes of a host: all up, none restarted, every writer served terminals.
    checks.append(_processes(baseline, final, writers))

    # 7. The server stopped cleanly on SIGTERM.
    checks.append(
        Check(
            "server_exit",
            server_exit == 0,
            "exit 0 on SIGTERM"
            if server_exit == 0
            else ("did not exit on SIGTERM" if server_exit is None else f"exit {server_exit}"),
        )
    )
    return SoakVerdict(
        passed=all(c.ok for c in checks),
        checks=checks,
        baseline=baseline,
        final=final,
        samples=list(samples),
        missed_scrapes=missed_scrapes,
        churn=churn,
        tripped_log_lines=trips[:MAX_TRIP_LINES],
        invariant_trips=dict(invariant_trips) if invariant_trips is not None else None,
        server_exit=server_exit,
        elapsed_s=round(elapsed_s, 3),
    )


def _per_process(
    name: str,
    field: str,
    base: Mapping[str, Usage],
    end: Mapping[str, Usage],
    limit_of: Callable[[float], float],
) -> Check:
    """One of tasks, fds, RSS on a host: every process against its own baseline. A process
    seen at one end only is not judged, and fails the check (it vanished, or was missed)."""
    rows: list[tuple[str, float, float, float]] = []
    unjudged: list[str] = []
    for proc in sorted(base.keys() | end.keys()):
        b = getattr(base[proc], field) if proc in base else None
        f = getattr(end[proc], field) if proc in end else None
        if b is not None and f is not None:
            rows.append((proc, b, f, limit_of(b)))
        elif b is not None or f is not None:
            unjudged.append(proc)
    if not rows:
        return Check(name, False, "no baseline or final value of any process")
    over = [r for r in rows if r[2] > r[3]]
    shown = over or [max(rows, key=lambda r: r[2] - r[3])]  # else the closest to its limit

    def show(v: float) -> str:
        return _mb(v) if field == "rss_bytes" else f"{v:.0f}"

    detail = "; ".join(
        f"{p} {show(f)} vs baseline {show(b)} (limit {show(lim)})" for p, b, f, lim in shown
    )
    if not over:
        detail = f"{len(rows)} processes within, closest: {detail}"
    if unjudged:
        detail += f"; no baseline or no final value from {', '.join(unjudged)}"
    return Check(name, not over and not unjudged, detail)


def _processes(baseline: Sample | None, final: Sample | None, writers: int) -> Check:
    """A host's supervision over the run. A process that crashed and came back hides what it
    leaked (its gauges start again from nothing), so a restart fails the soak; and a writer
    that served no terminal was not soaked at all."""
    if writers == 0:
        return Check("processes", True, "one process (no host)")
    if final is None or not final.up:
        return Check("processes", False, f"no final {m.PROCESS_UP}")
    start_up = baseline.up if baseline else {}
    start_restarts = baseline.restarts if baseline else {}
    start_served = baseline.served if baseline else {}
    problems = []
    if down := sorted(p for p, v in final.up.items() if v != 1):
        problems.append(f"down at the end: {', '.join(down)}")
    if gone := sorted(start_up.keys() - final.up.keys()):
        problems.append(f"gone at the end: {', '.join(gone)}")
    restarted = {k: v - start_restarts.get(k, 0.0) for k, v in sorted(final.restarts.items())}
    if crashed := {k: v for k, v in restarted.items() if v > 0}:
        problems.append("restarted: " + ", ".join(f"{k} x{v:.0f}" for k, v in crashed.items()))
    names = [f"writer-{i}" for i in range(writers)]
    served = {w: final.served.get(w, 0.0) - start_served.get(w, 0.0) for w in names}
    if idle := [w for w, n in served.items() if n <= 0]:
        problems.append(f"served no terminal: {', '.join(idle)}")
    split = ", ".join(f"{w} {n:.0f}" for w, n in served.items())
    if problems:
        return Check("processes", False, "; ".join(problems) + f" [terminals served: {split}]")
    return Check(
        "processes", True, f"{len(final.up)} up, none restarted; terminals served: {split}"
    )


def format_verdict(v: SoakVerdict) -> str:
    lines = [f"soak verdict: {'PASS' if v.passed else 'FAIL'}  ({hms(v.elapsed_s)})"]
    for c in v.checks:
        lines.append(f"  {'ok  ' if c.ok else 'FAIL'} {c.name:<12} {c.detail}")
    return "\n".join(lines)
