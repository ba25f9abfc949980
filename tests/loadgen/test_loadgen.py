"""The storm load generator, fast: trace format, storm and Poisson shapes, report math."""

from __future__ import annotations

import io
import json
import random
import sys
from pathlib import Path

import msgspec
import pytest

from monotape.loadgen import (
    LoadConfig,
    LoadRefused,
    LoadReport,
    Percentiles,
    SizeWeight,
    Trace,
    TraceError,
    compare,
    load_trace,
    parse_trace,
    percentile,
    plan_sessions,
    poisson_like,
    run_load,
    storm_trace,
    summarize,
)
from monotape.loadgen.report import write_progress
from monotape.loadgen.worker import last_gap

TRACES = Path(__file__).parents[1] / "traces"


# -- the format -----------------------------------------------------------------------------
def test_sample_traces_load() -> None:
    storm = load_trace(TRACES / "open_storm_small.json")
    contrast = load_trace(TRACES / "poisson_small.json")
    assert storm.duration_s == contrast.duration_s == 20
    assert storm.total_connects == contrast.total_connects
    assert max(storm.connects) >= 5 * max(contrast.connects)


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"connects": [5, -1], "disconnects": [0, 0]}, "$.connects[1]"),
        ({"connects": [5, 1], "disconnects": [0]}, "$.disconnects"),
        ({"connects": [5, 1], "disconnects": [0, 6]}, "$.disconnects[1]"),
        ({"connects": [5, 1], "disconnects": [1, 0]}, "$.disconnects[0]"),
        ({"connects": [1], "disconnects": [0], "abrupt_fraction": 1.5}, "$.abrupt_fraction"),
        ({"connects": [1], "disconnects": [0], "cardinality": []}, "$.cardinality"),
        (
            {"connects": [1], "disconnects": [0], "cardinality": [{"size": 0, "weight": 1}]},
            "$.cardinality[0].size",
        ),
        (
            {"connects": [1], "disconnects": [0], "cardinality": [{"size": 3, "weight": 0}]},
            "$.cardinality[0].weight",
        ),
        ({"connects": [1], "disconnects": [0], "version": 2}, "$.version"),
        ({"connects": [1], "disconnects": [0], "arrivals": 3}, "arrivals"),
        ({"disconnects": [0]}, "connects"),
        ({"connects": [], "disconnects": []}, "$.connects"),
    ],
)
def test_trace_errors_name_the_field(doc: dict[str, object], field: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_trace(json.dumps(doc))
    assert field in str(info.value)


def test_load_trace_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"bad_negative\.json.*\$\.connects\[1\]"):
        load_trace(TRACES / "bad_negative.json")
    with pytest.raises(TraceError, match=r"bad_disconnects\.json.*\$\.disconnects\[0\]"):
        load_trace(TRACES / "bad_disconnects.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(TraceError, match="not JSON"):
        load_trace(tmp_path / "x.json")
    with pytest.raises(TraceError, match="missing"):
        load_trace(tmp_path / "missing.json")


def test_round_trip() -> None:
    t = storm_trace(terminals=300, duration_s=20, releases=(12,))
    assert parse_trace(msgspec.json.encode(t)) == t


# -- the storm generator --------------------------------------------------------------------
@pytest.mark.parametrize("spread", [1, 2])
def test_storm_shape(spread: int) -> None:
    t = storm_trace(
        terminals=2_000,
        duration_s=40,
        open_at_s=5,
        open_spread_s=spread,
        releases=(20, 30),
        release_share=0.5,
        baseline_per_s=2.0,
        seed=4,
    )
    assert t.duration_s == 40
    # the open: every terminal lands inside the 1-2 s window
    assert sum(t.connects[5 : 5 + spread]) == 2_000
    # the disconnect wave comes first: the second before the open drops everyone connected
    assert t.disconnects[4] == sum(t.connects[:4]) - sum(t.disconnects[:4])
    assert t.connects[4] == 0
    # each release: a disconnect wave, then the same number reconnecting the next second
    for r in (20, 30):
        assert t.disconnects[r - 1] >= 900
        assert t.connects[r] == t.disconnects[r - 1]
    # quiet elsewhere
    loud = {5, 6, 20, 30} if spread == 2 else {5, 20, 30}
    assert all(c < 20 for i, c in enumerate(t.connects) if i not in loud)
    waves = t.waves()
    assert [w[0] for w in waves] == [5, 20, 30]
    assert waves[0][2] == 2_000
    assert t.last_wave_s() == 30
    baseline = t.total_connects - 2_000 - t.connects[20] - t.connects[30]
    assert 0 < baseline < 4 * 40


def test_storm_is_deterministic_and_validates() -> None:
    assert storm_trace(seed=9) == storm_trace(seed=9)
    with pytest.raises(ValueError, match="1-2 s"):
        storm_trace(open_spread_s=3)
    with pytest.raises(ValueError, match="releases"):
        storm_trace(duration_s=30, open_at_s=5, releases=(29,))


# -- the Poisson contrast -------------------------------------------------------------------
def test_poisson_contrast_same_mean_no_spike() -> None:
    storm = storm_trace(terminals=2_000, duration_s=60, releases=(30, 45), seed=2)
    flat = poisson_like(storm, seed=2)
    assert flat.duration_s == storm.duration_s
    assert flat.total_connects == storm.total_connects
    assert flat.mean_connects_per_s == storm.mean_connects_per_s
    assert abs(flat.total_disconnects - storm.total_disconnects) <= storm.total_disconnects // 10
    mean = flat.mean_connects_per_s
    assert max(flat.connects) < mean + 6 * mean**0.5  # Poisson-sized seconds only
    assert max(flat.connects) * 10 < max(storm.connects)  # far below the storm's spike
    assert flat.waves() == []
    assert flat.cardinality == storm.cardinality
    assert flat.abrupt_fraction == storm.abrupt_fraction


def test_poisson_like_is_a_valid_trace() -> None:
    flat = poisson_like(storm_trace(terminals=500, duration_s=20, releases=(12,)), seed=5)
    assert parse_trace(msgspec.json.encode(flat)) == flat


# -- the plan -------------------------------------------------------------------------------
def test_plan_follows_the_trace() -> None:
    t = storm_trace(terminals=600, duration_s=25, releases=(15,), abrupt_fraction=0.5, seed=1)
    plans = plan_sessions(t, seed=1)
    assert len(plans) == t.total_connects
    for second in range(t.duration_s):
        starts = [p for p in plans if int(p.connect_at) == second]
        ends = [p for p in plans if p.disconnect_at is not None and int(p.disconnect_at) == second]
        assert len(starts) == t.connects[second]
        assert len(ends) == t.disconnects[second]
    for p in plans:
        if p.disconnect_at is not None:
            assert int(p.connect_at) < int(p.disconnect_at)
    leavers = [p for p in plans if p.disconnect_at is not None]
    assert 0.35 < sum(p.abrupt for p in leavers) / len(leavers) < 0.65
    sizes = {p.size for p in plans}
    assert sizes <= {c.size for c in t.cardinality}
    assert plan_sessions(t, seed=1) == plans


def test_plan_cardinality_weights() -> None:
    t = Trace(
        connects=[5_000],
        disconnects=[0],
        cardinality=[SizeWeight(3, 3.0), SizeWeight(30, 1.0)],
    )
    sizes = [p.size for p in plan_sessions(t, seed=3)]
    assert 0.72 < sizes.count(3) / len(sizes) < 0.78


# -- report math ----------------------------------------------------------------------------
def test_percentile_nearest_rank() -> None:
    v = [float(i) for i in range(1, 101)]  # 1..100
    assert percentile(v, 50) == 50
    assert percentile(v, 90) == 90
    assert percentile(v, 99) == 99
    assert percentile(v, 100) == 100
    assert percentile(v, 0) == 1
    assert percentile([7.0], 99) == 7
    assert percentile([], 50) == 0.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2  # ceil(0.5 * 4) = 2nd value
    assert percentile([1.0, 2.0, 3.0, 4.0], 51) == 3
    with pytest.raises(ValueError):
        percentile(v, 101)


def test_summarize_sorts_and_agrees_with_a_brute_force() -> None:
    rng = random.Random(1)
    values = [rng.expovariate(1 / 40) for _ in range(1_001)]
    s = summarize(values)
    ordered = sorted(values)
    assert s.count == 1_001
    assert s.max == round(ordered[-1], 3)
    for p, got in ((50, s.p50), (90, s.p90), (99, s.p99)):
        below = sum(1 for x in values if x <= got + 1e-3)
        assert below >= p / 100 * len(values)
        assert sum(1 for x in values if x < got - 1e-3) < p / 100 * len(values)


@pytest.mark.parametrize(
    ("due", "ups", "expected"),
    [
        ((5.0, 10.0), [(4.0, 10.0)], -1),  # up the whole time
        ((5.0, 10.0), [(6.5, 10.0)], 6),  # came up at 6.5: seconds 5 and 6 were not covered
        ((5.0, 10.0), [(5.0, 7.0), (8.0, 10.0)], 7),  # a hole at second 7
        ((5.0, 10.0), [], 9),  # never up
        ((5.0, 10.0), [(5.0, 8.2)], 9),  # lost at 8.2 and never back: 9 is the last gap
        ((5.2, 5.9), [], -1),  # no whole second due
    ],
)
def test_last_gap(due: tuple[float, float], ups: list[tuple[float, float]], expected: int) -> None:
    assert last_gap(due[0], due[1], ups) == expected


def _report(**kw: object) -> LoadReport:
    base: dict[str, object] = dict(
        url="ws://127.0.0.1:1/",
        trace="t",
        processes=2,
        elapsed_s=1.0,
        scheduled=10,
        scheduled_connects_per_s_max=10,
        mean_connects_per_s=1.0,
        connected=10,
        first_frames=10,
        connect_ms=Percentiles(10, 1, 2, 3, 4),
        first_frame_ms=Percentiles(10, 5, 6, 7, 8),
        attempts=12,
        rejected_503=2,
        retries=2,
        attempt_waves=[10, 2],
        connect_failures=0,
        disconnects_graceful=1,
        disconnects_abrupt=1,
        closed_at_end=8,
        lost=0,
        abandoned=0,
        errors=0,
        error_samples=[],
        peak_concurrent=10,
        last_wave_s=0,
        recovered_at_s=2.0,
        recovery_s=2.0,
        all_connected_at_end=True,
        due_at_end=8,
        up_at_end=8,
        auth_cache_hit_rate=0.97,
    )
    base.update(kw)
    return msgspec.convert(base, LoadReport)


def test_report_renders_and_round_trips() -> None:
    r = _report()
    table = r.format_table()
    assert "503s" in table and "1 / 2 / 3 / 4" in table and "97.0%" in table
    assert msgspec.json.decode(r.to_json(), type=LoadReport) == r
    side = compare(r, _report(rejected_503=0, connect_ms=Percentiles(10, 1, 1, 1, 1)))
    lines = {line.split("  ")[1].strip(): line for line in side.splitlines()[1:]}
    assert lines["503s"].endswith("*")
    assert not lines["attempts"].endswith("*")


# -- the target -----------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["ws://10.0.0.5:8765/", "ws://example.com/", "http://127.0.0.1/"])
def test_refuses_anything_but_loopback(url: str) -> None:
    with pytest.raises(LoadRefused, match=r"loopback|ws://"):
        run_load(url, storm_trace(terminals=10, duration_s=10, releases=()), LoadConfig())


def test_refuses_a_remote_admin_url() -> None:
    with pytest.raises(LoadRefused, match="loopback"):
        run_load(
            "ws://127.0.0.1:1/",
            storm_trace(terminals=10, duration_s=10, releases=()),
            LoadConfig(admin_url="http://10.1.1.1:8081"),
        )


def test_refusal_never_shows_the_token() -> None:
    with pytest.raises(LoadRefused) as info:
        run_load(
            "ws://10.0.0.5:1/?token=SECRET",
            storm_trace(terminals=10, duration_s=10, releases=()),
        )
    assert "SECRET" not in str(info.value)


class _Stderr(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "log"])
def test_progress_rewrites_a_terminal_line_and_appends_to_a_log(
    monkeypatch: pytest.MonkeyPatch, tty: bool
) -> None:
    err = _Stderr(tty)
    monkeypatch.setattr(sys, "stderr", err)
    write_progress("load 1.0s")
    write_progress("load 2.0s")
    assert err.getvalue() == ("\rload 1.0s\rload 2.0s" if tty else "load 1.0s\nload 2.0s\n")
