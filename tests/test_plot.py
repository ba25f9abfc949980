"""render_latency_svg: well-formed SVG for any input, a polyline per stage, a band per pause."""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.histograms.gc import GcPause
from monotape.histograms.plot import MIN_BAND_PX, render_latency_svg
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
    assert {"decode", "conflate", "write", "GC pause"} <= set(labels)
    assert "p99 <all> & more" in labels
    found = bands(root)
    assert len(found) == 3
    widths = [float(b.get("width") or 0) for b in found]
    assert min(widths) >= MIN_BAND_PX  # a 5 ms pause on a 10-minute axis is still visible
    assert widths[2] > 8 > widths[0]  # an 8 s stall is drawn to scale (~0.8 s per px)
    titles = [b.findtext(f"{SVG}title") or "" for b in found]
    assert titles[0].startswith("GC gen 2: 5.000 ms")
    assert "gen 1" in titles[2] and "8000.000 ms" in titles[2]


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
    assert len(bands(root)) == len(pauses)
    drawn = [p for p in root.iter(f"{SVG}polyline") if p.get("class") == "stage"]
    assert len(drawn) == sum(1 for v in rows.values() if any(p.count for p in v))
