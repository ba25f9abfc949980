"""bench_ingest_roles: its helpers, and a tiny run that keeps the rows' shape and reads every
role's CPU. Never asserts a time or a ratio (speed belongs to the benchmark itself)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os

import pytest

from bench import wsclient
from bench.common import Row, goal, per_second, percentile, run_queue_wait_s
from bench.e2e import bench_ingest_roles as bench
from bench.e2e.bench_latency import Size
from tests.conftest import NO_LAG_SHEDDING

# A few thousand ticks/s, 2 s windows, 10 terminals, one writer: ~40 s on a quiet box.
TINY = bench.Plan((5_000,), 1, 2, 1, Size(5_000, 10, 1, 2, processes=1, repeats=1))


def test_percentile_is_a_value_that_occurred() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 99) == 99.0 and percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0 and percentile([], 99) == 0.0


def test_goal_says_met_or_not() -> None:
    assert goal(2.4, 2.5, "x").endswith(": met")
    assert goal(2.6, 2.5, "x").endswith("NOT met")


def test_per_second_counts_a_restarted_process_from_its_start() -> None:
    before = {"a": (1, 10.0), "b": (2, 5.0)}
    after = {"a": (1, 12.0), "b": (3, 1.0), "c": (4, 0.5)}  # b restarted, c is new
    assert per_second(before, after, 2.0) == {"a": 1.0, "b": 0.5, "c": 0.25}


def test_run_queue_wait_reads_this_process_and_not_a_gone_one() -> None:
    if not os.path.exists(f"/proc/{os.getpid()}/task"):
        pytest.skip("no /proc")
    mine = run_queue_wait_s(os.getpid())
    assert mine is None or mine >= 0  # None: a kernel without schedstat
    assert run_queue_wait_s(2**22 + 12_345) is None  # above pid_max's default


def test_marks_name_the_slowest_terminal_and_those_below_the_floor() -> None:
    with contextlib.closing(asyncio.new_event_loop()) as loop:
        done = loop.create_future()
        clients = [wsclient.CountingClient(wsclient.Counts(), "h", b"", done) for _ in "abc"]
    for c in clients:
        c.is_open, c.frame_no, c.boundaries = True, 100, 10
    marks = wsclient._Marks()
    marks.since(clients, 10.0)
    assert marks.rates(24.0)["slowest"] == -1.0  # nobody held across two samples yet
    for c, shown in zip(clients, (25, 20, 24), strict=True):
        c.frame_no, c.boundaries = 125, 10 + shown
    marks.since(clients, 11.0)
    assert marks.rates(24.0) == {"slowest": 20.0, "below": 1, "floor": 24.0}


def test_probe_stats_keep_to_the_window() -> None:
    probe = bench.FrameProbe()
    probe.arrivals += [(0.0, 1), (1.00, 10), (1.04, 11), (1.08, 12), (1.20, 15), (9.0, 99)]
    got = probe.stats(0.5, 2.0, 40.0)
    assert got.frames == 4 and got.slot_gap_p99 == 3 and not got.error
    assert got.interval_max_ms == pytest.approx(120.0)
    assert probe.stats(5.0, 6.0, 40.0).frames == 0


@pytest.mark.slow
def test_a_tiny_run_reads_every_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two real servers (the node, then a one-writer host) with no terminal, then the host
    with ten: a row per host process, handlers + sequencer beside the whole node, and the
    loaded rows; every role's CPU read, every figure finite."""
    for name, value in NO_LAG_SHEDDING.items():  # no designed 503s on a busy box
        monkeypatch.setenv(name, value)
    rows = bench.run(True, TINY, writers=1)
    assert rows and all(isinstance(r, Row) and r.benchmark and r.variant and r.unit for r in rows)
    by = {(r.benchmark, r.unit): r for r in rows}
    roles = {r.benchmark.removeprefix("ingest roles: ") for r in rows if r.unit == "µs/tick"}
    assert {"sequencer", "venue simulator", "writer-0", "host"} <= roles, roles
    assert any(name.startswith("handler") for name in roles), roles
    for r in rows:
        if r.value is not None:
            assert math.isfinite(r.value) and r.value >= 0, r
    for r in rows:
        if (
            r.unit == "µs/tick"
            and "writer" not in r.benchmark
            and r.benchmark != "ingest roles: host"
            and "standby" not in r.benchmark  # idle until a takeover: ~0 CPU is right
        ):
            assert r.value is not None and r.value > 0, r  # CPU read for every ingest role
    ingest = by[("ingest roles: handlers + sequencer", "µs/tick")]
    assert ingest.ratio is not None and ingest.peer.startswith("1 process")
    assert "goal host / node per tick <= 1.25: " in ingest.note
    assert by[("ingest roles: handlers + sequencer", "cores")].value
    assert by[("ingest roles: whole node (simulator included)", "µs/tick")].value
    loaded = {r.benchmark for r in rows if r.benchmark.startswith("ingest roles, loaded: ")}
    assert loaded == {
        "ingest roles, loaded: host's own roles",
        "ingest roles, loaded: host's own roles at full load",
        "ingest roles, loaded: handlers + sequencer",
        "ingest roles, loaded: writers per delivered frame",
        "ingest roles, loaded: sequencer frame interval p99",
        "ingest roles, loaded: slowest terminal's frames",
    }
    interval = by[("ingest roles, loaded: sequencer frame interval p99", "ms")]
    assert interval.value is not None, interval.note  # the probe terminal saw frames
    assert "every terminal >= 24 frames/s: " in interval.note
