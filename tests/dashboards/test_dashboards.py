"""The panel definitions, their two renderings, and the embedded evaluator.

One definition set: names only from metric_names; the Grafana JSON is checked in and a rebuild
must match it byte for byte; the embedded evaluator computes what the PromQL means (rates per
series then summed, histogram_quantile's interpolation); the sampler's ring is bounded and never
steals the loop-lag maximum from a Prometheus scrape.
"""

from __future__ import annotations

import ast
import io
import json
import math
import subprocess
import sys
from collections.abc import Collection, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from starlette.requests import Request

from monotape import metric_names as m
from monotape.clock import FakeClock
from monotape.dashboards.evaluate import (
    evaluate,
    legend,
    quantile_of_buckets,
    quantiles_of_buckets,
)
from monotape.dashboards.grafana import DATASOURCE, RATE_INTERVAL, render_json, stale_files
from monotape.dashboards.panels import (
    DASHBOARDS,
    GC_PAUSE_THRESHOLD_MS,
    dashboard,
    gc_annotation_expr,
    promql_expressions,
    sampled_names,
)
from monotape.dashboards.queries import (
    Gauge,
    HistogramQuantile,
    Rate,
    Ratio,
    promql,
    sample_names,
)
from monotape.dashboards.sampler import (
    HISTORY_S,
    MAX_SERIES,
    SampleRing,
    SeriesKey,
    collect_samples,
)
from monotape.dashboards.view import MAX_POINTS, dashboard_data
from monotape.dashboards.web import dashboard_handlers
from monotape.histograms.gc import GcPause
from monotape.histograms.plot import PAUSE_THRESHOLD_MS
from monotape.log import set_stream
from monotape.platform.node.node import Node
from monotape.platform.role.collectors import LoopLagCollector
from monotape.platform.server.looplag import LoopLagMonitor
from tests.conftest import node_config

ROOT = Path(__file__).resolve().parents[2]
GRAFANA_DIR = ROOT / "deploy" / "grafana" / "dashboards"
DASHBOARDS_SRC = ROOT / "monotape" / "dashboards"


def _names() -> set[str]:
    return {v for k, v in vars(m).items() if k.isupper() and isinstance(v, str)}


# -- one definition set ---------------------------------------------------------------------------
def test_the_five_dashboards_of_the_desk() -> None:
    assert [d.title for d in DASHBOARDS] == [
        "Tick to glass",
        "Ordering",
        "Fan-out",
        "Admission and auth",
        "Health",
    ]
    assert len({d.uid for d in DASHBOARDS}) == len(DASHBOARDS)
    for d in DASHBOARDS:
        assert d.panels and all(p.targets for p in d.panels), d.title
        assert len({p.title for p in d.panels}) == len(d.panels), d.title
        assert dashboard(d.uid) is d
    with pytest.raises(KeyError, match="unknown dashboard"):
        dashboard("nope")
    glass = [p for p in dashboard("monotape-tick-to-glass").panels if "glass" in p.title]
    assert glass and glass[0].upper_bound and "upper bound" in glass[0].title
    assert dashboard("monotape-tick-to-glass").gc_overlay is not None
    # the overlay and the SVG plot draw the same pauses
    assert GC_PAUSE_THRESHOLD_MS == PAUSE_THRESHOLD_MS


def test_metric_names_only_from_metric_names() -> None:
    known = _names()
    suffixes = ("", "_count", "_sum", "_bucket")
    for name in sampled_names():
        assert any(name.removesuffix(s) in known for s in suffixes if name.endswith(s)), name
    # and no module of the package spells a metric name itself
    for path in DASHBOARDS_SRC.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert "monotape_" not in node.value, f"{path.name}: {node.value!r}"
                assert not node.value.startswith("process_"), f"{path.name}: {node.value!r}"


def test_promql_of_each_shape() -> None:
    assert promql(Rate(m.DUPLICATE_TICKS, by=("venue",)), "1m") == (
        "sum by (venue) (rate(monotape_duplicate_ticks_total[1m]))"
    )
    assert promql(Rate(m.AUTH_REFUSED, by=("reason",), zero_if_absent=True), "1m") == (
        "(sum by (reason) (rate(monotape_auth_refused_total[1m]))) or vector(0)"
    )
    assert (
        promql(
            Gauge(m.STAGE_LATENCY, where=(("stage", "write"), ("quantile", "0.99")), agg="max"),
            "1m",
        )
        == 'max(monotape_stage_latency_seconds{stage="write",quantile="0.99"})'
    )
    assert promql(HistogramQuantile(0.99, m.STAGE_DURATION, by=("stage",)), "5m") == (
        "histogram_quantile(0.99, sum by (le, stage) "
        "(rate(monotape_stage_duration_seconds_bucket[5m])))"
    )
    assert promql(Ratio(Rate(m.AUTH_VERIFY_SECONDS), Rate(m.AUTH_CACHE_MISSES)), "1m") == (
        "(sum(rate(monotape_auth_verify_seconds_total[1m]))) / "
        "(sum(rate(monotape_auth_cache_misses_total[1m])))"
    )
    with pytest.raises(ValueError, match="aggregation"):
        promql(Gauge(m.CONNECTIONS, agg="avg"), "1m")


def test_promql_expressions_cover_every_target_and_run_outside_grafana() -> None:
    exprs = promql_expressions()
    assert len(exprs) == sum(len(p.targets) for d in DASHBOARDS for p in d.panels)
    for title, expr in exprs:
        assert " / " in title and expr
        assert "$__" not in expr  # Grafana's variables mean nothing to a bare Prometheus
        assert expr.count("(") == expr.count(")"), expr
    assert all("[30s]" in e for _, e in promql_expressions("30s") if "rate(" in e)


def test_gc_annotation_counts_gen2_and_long_pauses() -> None:
    overlay = dashboard("monotape-tick-to-glass").gc_overlay
    assert overlay is not None
    expr = gc_annotation_expr(overlay, "1m")
    assert 'generation="2"' in expr and 'le="0.005"' in expr and expr.endswith("> 0")


# -- the Grafana rendering ------------------------------------------------------------------------
def test_grafana_json_is_checked_in_and_current(tmp_path: Path) -> None:
    assert stale_files(GRAFANA_DIR) == [], "run `monotape dashboards build`"
    # the command regenerates the same bytes
    out = tmp_path / "dashboards"
    done = subprocess.run(
        [sys.executable, "-m", "monotape", "dashboards", "build", "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.count("wrote ") == len(DASHBOARDS)
    for d in DASHBOARDS:
        assert (out / f"{d.uid}.json").read_bytes() == (GRAFANA_DIR / f"{d.uid}.json").read_bytes()
    check = subprocess.run(
        [sys.executable, "-m", "monotape", "dashboards", "build", "--check", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    (out / "monotape-health.json").write_text("{}")
    check = subprocess.run(
        [sys.executable, "-m", "monotape", "dashboards", "build", "--check", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 1 and "monotape-health.json" in check.stderr


def test_grafana_panels_are_the_definitions() -> None:
    provisioned = (ROOT / "deploy/grafana/provisioning/datasources/monotape.yml").read_text()
    assert f"uid: {DATASOURCE['uid']}" in provisioned
    for d in DASHBOARDS:
        doc = json.loads(render_json(d))
        assert doc["uid"] == d.uid and doc["title"] == d.title
        assert [p["title"] for p in doc["panels"]] == [p.title for p in d.panels]
        for panel, grafana in zip(d.panels, doc["panels"], strict=True):
            assert grafana["type"] == "timeseries"
            assert grafana["datasource"] == DATASOURCE
            assert grafana["fieldConfig"]["defaults"]["unit"] == panel.unit
            exprs = [t["expr"] for t in grafana["targets"]]
            assert exprs == [promql(t.query, RATE_INTERVAL) for t in panel.targets]
            assert [t["legendFormat"] for t in grafana["targets"]] == [
                t.legend for t in panel.targets
            ]
        annotations = doc["annotations"]["list"]
        assert len(annotations) == (1 if d.gc_overlay else 0)


# -- the embedded evaluator -----------------------------------------------------------------------
def _ring(rows: list[tuple[float, list[tuple[str, dict[str, str], float]]]]) -> SampleRing:
    names = {n for _, samples in rows for n, _, _ in samples}
    ring = SampleRing(names, capacity=1000)
    for t, samples in rows:
        ring.record(t, samples)
    return ring


def test_rate_per_series_then_summed_by_label() -> None:
    name = m.SEQUENCE_REGRESSIONS
    rows = [
        (
            float(t),
            [
                (name, {"venue": "XNAS"}, 10.0 * t),  # 10/s
                (name, {"venue": "BATS"}, 3.0 * t),  # 3/s
                (name, {"venue": "BATS", "extra": "x"}, 1.0 * t),  # 1/s, summed into BATS
            ],
        )
        for t in range(0, 21)
    ]
    times, series = _ring(rows).window(0, 100)
    points = np.arange(len(times))
    out = evaluate(Rate(name, by=("venue",)), times, series, points, 5.0)
    assert set(out) == {(("venue", "BATS"),), (("venue", "XNAS"),)}
    assert math.isnan(out[(("venue", "XNAS"),)][0])  # one sample is not a rate
    assert np.allclose(out[(("venue", "XNAS"),)][1:], 10.0)
    assert np.allclose(out[(("venue", "BATS"),)][1:], 4.0)
    total = evaluate(Rate(name), times, series, points, 5.0)
    assert np.allclose(total[()][1:], 14.0)
    assert evaluate(Rate("nothing_total"), times, series, points, 5.0) == {}
    zero = evaluate(Rate("nothing_total", zero_if_absent=True), times, series, points, 5.0)
    assert np.all(zero[()] == 0)


def test_gauges_filters_and_legends() -> None:
    name = m.STAGE_LATENCY
    rows = [
        (
            float(t),
            [
                (name, {"stage": "write", "quantile": "0.99"}, 0.004),
                (name, {"stage": "write", "quantile": "0.5"}, 0.001),
                (name, {"stage": "decode", "quantile": "0.99"}, 0.002),
            ],
        )
        for t in range(3)
    ]
    times, series = _ring(rows).window(0, 10)
    q = Gauge(name, where=(("stage", "write"), ("quantile", "0.99")), agg="max")
    out = evaluate(q, times, series, np.arange(3), 5.0)
    assert list(out) == [()] and np.allclose(out[()], 0.004)
    by = evaluate(Gauge(name, by=("stage",), agg="max"), times, series, np.arange(3), 5.0)
    assert np.allclose(by[(("stage", "write"),)], 0.004)
    assert np.allclose(by[(("stage", "decode"),)], 0.002)
    assert legend("{{venue}}/{{ handler }}", (("venue", "X"), ("handler", "A"))) == "X/A"
    assert legend("p99", ()) == "p99"


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    # 100 observations a second: 50 in (0, 0.01], 40 in (0.01, 0.02], 10 in (0.02, 0.05]
    bounds = [0.01, 0.02, 0.05, math.inf]
    cumulative = np.array([50.0, 90.0, 100.0, 100.0])
    assert quantile_of_buckets(0.5, bounds, cumulative) == pytest.approx(0.01)
    assert quantile_of_buckets(0.7, bounds, cumulative) == pytest.approx(0.015)
    assert quantile_of_buckets(0.95, bounds, cumulative) == pytest.approx(0.035)
    # rank in the +Inf bucket: the highest finite bound, as Prometheus answers
    assert quantile_of_buckets(0.99, [0.01, math.inf], np.array([50.0, 100.0])) == 0.01
    assert math.isnan(quantile_of_buckets(0.5, bounds, np.zeros(4)))

    name = m.STAGE_DURATION
    rows = []
    for t in range(11):
        samples: list[tuple[str, dict[str, str], float]] = []
        for le, c in zip(("0.01", "0.02", "0.05", "+Inf"), cumulative, strict=True):
            samples.append((name + "_bucket", {"stage": "write", "le": le}, c * t))
        rows.append((float(t), samples))
    times, series = _ring(rows).window(0, 100)
    out = evaluate(HistogramQuantile(0.7, name, by=("stage",)), times, series, np.arange(11), 5)
    assert np.allclose(out[(("stage", "write"),)][1:], 0.015)


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(0, 1000), min_size=1, max_size=12),
    q1=st.floats(0, 1),
    q2=st.floats(0, 1),
)
def test_histogram_quantile_is_monotone_and_inside_its_bucket(
    counts: list[int], q1: float, q2: float
) -> None:
    bounds = [0.001 * 2**i for i in range(len(counts))] + [math.inf]
    cumulative = np.cumsum([*counts, 0]).astype(float)
    a, b = sorted((q1, q2))
    qa, qb = quantile_of_buckets(a, bounds, cumulative), quantile_of_buckets(b, bounds, cumulative)
    if cumulative[-1] == 0:
        assert math.isnan(qa) and math.isnan(qb)
        return
    assert qa <= qb + 1e-12
    assert 0 <= qa <= bounds[-2] and 0 <= qb <= bounds[-2]


@settings(max_examples=200, deadline=None)
@given(
    columns=st.lists(
        st.lists(st.one_of(st.integers(0, 50), st.just(-1)), min_size=3, max_size=3),
        min_size=1,
        max_size=8,
    ),
    q=st.floats(0, 1),
)
def test_vectorized_quantiles_agree_with_the_scalar_rule(
    columns: list[list[int]], q: float
) -> None:
    bounds = [0.005, 0.05, math.inf]
    # each column: bucket counts (a -1 makes the whole column unknown, as a missing sample)
    cumulative = np.array(
        [np.cumsum(c).astype(float) if min(c) >= 0 else np.full(3, np.nan) for c in columns]
    ).T
    vector = quantiles_of_buckets(q, bounds, cumulative)
    scalar = [quantile_of_buckets(q, bounds, cumulative[:, i]) for i in range(len(columns))]
    assert np.allclose(vector, scalar, equal_nan=True)


def test_ratio_matches_labels_and_refuses_zero_denominators() -> None:
    rows: list[tuple[float, list[tuple[str, dict[str, str], float]]]] = [
        (
            float(t),
            [
                (m.AUTH_VERIFY_SECONDS, {}, 0.002 * t),
                (m.AUTH_CACHE_MISSES, {}, float(t if t < 5 else 5)),  # misses stop at t=5
            ],
        )
        for t in range(10)
    ]
    times, series = _ring(rows).window(0, 100)
    out = evaluate(
        Ratio(Rate(m.AUTH_VERIFY_SECONDS), Rate(m.AUTH_CACHE_MISSES)),
        times,
        series,
        np.arange(10),
        1.0,
    )[()]
    assert np.allclose(out[1:6], 0.002)
    assert np.all(np.isnan(out[6:]))  # no verification: no mean, never a division by zero


# -- the ring and the sampler ---------------------------------------------------------------------
def test_ring_is_bounded_and_ordered() -> None:
    ring = SampleRing({"a", "b"}, capacity=5, max_series=2)
    for t in range(12):
        samples: list[tuple[str, dict[str, str], float]] = [("a", {}, float(t)), ("z", {}, 1.0)]
        if t % 2 == 0:
            samples.append(("b", {"k": "v"}, float(t)))
        samples.append(("b", {"k": str(t)}, 1.0))  # new series beyond the cap: counted, dropped
        ring.record(float(t), samples)
    assert len(ring) == 5 and ring.last_t == 11.0
    times, series = ring.window(0, 100)
    assert list(times) == [7.0, 8.0, 9.0, 10.0, 11.0]
    assert list(series[("a", ())]) == [7.0, 8.0, 9.0, 10.0, 11.0]
    b = series[("b", (("k", "v"),))]
    assert list(b[[1, 3]]) == [8.0, 10.0] and np.isnan(b[[0, 2, 4]]).all()  # absent: NaN
    assert ("z", ()) not in series  # not a name any panel reads
    assert ring.dropped_series > 0 and len(series) == 2
    assert list(ring.window(8.5, 10)[0]) == [9.0, 10.0]
    with pytest.raises(ValueError):
        SampleRing({"a"}, capacity=1)


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    set_stream(buf)
    yield buf
    set_stream(sys.stderr)


def test_the_cap_is_sized_to_what_a_node_samples_and_its_overflow_is_named(
    tmp_path: Path, log: io.StringIO
) -> None:
    node = Node(node_config(tmp_path))  # the default node: 6 venues, 2 handlers each
    ring = node.dashboard_ring
    ring.record(1.0, collect_samples(node.registry))
    used = len(ring.window(0, 2)[1])
    assert ring.max_series == MAX_SERIES and ring.dropped_series == 0
    assert 100 < used <= MAX_SERIES // 2 + 64  # headroom for reasons, stages, venues that appear
    assert MAX_SERIES * HISTORY_S * 8 < 20 * 2**20  # the ring's worst case stays ~15 MB

    small = SampleRing({"a"}, capacity=4, max_series=1)
    for t in range(3):
        small.record(float(t), [("a", {"k": "1"}, 1.0), ("a", {"k": "2"}, 1.0)])
    assert small.dropped_series == 3  # counted every scrape
    capped = [json.loads(line) for line in log.getvalue().splitlines() if "capped" in line]
    assert [c["event"] for c in capped] == ["dashboard_series_capped"]  # logged once


def test_a_window_copies_only_the_series_it_is_asked_for() -> None:
    ring = SampleRing({"a", "b", "c"}, capacity=8)
    for t in range(4):
        ring.record(float(t), [("a", {}, 1.0), ("b", {"x": "1"}, 2.0), ("c", {}, 3.0)])
    _, series = ring.window(0, 10, {"b", "c"})
    assert sorted(series) == [("b", (("x", "1"),)), ("c", ())]
    assert len(ring.window(0, 10)[1]) == 3


async def test_a_dashboard_request_copies_only_that_dashboards_series() -> None:
    copied: list[set[str]] = []

    class SpyRing(SampleRing):
        """Records which series each window copies."""

        def window(
            self, start_s: float, end_s: float, names: Collection[str] | None = None
        ) -> tuple[np.ndarray, dict[SeriesKey, np.ndarray]]:
            out = super().window(start_s, end_s, names)
            copied.append({key[0] for key in out[1]})
            return out

    ring = SpyRing(sampled_names(), capacity=16)
    for t in range(4):
        ring.record(1_000.0 + t, [(n, {}, float(t)) for n in sorted(sampled_names())])
    clock = FakeClock()
    handlers = dashboard_handlers(ring, lambda: clock.wall_ns() // 1_000_000, lambda a, b: [])
    data = handlers["/admin/dashboards/{uid}"]
    d = dashboard("monotape-fanout")
    scope = {
        "type": "http",
        "method": "GET",
        "path": f"/admin/dashboards/{d.uid}",
        "query_string": b"window=1m",
        "headers": [],
        "path_params": {"uid": d.uid},
    }
    response = await data(Request(scope))
    assert response.status_code == 200
    drawn = {n for p in d.panels for t in p.targets for n in sample_names(t.query)}
    assert copied == [drawn] and drawn < sampled_names()


def test_sampling_leaves_the_scrapes_loop_lag_maximum_alone() -> None:
    mon = LoopLagMonitor(0.1)
    registry = CollectorRegistry()
    registry.register(LoopLagCollector(mon, max_name=m.EVENT_LOOP_LAG_MAX))
    mon.observe(50_000_000)  # a 50 ms stall
    sampled = {n: v for n, _, v in collect_samples(registry, mon)}
    assert sampled[m.EVENT_LOOP_LAG_MAX] == pytest.approx(0.05)
    mon.observe(1_000_000)
    again = {n: v for n, _, v in collect_samples(registry, mon)}
    assert again[m.EVENT_LOOP_LAG_MAX] == pytest.approx(0.001)  # the ring: since its last sample
    scraped = {
        s.name: s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }
    assert scraped[m.EVENT_LOOP_LAG_MAX] == pytest.approx(0.05)  # Prometheus: since its last


def test_dashboard_data_is_bounded_and_shows_only_pauses_that_matter() -> None:
    ring = SampleRing(sampled_names(), capacity=4000)
    for t in range(3700):
        ring.record(
            1_000.0 + t,
            [
                (m.FRAMES_SENT, {}, 25.0 * t),
                (m.CONNECTIONS, {}, 7.0),
                (m.STAGE_LATENCY, {"stage": "write", "quantile": "0.99"}, 0.003),
            ],
        )
    end = 1_000 + 3699
    pauses = [
        GcPause(1, int((end - 30) * 1000), 300_000),  # a cheap young collection: not drawn
        GcPause(2, int((end - 20) * 1000), 1_000_000),  # gen 2: drawn
        GcPause(0, int((end - 10) * 1000), 9_000_000),  # 9 ms: over the threshold, drawn
    ]
    for window_s in (60, 3600):
        body = dashboard_data(dashboard("monotape-fanout"), ring, pauses, window_s)
        assert 0 < len(body["t"]) <= MAX_POINTS and body["t"][-1] == end
        assert body["t"][0] >= end - window_s
        panels = {p["title"]: p for p in body["panels"]}
        (frames,) = panels["frames/s"]["series"]
        assert all(v == pytest.approx(25.0) for v in frames["values"] if v is not None)
        assert panels["terminals"]["series"][0]["values"][-1] == 7.0
        assert body["gc_pauses"] == []  # no overlay on the fan-out dashboard
    body = dashboard_data(dashboard("monotape-tick-to-glass"), ring, pauses, 60)
    assert [p["generation"] for p in body["gc_pauses"]] == [2, 0]
    write = next(p for p in body["panels"] if p["title"] == "write")
    assert write["headline"] == "p99" and write["log"] and write["gc"]
    empty = dashboard_data(dashboard("monotape-health"), SampleRing({"x"}), [], 60)
    assert empty["t"] == [] and all(p["series"] == [] for p in empty["panels"])
