"""Metric families for custom prometheus_client collectors, built one way for every room.

The collectors (role/collectors.py, ring/collector.py) turn plain int counts into families only
when /metrics is read; the helpers they share live here, below every room that exports, so a
low room (the ring) need not import the node's collectors to reuse one. Names come from
``metric_names``.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily

from monotape import metric_names as m

__all__ = ["counter_family"]


def counter_family(name: str, doc: str, value: float) -> CounterMetricFamily:
    """One unlabelled counter: ``name`` as exported (``..._total``), ``value`` its count."""
    return CounterMetricFamily(m.counter_base(name), doc, value=value)
