"""The same panels as Grafana dashboards, generated with grafanalib (``monotape dashboards
build`` writes deploy/grafana/dashboards/<uid>.json; checked in, regenerated and diffed by the
tests).

Rates use Grafana's ``$__rate_interval`` (at least four scrapes, so a rate never rests on one);
the GC pauses that matter are a Prometheus annotation over every latency panel.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from grafanalib._gen import write_dashboard
from grafanalib.core import Annotations, GridPos, Target, TimeSeries
from grafanalib.core import Dashboard as GrafanaDashboard

from .panels import DASHBOARDS, Dashboard, Panel, gc_annotation_expr
from .queries import promql

__all__ = [
    "DATASOURCE",
    "DEFAULT_OUT_DIR",
    "build",
    "grafana_dashboard",
    "render_json",
    "stale_files",
]

# The Prometheus datasource deploy/grafana/provisioning/datasources/monotape.yml provisions.
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "monotape-prometheus"}
DEFAULT_OUT_DIR = Path("deploy/grafana/dashboards")
RATE_INTERVAL = "$__rate_interval"
PANEL_W, PANEL_H, COLUMNS = 8, 8, 3  # a 24-unit grid: three panels a row
REF_IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _panel(p: Panel, index: int) -> TimeSeries:
    return TimeSeries(
        title=p.title,
        description=p.description,
        dataSource=DATASOURCE,
        targets=[
            Target(
                expr=promql(t.query, RATE_INTERVAL),
                legendFormat=t.legend,
                refId=REF_IDS[i],
                datasource=DATASOURCE,
            )
            for i, t in enumerate(p.targets)
        ],
        unit=p.unit,
        scaleDistributionType="log" if p.log_scale else "linear",
        scaleDistributionLog=10 if p.log_scale else 2,
        gridPos=GridPos(
            h=PANEL_H, w=PANEL_W, x=(index % COLUMNS) * PANEL_W, y=(index // COLUMNS) * PANEL_H
        ),
        legendDisplayMode="list",
        tooltipMode="multi",
    )


def _annotations(d: Dashboard) -> Annotations:
    items: list[dict[str, Any]] = []
    if d.gc_overlay is not None:
        items.append(
            {
                "datasource": DATASOURCE,
                "enable": True,
                "expr": gc_annotation_expr(d.gc_overlay, "$__interval"),
                "iconColor": "red",
                "name": f"GC gen 2 or > {d.gc_overlay.threshold_ms:g} ms",
                "step": "10s",
                "titleFormat": "GC pause that matters",
            }
        )
    return Annotations(list=items)


def grafana_dashboard(d: Dashboard) -> GrafanaDashboard:
    return GrafanaDashboard(
        title=d.title,
        uid=d.uid,
        description=d.description,
        tags=["monotape"],
        timezone="utc",
        refresh="10s",
        annotations=_annotations(d),
        panels=[_panel(p, i) for i, p in enumerate(d.panels)],
    ).auto_panel_ids()


def render_json(d: Dashboard) -> str:
    out = io.StringIO()
    write_dashboard(grafana_dashboard(d), out)
    return out.getvalue()


def build(out_dir: Path = DEFAULT_OUT_DIR) -> list[Path]:
    """Write every dashboard as <uid>.json under ``out_dir``; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for d in DASHBOARDS:
        path = out_dir / f"{d.uid}.json"
        path.write_text(render_json(d), encoding="utf-8")
        written.append(path)
    return written


def stale_files(out_dir: Path = DEFAULT_OUT_DIR) -> list[str]:
    """Files under ``out_dir`` that differ from what ``build`` would write (missing ones too)."""
    stale = []
    for d in DASHBOARDS:
        path = out_dir / f"{d.uid}.json"
        if not path.is_file() or path.read_text(encoding="utf-8") != render_json(d):
            stale.append(path.name)
    return stale
