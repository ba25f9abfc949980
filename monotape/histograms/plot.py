"""The latency timeline as an SVG: p99 per stage over time, GC pauses shaded behind it
(GET /admin/plots/latency.svg).

Pure string building, no plotting library: a polyline per stage on a log-scale y axis
(milliseconds, a labelled tick per decade, at least 0.1 ms..1 s), wall time (UTC) on the x axis,
a legend, and every GC pause that matters as a translucent vertical band from its start to its
end, at least ``MIN_BAND_PX`` wide so that a 5 ms pause on a ten-minute axis is still visible.
Each band is a ``<rect class="gc-pause">`` carrying a ``<title>`` (generation and duration): a
browser shows it on hover and tests find it by class.

A pause matters when it is a gen-2 collection or lasts longer than ``PAUSE_THRESHOLD_MS`` (the
priority path's 5 ms p99 budget). Young collections run ~128 times a minute and take well under
a millisecond: drawn as bands they read as a barcode and hide the pauses that cost frames, so
they are counted in a note under the legend instead (``pauses_that_matter``).

Every piece of text is escaped, and characters XML 1.0 forbids are dropped, so any stage name
yields a well-formed document.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

from .gc import GcPause
from .query import Percentiles

__all__ = ["MIN_BAND_PX", "PAUSE_THRESHOLD_MS", "pauses_that_matter", "render_latency_svg"]

MIN_BAND_PX = 2.0
PAUSE_THRESHOLD_MS = 5.0  # the priority path's p99 budget: a longer pause costs a trader
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
GC_FILL = "#d62728"
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 150, 36, 44
Y_MIN_MS, Y_MAX_MS = 0.1, 1000.0  # the axis always shows these decades; it widens for data
X_TICKS = 6
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: object) -> str:
    return escape(_NOT_XML.sub("", str(value)))


def _attr(value: object) -> str:
    return quoteattr(_NOT_XML.sub("", str(value)))


def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _ms_label(ms: float) -> str:
    return f"{ms:g} ms" if ms < 1000 else f"{ms / 1000:g} s"


def _clock(ms: float) -> str:
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%H:%M:%S")
    except (OverflowError, ValueError, OSError):  # outside what datetime can show
        return f"{ms:.0f}"


def _frame(width: int, height: int, title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{_text(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{width / 2:g}" y="20" text-anchor="middle" font-size="14">{_text(title)}</text>',
    ]


def pauses_that_matter(
    pauses: Iterable[GcPause], threshold_ms: float = PAUSE_THRESHOLD_MS
) -> list[GcPause]:
    """Gen-2 collections, and any pause longer than ``threshold_ms``, in their given order."""
    limit_ns = threshold_ms * 1e6
    return [p for p in pauses if p.generation >= 2 or p.duration_ns > limit_ns]


def render_latency_svg(
    rows: Mapping[str, Sequence[Percentiles]],
    pauses: Sequence[GcPause],
    *,
    width: int = 960,
    height: int = 420,
    title: str = "monotape p99 latency by stage",
    threshold_ms: float | None = PAUSE_THRESHOLD_MS,
) -> str:
    """``rows``: stage -> its per-interval percentiles (``query.timeline``); ``pauses``: GC
    pauses of the same window (``GcMonitor.pauses_between``), of which only those that matter
    are drawn (``threshold_ms=None`` draws every one). Intervals with no values are skipped;
    an interval's point sits at its midpoint. Returns the SVG document as a string."""
    minor = len(pauses)
    if threshold_ms is not None:
        pauses = pauses_that_matter(pauses, threshold_ms)
    minor -= len(pauses)
    width = max(int(width), MARGIN_LEFT + MARGIN_RIGHT + 100)
    height = max(int(height), MARGIN_TOP + MARGIN_BOTTOM + 100)
    series = {
        stage: [
            ((p.window_start_ms + p.window_end_ms) / 2, max(p.p99_us, 0) / 1000)
            for p in points
            if p.count > 0
        ]
        for stage, points in rows.items()
    }
    series = {stage: pts for stage, pts in series.items() if pts}
    out = _frame(width, height, title)
    if not series and not pauses:
        out.append(
            f'<text x="{width / 2:g}" y="{height / 2:g}" text-anchor="middle" '
            f'font-size="16" fill="#666666">no data yet</text>'
        )
        out.append("</svg>")
        return "\n".join(out)

    # -- scales --------------------------------------------------------------------------------
    edges = [
        float(edge)
        for points in rows.values()
        for p in points
        if p.count > 0
        for edge in (p.window_start_ms, p.window_end_ms)
    ]
    edges += [float(p.start_ms) for p in pauses]
    edges += [p.start_ms + p.duration_ns / 1e6 for p in pauses]
    x_lo, x_hi = min(edges), max(edges)
    if x_hi - x_lo < 1:
        x_lo, x_hi = x_lo - 500, x_hi + 500
    ys = [y for pts in series.values() for _, y in pts if y > 0]
    y_lo_dec = math.floor(math.log10(min([Y_MIN_MS, *ys])))
    y_hi_dec = math.ceil(math.log10(max([Y_MAX_MS, *ys])))
    left, right = MARGIN_LEFT, width - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, height - MARGIN_BOTTOM

    def sx(ms: float) -> float:
        return left + (ms - x_lo) / (x_hi - x_lo) * (right - left)

    def sy(value_ms: float) -> float:
        v = math.log10(max(value_ms, 10.0**y_lo_dec))  # 0 ms sits on the floor of the axis
        return bottom - (v - y_lo_dec) / (y_hi_dec - y_lo_dec) * (bottom - top)

    # -- GC bands, behind everything else ------------------------------------------------------
    out.append('<g class="gc-pauses">')
    for p in pauses:
        x0 = sx(p.start_ms)
        w = max(sx(p.start_ms + p.duration_ns / 1e6) - x0, MIN_BAND_PX)
        x0 = min(max(x0, left), right - MIN_BAND_PX)
        out.append(
            f'<rect class="gc-pause" x="{_num(x0)}" y="{top}" width="{_num(w)}" '
            f'height="{bottom - top}" fill="{GC_FILL}" fill-opacity="0.25">'
            f"<title>GC gen {p.generation}: {p.duration_ns / 1e6:.3f} ms at "
            f"{_clock(p.start_ms)} UTC</title></rect>"
        )
    out.append("</g>")

    # -- axes ----------------------------------------------------------------------------------
    out.append('<g class="axes" stroke="#999999" fill="none">')
    out.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}"/>')
    out.append("</g>")
    out.append('<g class="y-ticks" fill="#333333">')
    for dec in range(y_lo_dec, y_hi_dec + 1):
        ms = 10.0**dec
        y = _num(sy(ms))
        out.append(
            f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="#eeeeee"/>'
            f'<text x="{left - 6}" y="{y}" text-anchor="end" dominant-baseline="middle">'
            f"{_text(_ms_label(ms))}</text>"
        )
    out.append("</g>")
    out.append('<g class="x-ticks" fill="#333333">')
    for i in range(X_TICKS + 1):
        ms = x_lo + (x_hi - x_lo) * i / X_TICKS
        x = _num(sx(ms))
        out.append(
            f'<line x1="{x}" y1="{bottom}" x2="{x}" y2="{bottom + 4}" stroke="#999999"/>'
            f'<text x="{x}" y="{bottom + 16}" text-anchor="middle">{_clock(ms)}</text>'
        )
    out.append(
        f'<text x="{(left + right) / 2:g}" y="{height - 8}" text-anchor="middle" '
        f'fill="#333333">wall time (UTC)</text>'
    )
    out.append(
        f'<text x="14" y="{(top + bottom) / 2:g}" text-anchor="middle" fill="#333333" '
        f'transform="rotate(-90 14 {(top + bottom) / 2:g})">p99 (ms, log scale)</text>'
    )
    out.append("</g>")

    # -- one polyline per stage, and the legend ------------------------------------------------
    legend_x = right + 16
    out.append('<g class="legend">')
    for i, stage in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        ly = top + 8 + 18 * i
        out.append(
            f'<line x1="{legend_x}" y1="{ly}" x2="{legend_x + 18}" y2="{ly}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<text x="{legend_x + 24}" y="{ly}" dominant-baseline="middle">{_text(stage)}</text>'
        )
    gc_y = top + 8 + 18 * len(series)
    what = "GC pause" if threshold_ms is None else f"GC gen 2 or > {threshold_ms:g} ms"
    out.append(
        f'<rect x="{legend_x}" y="{gc_y - 6}" width="18" height="12" fill="{GC_FILL}" '
        f'fill-opacity="0.25"/><text x="{legend_x + 24}" y="{gc_y}" '
        f'dominant-baseline="middle">{_text(what)}</text>'
    )
    if minor:
        out.append(
            f'<text class="gc-minor" x="{legend_x}" y="{gc_y + 18}" dominant-baseline="middle" '
            f'fill="#666666">+{minor} minor not drawn</text>'
        )
    out.append("</g>")
    for i, (stage, pts) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{_num(sx(x))},{_num(sy(y))}" for x, y in sorted(pts))
        out.append(
            f'<polyline class="stage" data-stage={_attr(stage)} points="{coords}" fill="none" '
            f'stroke="{colour}" stroke-width="1.5"><title>{_text(stage)} p99</title></polyline>'
        )
        if len(pts) == 1:  # a single interval: a dot, a polyline of one point draws nothing
            px, py = pts[0]
            out.append(f'<circle cx="{_num(sx(px))}" cy="{_num(sy(py))}" r="2.5" fill="{colour}"/>')
    out.append("</svg>")
    return "\n".join(out)
