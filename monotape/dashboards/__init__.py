"""Dashboards from one set of panel definitions, rendered two ways (docs/dashboards.md).

- ``panels``: the five dashboards, their panels and queries (metric names from
  ``metric_names`` only); ``promql_expressions()`` lists every panel's PromQL.
- ``queries`` / ``evaluate``: a query as values, rendered as PromQL or evaluated over the
  node's own samples the way Prometheus would.
- ``sampler`` / ``view`` / ``web``: the embedded page at ``/dashboards`` on the admin server,
  live from the node's registry sampled every second (no Prometheus needed).
- ``grafana`` / ``build``: the Grafana JSON (``monotape dashboards build``).
"""

from .panels import DASHBOARDS, Dashboard, Panel, Target, promql_expressions

__all__ = ["DASHBOARDS", "Dashboard", "Panel", "Target", "promql_expressions"]
