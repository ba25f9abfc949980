"""The admin API (Starlette): probes and metrics for everyone, /admin/* for admin tokens only.

Built entirely from the node it serves (an app factory); every handler is thin: it validates the
query, asks the piece of state that owns the answer, and returns JSON. Anything that reads files
(the interval logs) runs in a worker thread, never on the event loop the fan-out shares.
Schemas: ``GET /openapi.json`` (built from ``ENDPOINTS`` below, so docs and routes cannot drift).
"""

from __future__ import annotations

import fnmatch
import gc
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from monotape.dashboards.web import DASHBOARD_ENDPOINTS, dashboard_handlers, static_mount
from monotape.histograms import ALL_STAGES, query
from monotape.histograms.plot import render_latency_svg
from monotape.histograms.report import ReportArgumentError, parse_duration_ms
from monotape.histograms.timeline import timeline_rows, timeline_with_gc
from monotape.log import log_event
from monotape.platform.auth import AuthError, token_from_request, www_authenticate
from monotape.platform.node.faults import inject_dangling_entry

if TYPE_CHECKING:
    from monotape.platform.node.node import Node

__all__ = ["ENDPOINTS", "PARAMETERS", "build_admin_app", "match_keys"]

Handler = Callable[[Request], Awaitable[Response]]
MAX_WINDOW_MS = 7 * 24 * 3600 * 1000  # retention's default: nothing older is on disk


class BadParameter(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


def _json(body: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(body), status_code=status, media_type="application/json")


def _error(status: int, message: str, **extra: Any) -> Response:
    return _json({"error": message, **extra}, status)


def _window_ms(request: Request, default: str) -> int:
    raw = request.query_params.get("window", default)
    try:
        ms = parse_duration_ms(raw, "window")
    except ReportArgumentError as exc:
        shown = raw if len(raw) <= 40 else raw[:40] + "…"
        raise BadParameter("window", f"{shown!r} is not a duration like 40s, 10m, 2h") from exc
    if not 0 < ms <= MAX_WINDOW_MS:
        raise BadParameter("window", f"must be between 1 ms and {MAX_WINDOW_MS // 3_600_000} h")
    return ms


def _stage(request: Request) -> str:
    stage = request.query_params.get("stage")
    if stage is None:
        raise BadParameter("stage", f"required, one of {', '.join(ALL_STAGES)}")
    if stage not in ALL_STAGES:
        raise BadParameter("stage", f"{stage!r} is not one of {', '.join(ALL_STAGES)}")
    return stage


def _int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw) if len(raw) <= 20 else lo - 1  # 20 digits: past any bound here
    except ValueError:
        raise BadParameter(name, f"{raw[:40]!r} is not an integer") from None
    if not lo <= value <= hi:
        raise BadParameter(name, f"must be between {lo} and {hi}")
    return value


# (method, path, summary, admin only): the routes and the OpenAPI document come from this list.
ENDPOINTS: list[tuple[str, str, str, bool]] = [
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
        ("gen", "query", "integer", "shade GC pauses of this generation and up (0-2; default 1)"),
    ],
    "/admin/connections": [("limit", "query", "integer", "rows, 0-10000 (default 100)")],
    "/admin/gc": [("recent", "query", "integer", "recent pauses, 0-10000 (default 100)")],
    "/admin/symbols": [
        ("pattern", "query", "string", "glob (XNAS:*) or substring (AAPL), any case"),
        ("limit", "query", "integer", "rows, 1-100000 (default 100000)"),
    ],
    "/admin/symbols/{key}": [("key", "path", "string", "venue-qualified key, e.g. XNAS:AAPL")],
}


def match_keys(keys: list[str], pattern: str) -> list[str]:
    """Keys matching a glob (``XNAS:*``) or, without wildcards, containing ``pattern``; any
    case. The same rule for ``monotape symbols`` with or without a running node."""
    if not pattern:
        return list(keys)
    p = pattern.upper()
    if any(c in p for c in "*?["):
        return [k for k in keys if fnmatch.fnmatchcase(k.upper(), p)]
    return [k for k in keys if p in k.upper()]


def _openapi_parameters(path: str) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "in": where,
            "required": where == "path" or desc.startswith("required"),
            "schema": {"type": kind},
            "description": desc,
        }
        for name, where, kind, desc in PARAMETERS.get(path, [])
    ]


def build_admin_app(node: Node) -> Starlette:
    def admin(handler: Handler) -> Handler:
        """401 without a valid token, 403 for a valid token without the admin claim."""

        async def guarded(request: Request) -> Response:
            verifier = node.verifier
            if verifier is None:
                # Fail closed: without auth there is no way to tell an operator from anyone
                # else on the network, and /admin can drain the node.
                return _error(403, "forbidden: the admin API needs auth.enabled = true")
            else:
                try:
                    # every (name, value) pair: two Authorization headers are refused, not
                    # resolved by whichever copy a dict keeps
                    token = token_from_request(request.headers.items(), "")
                    claims = await verifier.verify(token)
                except AuthError as exc:
                    body = {
                        "error": f"unauthorized: {exc.reason}",
                        "hint": "Authorization: Bearer $(monotape token --sub you --admin) "
                        "(run it with the node's --data-dir)",
                    }
                    return Response(
                        msgspec.json.encode(body),
                        status_code=401,
                        media_type="application/json",
                        headers={"WWW-Authenticate": www_authenticate(exc.reason)},
                    )
                if not claims.admin:
                    return _error(403, "forbidden: this token has no admin claim")
            try:
                return await handler(request)
            except BadParameter as exc:
                return _error(400, str(exc), parameter=exc.name)

        return guarded

    async def healthz(request: Request) -> Response:
        return _json({"status": "ok"})

    async def readyz(request: Request) -> Response:
        up = sum(1 for h in node.handlers if h.up)
        drain = node.server.drain
        ready = node.ready and drain is None
        if drain is not None:
            # A finished drain keeps the node out of rotation until POST /admin/resume.
            status = "drained" if drain.done else "draining"
        else:
            status = "ready" if node.ready else "starting"
        body = {
            "status": status,
            "connections": len(node.server.connections),
            "feed_handlers_up": up,
            "feed_handlers": len(node.handlers),
            "instruments": len(node.universe),
        }
        return _json(body, 200 if ready else 503)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(node.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi(request: Request) -> Response:
        paths: dict[str, Any] = {}
        for method, path, summary, admin_only in ENDPOINTS:
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
            if params := _openapi_parameters(path):
                op["parameters"] = params
            paths.setdefault(path, {})[method.lower()] = op
        return _json(
            {
                "openapi": "3.0.3",
                "info": {"title": "monotape admin API", "version": "1"},
                "components": {
                    "securitySchemes": {
                        "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
                    }
                },
                "paths": paths,
            }
        )

    async def latency(request: Request) -> Response:
        stage = _stage(request)
        window = _window_ms(request, "1m")
        now_ms = int(time.time() * 1000)
        result = await run_in_threadpool(query, node.hdr_dir, stage, now_ms - window, now_ms)
        body = msgspec.to_builtins(result)
        if stage == "glass":
            body["note"] = (
                "RTT/2 of timed pings to a sampled cohort: an upper bound, not a one-way truth"
            )
        return _json(body)

    async def connections(request: Request) -> Response:
        limit = _int_param(request, "limit", 100, 0, 10_000)
        server = node.server
        now = node.clock.now_ns()
        rows = []
        for conn in list(server.connections.values())[:limit]:
            rows.append(
                {
                    "id": conn.conn_id,
                    "peer": conn.peer,
                    "age_s": round((now - conn.opened_ns) / 1e9, 3),
                    "subscriptions": len(server.index.subscriptions(conn.conn_id)),
                    "priority": len(server.index.priority(conn.conn_id)),
                    "queued_frames": len(conn.outbox),
                    "gap": conn.outbox.gap,
                    "frames_sent": conn.frames_sent,
                    "bytes_sent": conn.bytes_sent,
                }
            )
        return _json(
            {
                "count": len(server.connections),
                "signatures": server.index.signatures(),
                "disconnects": dict(server.stats.disconnects),
                "drain": server.drain_status(),
                "connections": rows,
            }
        )

    by_iid = {inst.iid: inst for inst in node.universe}

    def prices(t: Any, decimals: int) -> Any:
        """Prices as the wire carries them (integers scaled by 10**decimals) and as decimals."""
        if t is None:
            return None
        scale = 10**decimals
        return {
            "version": [t.epoch, t.seq],
            "bid": t.bid,
            "ask": t.ask,
            "last": t.last,
            "price": {"bid": t.bid / scale, "ask": t.ask / scale, "last": t.last / scale},
            "size": t.size,
            "handler": t.handler,
        }

    async def index(request: Request) -> Response:
        return _json(
            {
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
                            for n, w, t, d in PARAMETERS.get(path, [])
                        ],
                    }
                    for method, path, summary, admin_only in ENDPOINTS
                ],
            }
        )

    async def symbols(request: Request) -> Response:
        pattern = request.query_params.get("pattern", "")
        limit = _int_param(request, "limit", 100_000, 1, 100_000)
        keys = match_keys([inst.key for inst in node.universe], pattern)
        rows = []
        for key in keys[:limit]:
            iid = node.server.iid_of(key)
            inst = by_iid.get(iid) if iid is not None else None
            if inst is None:
                continue
            rows.append(
                {
                    "key": key,
                    "venue": inst.venue,
                    "symbol": inst.symbol,
                    "price_decimals": inst.price_decimals,
                    "price_scale": 10**inst.price_decimals,
                    "current": prices(node.sequencer.current(inst.iid), inst.price_decimals),
                }
            )
        return _json({"pattern": pattern, "count": len(keys), "symbols": rows})

    async def symbol(request: Request) -> Response:
        key = request.path_params["key"]
        iid = node.server.iid_of(key)
        inst = by_iid.get(iid) if iid is not None else None
        if iid is None or inst is None:
            return _error(404, f"unknown symbol {key[:40]!r}", parameter="key")
        decimals = inst.price_decimals
        return _json(
            {
                "key": key,
                "iid": iid,
                "price_decimals": decimals,
                "price_scale": 10**decimals,
                "current": prices(node.sequencer.current(iid), decimals),
                "published": prices(node.sequencer.published(iid), decimals),
                "subscriber_signatures": len(node.server.index.signatures_of(iid)),
            }
        )

    async def feeds(request: Request) -> Response:
        out = []
        for h in node.handlers:
            out.append(
                {
                    "venue": h.venue,
                    "handler": h.name,
                    "up": h.up,
                    "lag_ms": h.lag_ns / 1e6,
                    "delivered": h.delivered,
                    "dropped": h.dropped,
                    "backwards": h.backwards,  # its own stream went back: an anomaly
                    "epochs": [[r.epoch, r.fence_ts_ns] for r in h.records],
                }
            )
        return _json({"handlers": out, "source": "replay" if node.replay else "simulator"})

    async def invariants(request: Request) -> Response:
        return _json(node.invariants.report())

    async def gc_view(request: Request) -> Response:
        recent = _int_param(request, "recent", 100, 0, 10_000)
        return _json(
            {"gc": node.gc_monitor.snapshot(recent=recent), "loop_lag": node.loop_lag.snapshot()}
        )

    async def gc_collect(request: Request) -> Response:
        # An operator's lever, and how the tests provoke a gen-2 collection: the pause it causes
        # is recorded by the monitor like any other.
        before = len(node.gc_monitor.pauses())
        collected = gc.collect(2)
        pauses = node.gc_monitor.pauses()[before:]
        return _json(
            {"collected": collected, "pauses": [p.overlay() for p in pauses if p.generation == 2]}
        )

    def _window(request: Request) -> tuple[int, int]:
        window = _window_ms(request, "10m")
        end_ms = node.clock.wall_ns() // 1_000_000
        return end_ms - window, end_ms

    async def latency_timeline(request: Request) -> Response:
        start_ms, end_ms = _window(request)
        rows = await run_in_threadpool(
            timeline_with_gc, node.hdr_dir, start_ms, end_ms, node.gc_monitor
        )
        return _json({"window_start_ms": start_ms, "window_end_ms": end_ms, "intervals": rows})

    async def latency_svg(request: Request) -> Response:
        start_ms, end_ms = _window(request)
        # Every generation is a candidate: a long young pause matters too; the plot draws only
        # gen 2 and pauses over its threshold (128 short gen-1 bands a minute read as a barcode).
        min_gen = _int_param(request, "gen", 0, 0, 2)
        rows = await run_in_threadpool(timeline_rows, node.hdr_dir, start_ms, end_ms)
        pauses = node.gc_monitor.pauses_between(start_ms, end_ms, min_generation=min_gen)
        svg = render_latency_svg(rows, pauses, title="p99 per stage, GC pauses that matter")
        return Response(svg, media_type="image/svg+xml")

    async def drain(request: Request) -> Response:
        started = node.server.start_drain()
        return _json(node.server.drain_status(), 202 if started else 200)

    async def resume(request: Request) -> Response:
        resumed = node.server.resume()
        return _json({"resumed": resumed, **node.server.drain_status()})

    async def fault_dangling_entry(request: Request) -> Response:
        if not node.cfg.server.fault_injection:
            return _error(
                404, "fault injection is off: start the node with --enable-fault-injection"
            )
        conn = inject_dangling_entry(
            node.server.index, node.server.connections, [i.iid for i in node.universe[:1]]
        )
        node.invariants.run_once()  # visible at this scrape, not at the next 30 s check
        log_event("fault_injected", level="warning", fault="dangling_entry", conn=conn)
        return _json({"injected": "dangling_entry", "conn": conn, **node.invariants.report()})

    handlers: dict[str, Handler] = {
        "/admin/faults/dangling-entry": fault_dangling_entry,
        "/admin/gc": gc_view,
        "/admin/gc/collect": gc_collect,
        "/admin/latency/timeline": latency_timeline,
        "/admin/plots/latency.svg": latency_svg,
        "/admin/drain": drain,
        "/admin/resume": resume,
        "/admin/": index,
        "/admin/symbols": symbols,
        "/healthz": healthz,
        "/readyz": readyz,
        "/metrics": metrics,
        "/openapi.json": openapi,
        "/admin/latency": latency,
        "/admin/connections": connections,
        "/admin/symbols/{key}": symbol,
        "/admin/feeds": feeds,
        "/admin/invariants": invariants,
        **dashboard_handlers(
            node.dashboard_ring,
            lambda: node.clock.wall_ns() // 1_000_000,
            node.gc_monitor.pauses_between,
        ),
    }
    routes: list[BaseRoute] = [
        Route(path, admin(handlers[path]) if admin_only else handlers[path], methods=[method])
        for method, path, _, admin_only in ENDPOINTS
    ]
    routes.append(static_mount())  # the dashboards' scripts and uPlot: no data, no token
    return Starlette(routes=routes)
