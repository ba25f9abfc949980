"""The embedded dashboards' routes on a real `monotape run`: the page and its scripts need no
token (they hold no data), the data routes are behind the admin token, and what they serve is
live, from the node's own samples, agreeing with /metrics."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from monotape import metric_names as m
from monotape.dashboards.panels import DASHBOARDS
from monotape.dashboards.web import STATIC_DIR
from tests.conftest import RunningServer, ServerFactory, mint

pytestmark = [pytest.mark.e2e]


def status_of(server: RunningServer, path: str, token: str | None = None) -> int:
    try:
        server.http(path, token)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def raw(server: RunningServer, path: str) -> tuple[bytes, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}{path}", timeout=5) as r:
        return r.read(), r.headers.get("Content-Type", "")


def test_routes_auth_and_live_data(server_factory: ServerFactory) -> None:
    server: RunningServer = server_factory.start("--rate", "3000")
    admin = mint(server.data_dir, admin=True)
    terminal = mint(server.data_dir)

    html, kind = raw(server, "/dashboards")
    assert kind.startswith("text/html")
    assert b"/dashboards/static/uplot/uPlot.iife.min.js" in html
    assert b"eyJ" not in html  # no token baked into the page
    for asset in ("uplot/uPlot.iife.min.js", "uplot/uPlot.min.css", "dashboards.js"):
        body, _ = raw(server, f"/dashboards/static/{asset}")
        assert body == (STATIC_DIR / asset).read_bytes()
    # offline: nothing the page loads comes from anywhere but this node
    for page in ("index.html", "dashboards.js", "dashboards.css"):
        text = (STATIC_DIR / page).read_text()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, page

    assert status_of(server, "/admin/dashboards") == 401
    assert status_of(server, "/admin/dashboards", terminal) == 403
    assert status_of(server, f"/admin/dashboards/{DASHBOARDS[0].uid}") == 401
    index = json.loads(server.http("/admin/dashboards", admin))
    assert [d["uid"] for d in index["dashboards"]] == [d.uid for d in DASHBOARDS]
    assert status_of(server, "/admin/dashboards/nope", admin) == 404
    assert status_of(server, "/admin/dashboards/monotape-health?window=2d", admin) == 400

    paths = json.loads(server.http("/openapi.json"))["paths"]
    assert {"/dashboards", "/admin/dashboards", "/admin/dashboards/{uid}"} <= set(paths)

    # Live: the ring fills a row a second, and its admitted-ticks rate agrees with /metrics.
    time.sleep(2)
    admitted_0, t0 = server.metric_sum(m.TICKS_ADMITTED), time.monotonic()
    time.sleep(6)
    admitted_1, t1 = server.metric_sum(m.TICKS_ADMITTED), time.monotonic()
    scraped_rate = (admitted_1 - admitted_0) / (t1 - t0)
    body = json.loads(server.http("/admin/dashboards/monotape-ordering?window=1m", admin))
    assert len(body["t"]) >= 6 and body["t"] == sorted(body["t"])
    panel = next(p for p in body["panels"] if p["title"].startswith("admitted ticks/s"))
    assert len(panel["series"]) >= 2  # one per venue
    latest = [s["values"][-1] for s in panel["series"]]
    assert all(v is not None for v in latest)
    ring_rate = sum(latest)
    # Same counter, two readers, slightly different windows: agree within a factor of two.
    assert scraped_rate > 0 and 0.5 < ring_rate / scraped_rate < 2.0, (ring_rate, scraped_rate)
    for d in DASHBOARDS:
        body = json.loads(server.http(f"/admin/dashboards/{d.uid}?window=5m", admin))
        assert [p["title"] for p in body["panels"]] == [p.title for p in d.panels]
        for p in body["panels"]:
            assert all(len(s["values"]) == len(body["t"]) for s in p["series"]), p["title"]
