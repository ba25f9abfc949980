"""One dashboard over one window, as the JSON the embedded page draws (GET
/admin/dashboards/data).

Pure: the sampled ring and the GC pauses in, a dict out. At most ``MAX_POINTS`` points per
series whatever the window (a 1 h window shows every 6th sample, as a Prometheus range query
with a 6 s step would); rates look back ``RATE_WINDOW_S`` (or two steps, if wider), so a rate
never reads a single sample.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from monotape.histograms.gc import GcPause
from monotape.histograms.plot import pauses_that_matter

from .evaluate import evaluate, legend
from .panels import Dashboard
from .sampler import SAMPLE_PERIOD_S, SampleRing, SeriesKey

__all__ = [
    "MAX_POINTS",
    "RATE_WINDOW_S",
    "WINDOWS",
    "Snapshot",
    "dashboard_data",
    "dashboard_from",
    "snapshot",
]

WINDOWS: dict[str, int] = {"1m": 60, "5m": 300, "15m": 900, "1h": 3600}
MAX_POINTS = 600
RATE_WINDOW_S = 5.0


def _num(v: float) -> float | None:
    return None if not math.isfinite(v) else float(f"{v:.6g}")


@dataclass(frozen=True)
class Snapshot:
    """The rows of one window, copied out of the ring (the ring keeps moving)."""

    start: float
    end: float
    rate_window: float
    times: np.ndarray
    series: dict[SeriesKey, np.ndarray]


def _rate_window(window_s: int) -> float:
    # The widest stride a window can need, so that rates can look back far enough.
    widest = math.ceil((window_s / SAMPLE_PERIOD_S + 1) / MAX_POINTS)
    return max(RATE_WINDOW_S, 2 * widest * SAMPLE_PERIOD_S)


def snapshot(ring: SampleRing, window_s: int, names: Collection[str] | None = None) -> Snapshot:
    """Copy the rows a window needs (cheap: run it where the ring is written, the event loop);
    ``dashboard_from`` then does the arithmetic anywhere (a worker thread). ``names``: copy
    only these samples' series (one dashboard's)."""
    end = ring.last_t
    if math.isnan(end):
        end = 0.0
    start = end - window_s
    rate_window = _rate_window(window_s)
    times, series = ring.window(start - rate_window, end, names)
    return Snapshot(start, end, rate_window, times, series)


def dashboard_data(
    d: Dashboard, ring: SampleRing, pauses: Sequence[GcPause], window_s: int
) -> dict[str, Any]:
    return dashboard_from(d, snapshot(ring, window_s), pauses, window_s)


def dashboard_from(
    d: Dashboard, snap: Snapshot, pauses: Sequence[GcPause], window_s: int
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "uid": d.uid,
        "title": d.title,
        "description": d.description,
        "window_s": window_s,
        "sample_period_s": SAMPLE_PERIOD_S,
        "t": [],
        "panels": [],
        "gc_pauses": [],
        "gc_threshold_ms": d.gc_overlay.threshold_ms if d.gc_overlay else None,
    }
    times, series, rate_window = snap.times, snap.series, snap.rate_window
    inside = np.flatnonzero(times >= snap.start)
    stride = max(1, math.ceil(len(inside) / MAX_POINTS))
    points = inside[::-1][::stride][::-1]  # the newest sample is always a point
    body["t"] = [round(float(t), 3) for t in times[points]]
    for panel in d.panels:
        drawn = []
        for target in panel.targets:
            result = evaluate(target.query, times, series, points, rate_window)
            for labels, values in result.items():
                drawn.append(
                    {
                        "name": legend(target.legend, labels) or "none",
                        "values": [_num(float(v)) for v in values],
                    }
                )
        body["panels"].append(
            {
                "title": panel.title,
                "description": panel.description,
                "unit": panel.unit,
                "log": panel.log_scale,
                "gc": panel.gc_overlay,
                "upper_bound": panel.upper_bound,
                "stepped": panel.stepped,
                "headline": panel.headline,
                "series": drawn,
            }
        )
    if d.gc_overlay is not None and len(points):
        body["gc_pauses"] = [
            {
                "generation": p.generation,
                "start": p.start_ms / 1000,
                "end": p.start_ms / 1000 + p.duration_ns / 1e9,
                "ms": round(p.duration_ns / 1e6, 3),
            }
            for p in pauses_that_matter(pauses, d.gc_overlay.threshold_ms)
        ]
    return body
