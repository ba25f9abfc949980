"""The admin API (Starlette): probes and metrics for everyone, /admin/* for admin tokens only.

Built entirely from an ``AdminView`` (view.py: what the app reads and does of a running
node; the ``Node`` is one) by an app factory. The routes live by area: the desk's picture
(terminals, symbols, feeds, invariants, drain: desk.py) and the latency picture
(percentiles, timeline, plot, GC: latency.py); this module holds the guard, the probes,
/metrics and the route table. Schemas: ``GET /openapi.json`` (built from ``ENDPOINTS`` below, so
docs and routes cannot drift).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from monotape.dashboards.web import DASHBOARD_ENDPOINTS, dashboard_handlers, static_mount
from monotape.platform.admin.desk import desk_handlers
from monotape.platform.admin.latency import latency_handlers
from monotape.platform.admin.params import (
    ROUTE_ERRORS,
    Handler,
    admin_guard,
    json_response,
)
from monotape.platform.admin.view import AdminView
from monotape.platform.admin.watchlist import (
    WATCHLIST_ENDPOINTS,
    WatchlistSite,
    watchlist_handlers,
    watchlist_mounts,
)

__all__ = [
    "ENDPOINTS",
    "PARAMETERS",
    "Endpoint",
    "Param",
    "admin_index",
    "build_admin_app",
    "openapi_document",
]


# (method, path, summary, admin only): the routes and the OpenAPI document come from this list
# (the host's too: host/admin.py serves the ones it answers, with the same paths).
Endpoint = tuple[str, str, str, bool]
ENDPOINTS: list[Endpoint] = [
    ("GET", "/healthz", "Liveness: the process answers.", False),
    ("GET", "/readyz", "Readiness: listening, feeds up (503 while starting).", False),
    ("GET", "/metrics", "Prometheus exposition.", False),
    ("GET", "/openapi.json", "This API's OpenAPI document.", False),
    ("GET", "/admin/latency", "Merged HDR percentiles of one stage: ?stage=&window=.", True),
    ("GET", "/admin/connections", "Connections: count, reasons, the first ?limit=.", True),
    ("GET", "/admin/", "This index: every route, with its parameters.", True),
    ("GET", "/admin/symbols", "Symbol keys with prices and their scale: ?pattern=&limit=.", True),
    ("GET", "/admin/symbols/{key}", "One symbol: current and published versions, prices.", True),
    ("GET", "/admin/feeds", "Feed handlers: up, lag, delivered, epochs.", True),
    ("GET", "/admin/invariants", "The latest invariant results, with numbers.", True),
    ("GET", "/admin/glass", "What terminals reported dropping, and the last offender.", True),
    ("GET", "/admin/gc", "GC pauses per generation, recent pauses, event-loop lag.", True),
    ("POST", "/admin/gc/collect", "Run a full collection now and report its pause.", True),
    ("GET", "/admin/latency/timeline", "Per-interval percentiles per stage, GC overlaid.", True),
    ("GET", "/admin/plots/latency.svg", "p99 per stage over ?window=, GC pauses shaded.", True),
    ("POST", "/admin/drain", "Close every terminal, 2% per 250 ms, staggered hints.", True),
    ("POST", "/admin/resume", "Take terminals again after a drain (readyz 200 again).", True),
    (
        "POST",
        "/admin/faults/dangling-entry",
        "Alert drill: corrupt one index entry, check invariants now (--enable-fault-injection).",
        True,
    ),
    *DASHBOARD_ENDPOINTS,
    *WATCHLIST_ENDPOINTS,
]

# name, where ("query" or "path"), type, description: what /openapi.json and /admin/ declare.
Param = tuple[str, str, str, str]
_WINDOW = "a duration: 40s, 10m, 2h (ms, s, m, h, d; at most 168 h)"
PARAMETERS: dict[str, list[Param]] = {
    "/admin/latency": [
        ("stage", "query", "string", "required: decode, sequence, conflate, encode, write, ..."),
        ("window", "query", "string", _WINDOW + "; default 1m"),
    ],
    "/admin/latency/timeline": [("window", "query", "string", _WINDOW + "; default 10m")],
    "/admin/plots/latency.svg": [
        ("window", "query", "string", _WINDOW + "; default 10m"),
        ("gen", "query", "integer", "shade GC pauses of this generation and up (0-2; default 0)"),
    ],
    "/admin/connections": [("limit", "query", "integer", "rows, 0-10000 (default 100)")],
    "/admin/gc": [("recent", "query", "integer", "recent pauses, 0-10000 (default 100)")],
    "/admin/symbols": [
        ("pattern", "query", "string", "glob (XNAS:*) or substring (AAPL), any case"),
        ("limit", "query", "integer", "rows, 1-100000 (default 100000)"),
    ],
    "/admin/symbols/{key}": [("key", "path", "string", "venue-qualified key, e.g. XNAS:AAPL")],
}


def _openapi_parameters(path: str, parameters: Mapping[str, list[Param]]) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "in": where,
            "required": where == "path" or desc.startswith("required"),
            "schema": {"type": kind},
            "description": desc,
        }
        for name, where, kind, desc in parameters.get(path, [])
    ]


def build_admin_app(view: AdminView, watchlist: WatchlistSite | None = None) -> Starlette:
    """``watchlist``: the watchlist page's site (admin/watchlist.py); None leaves its routes out."""

    admin = admin_guard(lambda: view.verifier)

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: Request) -> Response:
        up = sum(1 for h in view.handlers if h.up)
        drain = view.server.drain
        ready = view.ready and drain is None
        if drain is not None:
            # A finished drain keeps the node out of rotation until POST /admin/resume.
            status = "drained" if drain.done else "draining"
        else:
            status = "ready" if view.ready else "starting"
        body = {
            "status": status,
            "connections": len(view.server.connections),
            "feed_handlers_up": up,
            "feed_handlers": len(view.handlers),
            "instruments": len(view.universe),
        }
        return json_response(body, 200 if ready else 503)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(view.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi(request: Request) -> Response:
        return json_response(openapi_document())

    async def index(request: Request) -> Response:
        return json_response(admin_index())

    handlers: dict[str, Handler] = {
        "/healthz": healthz,
        "/readyz": readyz,
        "/metrics": metrics,
        "/openapi.json": openapi,
        "/admin/": index,
        **desk_handlers(view),
        **latency_handlers(view),
        **dashboard_handlers(
            view.dashboard_ring,
            lambda: view.clock.wall_ns() // 1_000_000,
            view.gc_monitor.pauses_between,
        ),
    }
    left_out: set[str] = set()
    if watchlist is not None:
        handlers.update(watchlist_handlers(watchlist))
    else:
        left_out = {path for _, path, _, _ in WATCHLIST_ENDPOINTS}
    routes: list[BaseRoute] = [
        Route(path, admin(handlers[path]) if admin_only else handlers[path], methods=[method])
        for method, path, _, admin_only in ENDPOINTS
        if path not in left_out
    ]
    routes.append(static_mount())  # the dashboards' scripts and uPlot: no data, no token
    if watchlist is not None:
        routes.extend(watchlist_mounts())  # the page's scripts and the JS SDK: no data, no token
    return Starlette(routes=routes, exception_handlers=ROUTE_ERRORS)


def admin_index(
    endpoints: Sequence[Endpoint] | None = None,
    parameters: Mapping[str, list[Param]] | None = None,
) -> dict[str, Any]:
    """The body of ``GET /admin/``: every route of ``endpoints`` (default ``ENDPOINTS``) with
    its ``parameters`` (default ``PARAMETERS``); the host passes the routes it serves."""
    params = PARAMETERS if parameters is None else parameters
    return {
        "title": "monotape admin API",
        "openapi": "/openapi.json",
        "auth": "everything under /admin needs an admin token: "
        "Authorization: Bearer $(monotape token --sub you --admin)",
        "routes": [
            {
                "method": method,
                "path": path,
                "summary": summary,
                "admin": admin_only,
                "parameters": [
                    {"name": n, "in": w, "type": t, "description": d}
                    for n, w, t, d in params.get(path, [])
                ],
            }
            for method, path, summary, admin_only in (ENDPOINTS if endpoints is None else endpoints)
        ],
    }


def openapi_document(
    endpoints: Sequence[Endpoint] | None = None,
    parameters: Mapping[str, list[Param]] | None = None,
) -> dict[str, Any]:
    """The OpenAPI 3 document of every route in ``endpoints`` (default ``ENDPOINTS``)."""
    params = PARAMETERS if parameters is None else parameters
    paths: dict[str, Any] = {}
    for method, path, summary, admin_only in ENDPOINTS if endpoints is None else endpoints:
        op: dict[str, Any] = {"summary": summary, "responses": {"200": {"description": "OK"}}}
        if admin_only:
            op["security"] = [{"bearer": []}]
            op["responses"].update(
                {
                    "400": {"description": "A bad query parameter (named)."},
                    "401": {"description": "No valid token."},
                    "403": {"description": "A valid token without the admin claim."},
                }
            )
        if declared := _openapi_parameters(path, params):
            op["parameters"] = declared
        paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.0.3",
        "info": {"title": "monotape admin API", "version": "1"},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
            }
        },
        "paths": paths,
    }
