"""Storm at the open: hydration, recovery and admission against a real ``monotape run``.

The bench starts ``monotape run`` with the launcher (``bench.e2e.pinned.start_pinned``:
loopback, free ports, a fresh temporary data directory, the tokens it mints), pinned to CPU 0
from its first instruction (``preexec_fn``, so every thread it starts inherits it), and replays
a storm with ``monotape.loadgen.run_load`` from load workers pinned to CPU 1 (the parent pins
itself before the 'spawn' workers start; they inherit it, and so do the probe connection and
the /metrics scraper). Everything is bounded: the trace's duration plus ``drain_s``, the server
stopped with SIGINT (killed if it has not left within 30 s).

The storm: ``storm_trace`` with no baseline and no release, every watchlist exactly 40 symbols
(``cardinality=[SizeWeight(40, 1)]``); full mode 6,000 terminals inside ``OPEN_SPREAD_S``
seconds, quick mode 300. The same trace and seed run twice, on two fresh servers with the same
``--rate``:

- ``admission default``: the server's own bucket (1,200 upgrades/s, burst 2,500);
- ``admission off`` (the measured peer): ``MONOTAPE_SERVER__ADMISSION_RATE_PER_S=1000000`` and
  ``MONOTAPE_SERVER__ADMISSION_BURST=1000000``.

Rows, per variant:

- ``hydrate p99``: ``GET /admin/latency?stage=hydrate&window=5m`` (admin token) after the run,
  polled until every session's subscription has landed in a rotated 10 s interval; min/max are
  p50 and max. Ratio against the seed's stated 4 ms (a stated baseline, not measured here);
  target <= 2 ms.
- ``recovery``: the LoadReport's ``recovery_s`` (every due terminal receiving from then on).
- ``connect p99``: from the wanted connect to the WebSocket open, backoffs included.
- ``503s``: the LoadReport's count; the note adds the server's own
  ``monotape_admission_rejected_total{reason=rate}`` delta.
- ``upgrades/s sustained``: sessions opened / seconds from the first to the last second (of the
  report's per-second timeline) in which a WebSocket opened.

Full mode runs each variant ``repeats`` times (3), alternating default/off on fresh servers so
drift on a shared machine hits both alike; a row's value is the median over the runs, min-max
across them, every run's figure in the note. The admission-off rows' ratio is 1; the default
rows' ratio is default / off (medians), so the effect of admission on recovery and connect p99
reads straight off the table.

Every row's note gives the CPU the load workers and the harness used over the replay (cores:
their CPU seconds, reaped children included, over its wall time): they are pinned to one core,
so a figure well under 1 says the host's processes took that core from them, and then the
storm measures its clients as much as the server. The server's side of the same question: each
server process's wait for a core over the replay (the delta of its
``monotape_cpu_wait_seconds_total``, s per s), logged per process, and the longest-waiting one
per run in the notes.

``--writers N`` (issue 12) runs the same storm against the multi-process host (``monotape run
--writers N``, not pinned: its roles spread over both cores and share ``LOAD_CPU`` with the
load workers) beside the one-process node (pinned as above), both with the default admission,
alternated on fresh servers. Extra rows per variant: ``steady state`` (recovery_s against the
issue's target of 10 s after the last wave) and ``second wave of retries`` (attempts beyond the
first retry: ``attempt_waves[2:]``; the target is none).

    .venv/bin/python -m bench.e2e.bench_storm [--quick] [--writers N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from bench.common import (
    Row,
    cpu_waits,
    median_min_max,
    most_waiting,
    print_rows,
    raise_nofile,
    row,
    waits_text,
)
from bench.e2e.pinned import LOAD_CPU, SERVER_CPU, affinity, can_pin, start_pinned
from monotape.loadgen import LoadConfig, LoadReport, SizeWeight, run_load, storm_trace
from monotape.loadgen.launch import RunningNode, Samples, sum_samples
from monotape.metric_names import ADMISSION_REJECTED, CONNECTIONS

__all__ = ["run"]

RATE = 20_000  # simulated ticks/s, the same for both variants (monotape run's default)
WATCHLIST = 40
SEED_HYDRATE_P99_MS = 4.0  # the seed system's figure: stated, not measured here
TARGET_HYDRATE_P99_MS = 2.0
OPEN_SPREAD_S = 2  # "6,000 terminals within 1-2 s"
STEADY_TARGET_S = 10.0  # issue 12: every terminal streaming within 10 s of the last wave
ADMISSION_OFF = {
    "MONOTAPE_SERVER__ADMISSION_RATE_PER_S": "1000000",
    "MONOTAPE_SERVER__ADMISSION_BURST": "1000000",
}


@dataclass(frozen=True)
class Size:
    terminals: int
    duration_s: int
    open_at_s: int
    drain_s: float
    processes: int
    repeats: int


FULL = Size(terminals=6_000, duration_s=24, open_at_s=2, drain_s=5.0, processes=2, repeats=3)
QUICK = Size(terminals=300, duration_s=6, open_at_s=1, drain_s=2.0, processes=1, repeats=1)


def _rejected_sums(samples: Samples) -> dict[str, float]:
    """The figures compared before and after a storm, summed over the node's processes
    (admission refusals: the rate bucket's only)."""
    return {
        ADMISSION_REJECTED: sum_samples(samples, ADMISSION_REJECTED, reason="rate"),
        CONNECTIONS: sum_samples(samples, CONNECTIONS),
    }


# -- one storm against one fresh server -------------------------------------------------------
@dataclass
class Outcome:
    variant: str
    report: LoadReport
    hydrate: dict[str, Any]
    rejected_rate: float  # the server's monotape_admission_rejected_total{reason=rate} delta
    connections_after: float
    upgrades_per_s: float
    open_span_s: int
    pinned: str
    wall_s: float
    # cores the load workers and this harness used over the replay (their CPU seconds / its
    # wall time): next to the one core they are pinned to, it says when the clients, not the
    # server, are what a storm on this box measures
    load_cpu: float = 0.0
    # s/s each server process's loop waited for a core over the replay (cpu_waits)
    waits: dict[str, float] = field(default_factory=dict)


def _harness_cpu_s() -> float:
    """CPU seconds of this process and of its children already reaped: the load workers once
    ``run_load`` has joined them (the server, still running, is not among them)."""
    c = psutil.Process().cpu_times()
    return float(c.user + c.system + c.children_user + c.children_system)


def _sustained(report: LoadReport) -> tuple[float, int]:
    opened = [(s.t, s.opened) for s in report.timeline if s.opened]
    if not opened:
        return 0.0, 0
    span = opened[-1][0] - opened[0][0] + 1
    return sum(n for _, n in opened) / span, span


def _hydrate(server: RunningNode, token: str, want: int, bound_s: float) -> dict[str, Any]:
    """/admin/latency for the hydrate stage, polled until ``want`` hydrations are on disk
    (intervals rotate every 10 s) or ``bound_s`` has passed."""
    deadline = time.monotonic() + bound_s
    while True:
        body = json.loads(server.get("/admin/latency?stage=hydrate&window=5m", token))
        if body.get("count", 0) >= want or time.monotonic() >= deadline:
            return dict(body)
        time.sleep(0.5)


def storm(size: Size, variant: str, env: dict[str, str], log: Any, writers: int = 0) -> Outcome:
    """One storm on a fresh server: the node pinned to SERVER_CPU (``writers`` 0) or the host
    with ``writers`` writer processes, not pinned."""
    pin = can_pin(SERVER_CPU, LOAD_CPU)
    trace = storm_trace(
        terminals=size.terminals,
        duration_s=size.duration_s,
        open_at_s=size.open_at_s,
        open_spread_s=OPEN_SPREAD_S if size.terminals > 1_000 else 1,
        releases=(),
        baseline_per_s=0.0,
        cardinality=[SizeWeight(WATCHLIST, 1.0)],
        name=f"storm-{size.terminals}x{WATCHLIST}",
        seed=1,
    )
    t0 = time.monotonic()
    server = start_pinned(
        RATE,
        env,
        cpu=SERVER_CPU if pin and not writers else None,
        sub="bench-storm",
        writers=writers,  # 0: --writers 0, the node even where the default is a host
    )
    try:
        m0 = server.metrics()
        before = _rejected_sums(m0)
        cfg = LoadConfig(
            processes=size.processes,
            admin_url=server.admin_url,
            drain_s=size.drain_s,
            open_timeout_s=10.0,
            start_timeout_s=30.0,
            seed=1,
        )
        with affinity(LOAD_CPU if pin else None):
            c0, w0 = _harness_cpu_s(), time.monotonic()
            report = run_load(server.url, trace, cfg, progress=None)
            replay_s = max(time.monotonic() - w0, 1e-9)
            load_cpu = (_harness_cpu_s() - c0) / replay_s
        m1 = server.metrics()
        after = _rejected_sums(m1)
        waits = cpu_waits(m0, m1, replay_s)
        # Every opened session subscribed once; its hydration lands on disk at the next
        # 10 s rotation.
        want = sum(s.opened for s in report.timeline)
        hydrate = _hydrate(server, server.admin_token, want, bound_s=12.0)
    finally:
        rc = server.stop(30.0)
        if rc != 0:
            log(f"  {variant}: monotape run exited {rc}; last lines:")
            for line in list(server.tail)[-5:]:
                log("    " + line.rstrip())
    rate, span = _sustained(report)
    rejected = after.get(ADMISSION_REJECTED, 0.0) - before.get(ADMISSION_REJECTED, 0.0)
    pinned = (
        f"host not pinned (both cores), load workers + harness on CPU {LOAD_CPU}"
        if pin and writers
        else f"server on CPU {SERVER_CPU}, load workers + harness on CPU {LOAD_CPU}"
        if pin
        else "not pinned (CPUs 0 and 1 not both available)"
    )
    out = Outcome(
        variant=variant,
        report=report,
        hydrate=hydrate,
        rejected_rate=rejected,
        connections_after=after.get(CONNECTIONS, 0.0),
        upgrades_per_s=rate,
        open_span_s=span,
        pinned=pinned,
        wall_s=time.monotonic() - t0,
        load_cpu=load_cpu,
        waits=waits,
    )
    r = report
    log(
        f"  {variant}: {r.connected}/{r.scheduled} connected, 503s {r.rejected_503}, "
        f"connect p99 {r.connect_ms.p99:.0f} ms, recovery {r.recovery_s} s, "
        f"hydrate p99 {hydrate.get('p99_us', 0) / 1000:.2f} ms (n={hydrate.get('count')}), "
        f"errors {r.errors}, load CPU {load_cpu:.2f} cores, {out.wall_s:.0f} s; waiting for a "
        f"core (s/s) {waits_text(waits)}"
    )
    return out


# -- rows -------------------------------------------------------------------------------------
def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _recovery(o: Outcome, size: Size) -> tuple[float, bool]:
    """recovery_s, or the trace's remaining seconds (a lower bound) when it never recovered."""
    r = o.report
    if r.recovery_s is not None:
        return float(r.recovery_s), True
    return float(size.duration_s - r.last_wave_s), False


def _runs(values: list[float], fmt: str) -> str:
    return "runs " + " / ".join(format(v, fmt) for v in values)


def _rows(
    runs: list[Outcome], peers: list[Outcome], size: Size, peer_label: str = "admission off"
) -> list[Row]:
    """One row per figure: the median over the runs (min-max across runs); ratio against the
    peer's median (``peer_label``), or against the seed's stated 4 ms for hydration."""
    o = runs[0]
    variant = o.variant
    tag = f"{variant}, {size.terminals:,} x {WATCHLIST} sym"
    peer_name = peer_label if peers else ""
    n = len(runs)

    def med(xs: list[float]) -> tuple[float, float, float]:
        return median_min_max(xs)

    hyd = [x.hydrate.get("p99_us", 0) / 1000 for x in runs]
    hyd_p50 = [x.hydrate.get("p50_us", 0) / 1000 for x in runs]
    hyd_max = [x.hydrate.get("max_us", 0) / 1000 for x in runs]
    hyd_n = [int(x.hydrate.get("count", 0)) for x in runs]
    v, lo, hi = med(hyd)
    hyd_note = (
        f"GET /admin/latency?stage=hydrate&window=5m after each run; p99 {_runs(hyd, '.3f')} ms; "
        f"p50 {_runs(hyd_p50, '.3f')} ms; max {_runs(hyd_max, '.2f')} ms; count "
        f"{_runs([float(c) for c in hyd_n], ',.0f')}; seed {SEED_HYDRATE_P99_MS:g} ms is stated, "
        f"not measured; target <= {TARGET_HYDRATE_P99_MS:g} ms "
        f"({'met' if 0 < hi <= TARGET_HYDRATE_P99_MS else 'NOT met'} in every run)"
    )
    if peers:
        peer_hyd = [x.hydrate.get("p99_us", 0) / 1000 for x in peers]
        hyd_note += f"; {peer_label} p99 {_runs(peer_hyd, '.3f')} ms"
    rows = [
        row(
            "storm: hydrate p99",
            tag,
            v,
            "ms",
            lo=lo,
            hi=hi,
            ratio=_ratio(v, SEED_HYDRATE_P99_MS),
            peer=f"seed {SEED_HYDRATE_P99_MS:g} ms (stated)",
            note=hyd_note,
        )
    ]

    rec = [_recovery(x, size) for x in runs]
    rec_v = [r for r, _ in rec]
    never = sum(1 for _, ok in rec if not ok)
    v, lo, hi = med(rec_v)
    peer_v = med([_recovery(x, size)[0] for x in peers])[0] if peers else None
    last = [x.report for x in runs]
    common = (
        f"{o.pinned}; --rate {RATE:,}; {n} run(s), variants alternated on fresh servers; "
        f"{o.report.scheduled:,} terminals, {o.report.scheduled_connects_per_s_max:,} per "
        f"second for {OPEN_SPREAD_S if size.terminals > 1_000 else 1} s, "
        f"{o.report.processes} load processes; connected "
        f"{_runs([float(r.connected) for r in last], ',.0f')}; up at end/due "
        + " / ".join(f"{r.up_at_end:,}/{r.due_at_end:,}" for r in last)
        + f"; connect failures {_runs([float(r.connect_failures) for r in last], '.0f')}; "
        f"errors {_runs([float(r.errors) for r in last], '.0f')} (of which cancelled at the "
        f"drain deadline {_runs([float(r.cancelled) for r in last], '.0f')}); server loop lag max "
        f"{_runs([(r.loop_lag_max_s or 0) * 1000 for r in last], '.0f')} ms; load workers + "
        f"harness CPU {_runs([x.load_cpu for x in runs], '.2f')} cores; the server process "
        "that waited longest for a core (s/s) " + " / ".join(most_waiting(x.waits) for x in runs)
    )
    rows.append(
        row(
            "storm: recovery",
            tag,
            v,
            "s",
            lo=lo,
            hi=hi,
            ratio=_ratio(v, peer_v) if peers else 1.0,
            peer=peer_name,
            note=(
                f"recovery_s {_runs(rec_v, '.0f')} s (recovered_at_s - last_wave_s "
                f"{o.report.last_wave_s})"
                + (
                    f"; {never} run(s) NEVER recovered inside the trace: counted as the trace's "
                    f"remaining {size.duration_s - o.report.last_wave_s} s (a lower bound)"
                    if never
                    else ""
                )
                + f"; {common}"
            ),
        )
    )

    p99 = [x.report.connect_ms.p99 for x in runs]
    v, lo, hi = med(p99)
    peer_v = med([x.report.connect_ms.p99 for x in peers])[0] if peers else None
    rows.append(
        row(
            "storm: connect p99",
            tag,
            v,
            "ms",
            lo=lo,
            hi=hi,
            ratio=_ratio(v, peer_v) if peers else 1.0,
            peer=peer_name,
            note=(
                "wanted -> WebSocket open, backoffs included; p99 "
                f"{_runs(p99, ',.0f')} ms; p50 "
                f"{_runs([x.report.connect_ms.p50 for x in runs], ',.0f')} ms; max "
                f"{_runs([x.report.connect_ms.max for x in runs], ',.0f')} ms; first frame p99 "
                f"{_runs([x.report.first_frame_ms.p99 for x in runs], ',.0f')} ms"
            ),
        )
    )

    r503 = [float(x.report.rejected_503) for x in runs]
    peer_503 = [float(x.report.rejected_503) for x in peers]
    v, lo, hi = med(r503)
    rows.append(
        row(
            "storm: 503s",
            tag,
            v,
            "503s",
            lo=lo,
            hi=hi,
            note=(
                f"{_runs(r503, '.0f')}; server monotape_admission_rejected_total{{reason=rate}} "
                f"delta {_runs([x.rejected_rate for x in runs], '.0f')}; attempts "
                f"{_runs([float(x.report.attempts) for x in runs], ',.0f')}; attempt waves "
                + " / ".join(" ".join(str(w) for w in x.report.attempt_waves[:5]) for x in runs)
                + (f"; {peer_label}: {_runs(peer_503, '.0f')}" if peers else "")
            ),
        )
    )

    ups = [x.upgrades_per_s for x in runs]
    v, lo, hi = med(ups)
    peer_v = med([x.upgrades_per_s for x in peers])[0] if peers else None
    opened = [sum(s.opened for s in x.report.timeline) for x in runs]
    peak = [float(x.report.peak_concurrent) for x in runs]
    rows.append(
        row(
            "storm: upgrades/s sustained",
            tag,
            v,
            "upgrades/s",
            lo=lo,
            hi=hi,
            ratio=_ratio(v, peer_v) if peers else 1.0,
            peer=peer_name,
            note=(
                "WebSockets opened / seconds from the first to the last second with an open "
                "(the report's per-second timeline): "
                + " / ".join(
                    f"{k:,} over {x.open_span_s} s" for k, x in zip(opened, runs, strict=True)
                )
                + f"; peak concurrent {_runs(peak, ',.0f')}"
            ),
        )
    )
    return rows


def second_wave(report: LoadReport) -> int:
    """Attempts beyond each terminal's first retry (``attempt_waves[2:]``): a storm that
    settles has none."""
    return sum(report.attempt_waves[2:])


def _steady_rows(runs: list[Outcome], size: Size) -> list[Row]:
    """Issue 12's storm target: every terminal streaming within 10 s of the last wave, and no
    second wave of retries."""
    tag = f"{runs[0].variant}, {size.terminals:,} x {WATCHLIST} sym"
    rec = [_recovery(x, size) for x in runs]
    met = [ok and r <= STEADY_TARGET_S for r, ok in rec]
    v, lo, hi = median_min_max([r for r, _ in rec])
    waves = [float(second_wave(x.report)) for x in runs]
    w, wlo, whi = median_min_max(waves)
    common = (
        f"{runs[0].pinned}; --rate {RATE:,}; {len(runs)} run(s), alternated on fresh servers; "
        f"load workers + harness CPU {_runs([x.load_cpu for x in runs], '.2f')} cores; the "
        "server process that waited longest for a core (s/s) "
        + " / ".join(most_waiting(x.waits) for x in runs)
    )
    return [
        row(
            "storm: steady state after the last wave",
            tag,
            v,
            "s",
            lo=lo,
            hi=hi,
            note=(
                "recovery_s (every due terminal receiving from then on) "
                f"{_runs([r for r, _ in rec], '.0f')} s"
                f"; target <= {STEADY_TARGET_S:g} s: {'met' if all(met) else 'NOT met'} "
                f"({met.count(True)} of {len(met)} runs); up at end/due "
                + " / ".join(f"{x.report.up_at_end:,}/{x.report.due_at_end:,}" for x in runs)
                + f"; {common}"
            ),
        ),
        row(
            "storm: second wave of retries",
            tag,
            w,
            "attempts",
            lo=wlo,
            hi=whi,
            note=(
                "attempts beyond each terminal's first retry (attempt_waves[2:]) "
                f"{_runs(waves, '.0f')}"
                "; attempt waves (first tries, 1st retries, ...) "
                + " / ".join(" ".join(str(n) for n in x.report.attempt_waves[:6]) for x in runs)
                + f"; target: none; {common}"
            ),
        ),
    ]


def compare(size: Size, writers: int, log: Any) -> list[Row]:
    """The host with ``writers`` writers against the one-process node, default admission both,
    alternated on fresh servers."""
    node: list[Outcome] = []
    host: list[Outcome] = []
    for i in range(size.repeats):
        order = [(0, node), (writers, host)][:: 1 if i % 2 == 0 else -1]
        for n, into in order:
            name = f"host, {n} writers" if n else "1 process"
            into.append(storm(size, name, {}, log, n))
    return (
        _rows(host, node, size, "1 process")
        + _steady_rows(host, size)
        + _rows(node, [], size)
        + _steady_rows(node, size)
    )


def run(quick: bool = False, writers: int = 0) -> list[Row]:
    """``writers`` 0: admission default against off on the node; N: the host against the node."""
    size = QUICK if quick else FULL
    raise_nofile()  # the server inherits it: 6,000 sockets
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if writers:
        return compare(size, writers, log)
    base: list[Outcome] = []
    off: list[Outcome] = []
    for i in range(size.repeats):  # alternate, so drift on a shared machine hits both alike
        first, second = (("default", {}), ("off", ADMISSION_OFF))[:: 1 if i % 2 == 0 else -1]
        for which, env in (first, second):
            out = storm(size, f"admission {which}", env, log)
            (base if which == "default" else off).append(out)
    return _rows(base, off, size) + _rows(off, [], size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="300 terminals instead of 6,000")
    parser.add_argument(
        "--writers",
        type=int,
        default=0,
        metavar="N",
        help="storm the host (monotape run --writers N) beside the one-process node "
        "(default 0: admission default against off on the node)",
    )
    args = parser.parse_args()
    if not 0 <= args.writers <= 16:
        parser.error("--writers must be 0-16 (the frame ring's reader slots)")
    print_rows(run(args.quick, args.writers))


if __name__ == "__main__":
    main()
