"""The embedded dashboards on the admin server.

``GET /dashboards`` is a static page (no data in it, so it needs no token): it asks for an
admin token once, keeps it in the tab's ``sessionStorage`` (gone when the tab closes, never in
a URL, a cookie or a log line) and sends it as a bearer header to the two data routes below,
which sit behind the admin token like the rest of /admin. The page's scripts and uPlot
(vendored, pinned: static/uplot/VERSION) are served from the package: it works offline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from .panels import DASHBOARDS, Dashboard, dashboard
from .queries import sample_names
from .view import WINDOWS, dashboard_from, snapshot

if TYPE_CHECKING:
    from monotape.histograms.gc import GcPause

    from .sampler import SampleRing

__all__ = [
    "DASHBOARD_ENDPOINTS",
    "STATIC_DIR",
    "Handler",
    "dashboard_handlers",
    "json_response",
    "static_mount",
]

# A route and its JSON answer, shared with the admin API's routes (admin/params.py imports
# them from here: the node sits above the dashboards, never the reverse).
Handler = Callable[[Request], Awaitable[Response]]
STATIC_DIR = resources.files("monotape.dashboards") / "static"

# (method, path, summary, admin only), in the admin API's ENDPOINTS form.
DASHBOARD_ENDPOINTS: list[tuple[str, str, str, bool]] = [
    ("GET", "/dashboards", "The embedded dashboards (sign in with an admin token).", False),
    ("GET", "/admin/dashboards", "The embedded dashboards: uid and title of each.", True),
    (
        "GET",
        "/admin/dashboards/{uid}",
        "One dashboard's panels, live, over ?window= (1m, 5m, 15m, 1h).",
        True,
    ),
]


def _names_drawn(d: Dashboard) -> frozenset[str]:
    """The sample names one dashboard's panels read: the only series its request copies."""
    return frozenset(n for p in d.panels for t in p.targets for n in sample_names(t.query))


def json_response(body: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(body), status_code=status, media_type="application/json")


def dashboard_handlers(
    ring: SampleRing,
    wall_ms: Callable[[], int],
    pauses_between: Callable[[int, int], list[GcPause]],
) -> dict[str, Handler]:
    """The routes, over what they read: the node's sample ring, its wall clock and its GC
    pauses (not the whole node: the dashboards depend on data, not on the composition root)."""
    drawn = {d.uid: _names_drawn(d) for d in DASHBOARDS}

    async def page(request: Request) -> Response:
        html = (STATIC_DIR / "index.html").read_bytes()
        return Response(
            html,
            media_type="text/html; charset=utf-8",
            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
        )

    async def index(request: Request) -> Response:
        return json_response(
            {
                "dashboards": [
                    {"uid": d.uid, "title": d.title, "description": d.description}
                    for d in DASHBOARDS
                ],
                "windows": list(WINDOWS),
            }
        )

    async def data(request: Request) -> Response:
        uid = request.path_params["uid"]
        try:
            d = dashboard(uid)
        except KeyError as exc:
            return json_response({"error": exc.args[0], "parameter": "uid"}, 404)
        raw = request.query_params.get("window", "5m")
        if raw not in WINDOWS:
            return json_response(
                {"error": f"window: {raw[:40]!r} is not one of {', '.join(WINDOWS)}",
                 "parameter": "window"},
                400,
            )  # fmt: skip
        window_s = WINDOWS[raw]
        # Copy the window on the loop (the sampler writes the ring there), do the arithmetic
        # in a worker thread: tens of ms for a busy dashboard must not delay a frame. Only this
        # dashboard's series are copied (a few dozen of the ring's ~260).
        snap = snapshot(ring, window_s, drawn[d.uid])
        end_ms = wall_ms()
        pauses = pauses_between(end_ms - window_s * 1000 - 1000, end_ms + 1)
        body = await run_in_threadpool(dashboard_from, d, snap, pauses, window_s)
        return json_response(body)

    return {"/dashboards": page, "/admin/dashboards": index, "/admin/dashboards/{uid}": data}


def static_mount() -> Mount:
    return Mount(
        "/dashboards/static",
        app=StaticFiles(packages=[("monotape.dashboards", "static")]),
        name="dashboards-static",
    )
