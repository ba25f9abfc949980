"""Evaluate a panel's query over the sampled ring, the way Prometheus evaluates its PromQL.

Pure: times and series in, (labels, values) out. Rates are per series first (the increase
between the sample at ``t - rate_window`` and the sample at ``t``, over the time between them),
then summed by the ``by`` labels, as ``sum by (...) (rate(...))`` is; histogram quantiles
interpolate linearly within the bucket that holds the rank, as ``histogram_quantile`` does
(above the highest finite bucket: that bucket's bound). NaN means "no value at this point".
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping

import numpy as np

from .queries import Gauge, HistogramQuantile, Matchers, Query, Rate
from .sampler import SeriesKey

__all__ = ["Result", "evaluate", "legend", "quantile_of_buckets", "quantiles_of_buckets"]

Labels = tuple[tuple[str, str], ...]
Result = dict[Labels, np.ndarray]  # grouping labels -> one value per output point
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def legend(template: str, labels: Labels) -> str:
    """Grafana's ``legendFormat``: ``{{venue}}`` becomes the series' venue."""
    values = dict(labels)
    return _LEGEND.sub(lambda mt: values.get(mt.group(1), ""), template)


def _matches(labels: Labels, where: Matchers) -> bool:
    have = dict(labels)
    return all(have.get(k) == v for k, v in where)


def _select(
    series: Mapping[SeriesKey, np.ndarray], name: str, where: Matchers
) -> list[tuple[Labels, np.ndarray]]:
    return [(lb, col) for (n, lb), col in series.items() if n == name and _matches(lb, where)]


def _group(labels: Labels, by: tuple[str, ...]) -> Labels:
    have = dict(labels)
    return tuple((k, have.get(k, "")) for k in by)


def _sum(rows: list[np.ndarray]) -> np.ndarray:
    stack = np.vstack(rows)
    total = np.nansum(stack, axis=0)
    return np.where(np.all(np.isnan(stack), axis=0), np.nan, total)


def _aggregate(
    rows: list[tuple[Labels, np.ndarray]], by: tuple[str, ...], agg: str = "sum"
) -> Result:
    groups: dict[Labels, list[np.ndarray]] = {}
    for lb, values in rows:
        groups.setdefault(_group(lb, by), []).append(values)
    out: Result = {}
    for key, members in sorted(groups.items()):
        if agg == "sum":
            out[key] = _sum(members)
        else:
            stack = np.vstack(members)
            with warnings.catch_warnings():
                # an all-NaN column warns; its NaN answer is the one we want
                warnings.simplefilter("ignore", RuntimeWarning)
                out[key] = np.nanmax(stack, axis=0) if agg == "max" else np.nanmin(stack, axis=0)
    return out


def _rates(
    times: np.ndarray, values: np.ndarray, points: np.ndarray, window_s: float
) -> np.ndarray:
    """Per-second increase at each of ``points`` (row indices) over ``window_s`` before it."""
    t_now = times[points]
    first = np.searchsorted(times, t_now - window_s, side="left")
    first = np.minimum(first, points)
    dt = t_now - times[first]
    dv = values[points] - values[first]
    with np.errstate(all="ignore"):
        rate = np.where(dt > 0, np.maximum(dv, 0.0) / dt, np.nan)  # counters never go down here
    return rate


def quantile_of_buckets(q: float, bounds: list[float], cumulative: np.ndarray) -> float:
    """``histogram_quantile`` for one point: ``bounds`` ascending (the last may be +Inf),
    ``cumulative`` their cumulative rates."""
    if not bounds or not np.all(np.isfinite(cumulative)):
        return math.nan
    total = float(cumulative[-1])
    if total <= 0:
        return math.nan
    rank = q * total
    b = int(np.searchsorted(cumulative, rank, side="left"))
    b = min(b, len(bounds) - 1)
    if math.isinf(bounds[b]):
        return bounds[b - 1] if b > 0 else math.nan
    lower = bounds[b - 1] if b > 0 else 0.0
    below = float(cumulative[b - 1]) if b > 0 else 0.0
    inside = float(cumulative[b]) - below
    if inside <= 0:
        return bounds[b]
    return lower + (bounds[b] - lower) * (rank - below) / inside


def quantiles_of_buckets(q: float, bounds: list[float], cumulative: np.ndarray) -> np.ndarray:
    """``quantile_of_buckets`` for every column of ``cumulative`` (bounds x points) at once."""
    n_bounds, n_points = cumulative.shape
    out = np.full(n_points, np.nan)
    if n_bounds == 0 or n_points == 0:
        return out
    ok = np.all(np.isfinite(cumulative), axis=0) & (cumulative[-1] > 0)
    if not ok.any():
        return out
    cum = cumulative[:, ok]
    rank = q * cum[-1]
    b = np.minimum(np.argmax(cum >= rank, axis=0), n_bounds - 1)  # first bucket holding rank
    cols = np.arange(cum.shape[1])
    upper = np.asarray(bounds, dtype=float)
    lower = np.concatenate(([0.0], upper[:-1]))
    below = np.where(b > 0, cum[np.maximum(b - 1, 0), cols], 0.0)
    inside = cum[b, cols] - below
    with np.errstate(all="ignore"):
        value = lower[b] + (upper[b] - lower[b]) * (rank - below) / inside
    value = np.where(inside > 0, value, upper[b])
    # rank in the +Inf bucket: the highest finite bound (NaN when there is none)
    top = upper[b - 1] if n_bounds > 1 else np.full(len(b), np.nan)
    value = np.where(np.isinf(upper[b]), np.where(b > 0, top, np.nan), value)
    out[ok] = value
    return out


def evaluate(
    query: Query,
    times: np.ndarray,
    series: Mapping[SeriesKey, np.ndarray],
    points: np.ndarray,
    rate_window_s: float,
) -> Result:
    """``query`` at each row index of ``points``."""
    if isinstance(query, Gauge):
        rows = [(lb, col[points]) for lb, col in _select(series, query.metric, query.where)]
        return _aggregate(rows, query.by, query.agg) if rows else {}
    if isinstance(query, Rate):
        rows = [
            (lb, _rates(times, col, points, rate_window_s))
            for lb, col in _select(series, query.metric, query.where)
        ]
        if not rows:
            return {(): np.zeros(len(points))} if query.zero_if_absent else {}
        return _aggregate(rows, query.by)
    if isinstance(query, HistogramQuantile):
        return _histogram_quantile(query, times, series, points, rate_window_s)
    num = evaluate(query.numerator, times, series, points, rate_window_s)
    den = evaluate(query.denominator, times, series, points, rate_window_s)
    out: Result = {}
    for key, top in num.items():
        if key in den:
            with np.errstate(all="ignore"):
                out[key] = np.where(den[key] > 0, top / den[key], np.nan)
    return out


def _histogram_quantile(
    query: HistogramQuantile,
    times: np.ndarray,
    series: Mapping[SeriesKey, np.ndarray],
    points: np.ndarray,
    rate_window_s: float,
) -> Result:
    groups: dict[Labels, dict[float, list[np.ndarray]]] = {}
    for lb, col in _select(series, query.metric + "_bucket", query.where):
        le = dict(lb).get("le")
        if le is None:
            continue
        bound = float(le)
        groups.setdefault(_group(lb, query.by), {}).setdefault(bound, []).append(
            _rates(times, col, points, rate_window_s)
        )
    out: Result = {}
    for key, by_bound in sorted(groups.items()):
        bounds = sorted(by_bound)
        matrix = np.vstack([_sum(by_bound[b]) for b in bounds])
        out[key] = quantiles_of_buckets(query.q, bounds, matrix)
    return out
