"""render_latency_svg: well-formed SVG for any input, a polyline per stage, a band per pause."""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.histograms.gc import GcPause
from monotape.histograms.plot import (
    MIN_BAND_PX,
    PAUSE_THRESHOLD_MS,
    pauses_that_matter,
    render_latency_svg,
)
from monotape.histograms.query import Percentiles

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_764_460_800_000


def pct(stage: str, slot: int, p99_us: int, count: int = 100) -> Percentiles:
    start = T0 + slot * 10_000
    return Percentiles(
        stage=stage,
        window_start_ms=start,
        window_end_ms=start + 10_000,
        intervals=1,
        count=count,
        min_us=1,
        p50_us=p99_us // 2,
        p90_us=p99_us,
        p99_us=p99_us,
        p999_us=p99_us,
        p9999_us=p99_us,
        max_us=p99_us,
    )


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def bands(root: ET.Element) -> list[ET.Element]:
    return [r for r in root.iter(f"{SVG}rect") if r.get("class") == "gc-pause"]


def test_several_stages_axes_legend_and_bands() -> None:
    rows = {
        "decode": [pct("decode", k, 300 + 10 * k) for k in range(60)],
        "conflate": [pct("conflate", k, 25_000) for k in range(60)],
        "write": [pct("write", k, 1_500) for k in range(60)],
    }
    pauses = [
        GcPause(generation=2, start_ms=T0 + 120_000, duration_ns=5_000_000),
        GcPause(generation=0, start_ms=T0 + 300_000, duration_ns=80_000),
        GcPause(generation=1, start_ms=T0 + 400_000, duration_ns=8_000_000_000),
    ]
    root = ET.fromstring(render_latency_svg(rows, pauses, title="p99 <all> & more"))
    lines = [p for p in root.iter(f"{SVG}polyline") if p.get("class") == "stage"]
    assert [p.get("data-stage") for p in lines] == ["decode", "conflate", "write"]
    assert all(len((p.get("points") or "").split()) == 60 for p in lines)
    labels = texts(root)
    for tick in ("0.1 ms", "1 ms", "10 ms", "100 ms", "1 s"):
        assert tick in labels
    assert "00:00:00" in labels  # T0 is midnight UTC
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in labels if ":" in t and len(t) == 8)
    assert {"decode", "conflate", "write", "GC gen 2 or > 5 ms"} <= set(labels)
    assert "p99 <all> & more" in labels
    assert "+1 minor not drawn" in labels  # the 80 µs gen-0 collection
    found = bands(root)
    assert len(found) == 2
    widths = [float(b.get("width") or 0) for b in found]
    assert min(widths) >= MIN_BAND_PX  # a 5 ms pause on a 10-minute axis is still visible
    assert widths[1] > 8 > widths[0]  # an 8 s stall is drawn to scale (~0.8 s per px)
    titles = [b.findtext(f"{SVG}title") or "" for b in found]
    assert titles[0].startswith("GC gen 2: 5.000 ms")
    assert "gen 1" in titles[1] and "8000.000 ms" in titles[1]
    every = ET.fromstring(render_latency_svg(rows, pauses, threshold_ms=None))
    assert len(bands(every)) == 3 and "GC pause" in texts(every)


def test_a_minute_of_young_collections_is_not_a_barcode() -> None:
    """The seed's complaint: 128 gen-1 collections a minute drawn as 128 bands. Only the
    pauses that matter are drawn: the gen-2 one and the long young one."""
    young = [GcPause(1, T0 + 470 * k, 300_000) for k in range(128)]  # 0.3 ms each
    full = GcPause(2, T0 + 30_000, 1_200_000)  # a cheap gen 2 still matters: it is the rare one
    long_young = GcPause(0, T0 + 45_000, 12_000_000)  # 12 ms: over the priority budget
    at_threshold = GcPause(1, T0 + 50_000, int(PAUSE_THRESHOLD_MS * 1e6))
    pauses = sorted([*young, full, long_young, at_threshold], key=lambda p: p.start_ms)
    rows = {"write": [pct("write", k, 1_500) for k in range(6)]}
    root = ET.fromstring(render_latency_svg(rows, pauses))
    found = bands(root)
    assert len(found) == 2
    titles = [b.findtext(f"{SVG}title") or "" for b in found]
    assert titles[0].startswith("GC gen 2: 1.200 ms")
    assert titles[1].startswith("GC gen 0: 12.000 ms")
    assert "+129 minor not drawn" in texts(root)
    assert pauses_that_matter(pauses) == [full, long_young]
    assert pauses_that_matter(pauses, threshold_ms=0.1) == [
        *sorted([*young, full, long_young, at_threshold], key=lambda p: p.start_ms)
    ]


def test_lower_p99_is_drawn_lower() -> None:
    rows = {"a": [pct("a", 0, 100), pct("a", 1, 100_000)]}
    root = ET.fromstring(render_latency_svg(rows, []))
    (line,) = root.iter(f"{SVG}polyline")
    (x0, y0), (x1, y1) = (
        tuple(map(float, p.split(","))) for p in (line.get("points") or "").split()
    )
    assert x1 > x0 and y1 < y0  # SVG y grows downwards


def test_empty_input_says_no_data_yet() -> None:
    empties: list[dict[str, list[Percentiles]]] = [
        {},
        {"decode": []},
        {"decode": [pct("decode", 0, 500, count=0)]},
    ]
    for rows in empties:
        root = ET.fromstring(render_latency_svg(rows, []))
        assert root.tag == f"{SVG}svg"
        assert "no data yet" in texts(root)
        assert not bands(root)


def test_one_interval_and_one_instant() -> None:
    root = ET.fromstring(render_latency_svg({"x": [pct("x", 0, 0)]}, []))
    assert list(root.iter(f"{SVG}circle"))
    root = ET.fromstring(render_latency_svg({}, [GcPause(2, T0, 1)]))
    assert len(bands(root)) == 1
    root = ET.fromstring(render_latency_svg({}, [GcPause(0, T0, 1)]))  # nothing that matters
    assert not bands(root) and "no data yet" in texts(root)


names = st.text(min_size=0, max_size=30)
percentiles = st.builds(
    pct,
    stage=names,
    slot=st.integers(min_value=-100, max_value=10_000),
    p99_us=st.integers(min_value=0, max_value=10**9),
    count=st.integers(min_value=0, max_value=10),
)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.dictionaries(names, st.lists(percentiles, max_size=8), max_size=6),
    pauses=st.lists(
        st.builds(
            GcPause,
            generation=st.integers(0, 2),
            start_ms=st.integers(T0 - 10**7, T0 + 10**8),
            duration_ns=st.integers(0, 10**10),
        ),
        max_size=5,
    ),
    title=names,
)
def test_any_rows_make_well_formed_xml(
    rows: dict[str, list[Percentiles]], pauses: list[GcPause], title: str
) -> None:
    root = ET.fromstring(render_latency_svg(rows, pauses, title=title))
    assert root.tag == f"{SVG}svg"
    assert len(bands(root)) == len(pauses_that_matter(pauses))
    assert all(p.generation == 2 or p.duration_ns > 5_000_000 for p in pauses_that_matter(pauses))
    drawn = [p for p in root.iter(f"{SVG}polyline") if p.get("class") == "stage"]
    assert len(drawn) == sum(1 for v in rows.values() if any(p.count for p in v))
