"""What a panel asks for, as values: the four query shapes the dashboards use.

One query is rendered two ways and never written twice: as PromQL for Grafana and Prometheus
(``promql``), and evaluated over the node's own sampled metrics for the embedded page
(``monotape.dashboards.evaluate``). Both read the same fields, so the laptop view and the
fleet view of a panel cannot disagree about what it shows.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Gauge",
    "HistogramQuantile",
    "Matchers",
    "Query",
    "Rate",
    "Ratio",
    "promql",
    "sample_names",
]

Matchers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Rate:
    """``sum by (by) (rate(metric{where}[window]))``: a counter's per-second increase.

    ``zero_if_absent``: a counter whose series only appear with their first event (refusals by
    reason) reads 0 rather than "no data" while nothing happened."""

    metric: str
    by: tuple[str, ...] = ()
    where: Matchers = ()
    zero_if_absent: bool = False


@dataclass(frozen=True)
class Gauge:
    """``agg by (by) (metric{where})``: a gauge as it is now."""

    metric: str
    by: tuple[str, ...] = ()
    where: Matchers = ()
    agg: str = "sum"  # sum | max | min


@dataclass(frozen=True)
class HistogramQuantile:
    """``histogram_quantile(q, sum by (le, by) (rate(metric_bucket{where}[window])))``: a
    quantile of a Prometheus histogram, linear within a bucket as Prometheus interpolates."""

    q: float
    metric: str  # the histogram's name, without _bucket
    by: tuple[str, ...] = ()
    where: Matchers = ()


@dataclass(frozen=True)
class Ratio:
    """``(numerator) / (denominator)``, matched on the ``by`` labels both sides share."""

    numerator: Rate
    denominator: Rate


Query = Rate | Gauge | HistogramQuantile | Ratio
AGGREGATIONS = ("sum", "max", "min")


def _selector(metric: str, where: Matchers) -> str:
    if not where:
        return metric
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in where) + "}"


def _agg(op: str, by: tuple[str, ...], inner: str) -> str:
    return f"{op} by ({', '.join(by)}) ({inner})" if by else f"{op}({inner})"


def promql(query: Query, window: str) -> str:
    """The PromQL of ``query``; ``window`` is a range like ``1m`` or ``$__rate_interval``."""
    if isinstance(query, Rate):
        expr = _agg("sum", query.by, f"rate({_selector(query.metric, query.where)}[{window}])")
        return f"({expr}) or vector(0)" if query.zero_if_absent else expr
    if isinstance(query, Gauge):
        if query.agg not in AGGREGATIONS:
            raise ValueError(f"aggregation {query.agg!r} is not one of {AGGREGATIONS}")
        return _agg(query.agg, query.by, _selector(query.metric, query.where))
    if isinstance(query, HistogramQuantile):
        bucket = f"rate({_selector(query.metric + '_bucket', query.where)}[{window}])"
        return f"histogram_quantile({query.q:g}, {_agg('sum', ('le', *query.by), bucket)})"
    return f"({promql(query.numerator, window)}) / ({promql(query.denominator, window)})"


def sample_names(query: Query) -> set[str]:
    """The exposition sample names ``query`` reads (what the embedded sampler must keep)."""
    if isinstance(query, Rate | Gauge):
        return {query.metric}
    if isinstance(query, HistogramQuantile):
        return {query.metric + "_bucket"}
    return sample_names(query.numerator) | sample_names(query.denominator)
