"""Admin routes of the desk's picture: terminals (connections, drain, resume), symbols and
their prices, feed handlers, invariants, and the alert drill's fault injection.

Each handler is thin: it validates the query, asks the piece of state that owns the answer (via
``AdminView``) and returns JSON.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from monotape.log import log_event
from monotape.platform.admin.faults import inject_dangling_entry
from monotape.platform.admin.params import (
    Handler,
    error_response,
    int_param,
    json_response,
    pattern_param,
)
from monotape.platform.admin.view import AdminView
from monotape.platform.model import Instrument, Tick

__all__ = ["desk_handlers", "match_keys", "symbol_row", "tick_prices"]


def match_keys(keys: list[str], pattern: str) -> list[str]:
    """Keys matching a glob (``XNAS:*``) or, without wildcards, containing ``pattern``; any
    case. The same rule for ``monotape symbols`` with or without a running node."""
    if not pattern:
        return list(keys)
    p = pattern.upper()
    if any(c in p for c in "*?["):
        return [k for k in keys if fnmatch.fnmatchcase(k.upper(), p)]
    return [k for k in keys if p in k.upper()]


def symbol_row(inst: Instrument, current: Any = None) -> dict[str, Any]:
    """One row of /admin/symbols (and of ``monotape symbols`` without a node): the key, its
    parts, the price scale, and ``current`` (``tick_prices`` of the latest tick, or None)."""
    return {
        "key": inst.key,
        "venue": inst.venue,
        "symbol": inst.symbol,
        "price_decimals": inst.price_decimals,
        "price_scale": 10**inst.price_decimals,
        "current": current,
    }


def tick_prices(t: Tick | None, decimals: int) -> Any:
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


def desk_handlers(view: AdminView) -> dict[str, Handler]:
    """The handlers by path: /admin/connections, /admin/symbols, /admin/symbols/{key},
    /admin/feeds, /admin/invariants, /admin/drain, /admin/resume, /admin/faults/dangling-entry,
    /admin/glass."""
    by_iid = {inst.iid: inst for inst in view.universe}

    async def connections(request: Request) -> Response:
        limit = int_param(request, "limit", 100, 0, 10_000)
        server = view.server
        now = view.clock.now_ns()
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
        return json_response(
            {
                "count": len(server.connections),
                "signatures": server.index.signatures(),
                "disconnects": dict(server.stats.disconnects),
                "drain": server.drain_status(),
                "connections": rows,
            }
        )

    async def symbols(request: Request) -> Response:
        pattern = pattern_param(request)
        limit = int_param(request, "limit", 100_000, 1, 100_000)
        keys = match_keys([inst.key for inst in view.universe], pattern)
        rows = []
        for key in keys[:limit]:
            iid = view.server.iid_of(key)
            inst = by_iid.get(iid) if iid is not None else None
            if inst is None:
                continue
            current = tick_prices(view.sequencer.current(inst.iid), inst.price_decimals)
            rows.append(symbol_row(inst, current))
        return json_response({"pattern": pattern, "count": len(keys), "symbols": rows})

    async def symbol(request: Request) -> Response:
        key = request.path_params["key"]
        iid = view.server.iid_of(key)
        inst = by_iid.get(iid) if iid is not None else None
        if iid is None or inst is None:
            return error_response(404, f"unknown symbol {key[:40]!r}", parameter="key")
        decimals = inst.price_decimals
        return json_response(
            {
                "key": key,
                "iid": iid,
                "price_decimals": decimals,
                "price_scale": 10**decimals,
                "current": tick_prices(view.sequencer.current(iid), decimals),
                "published": tick_prices(view.sequencer.published(iid), decimals),
                "subscriber_signatures": len(view.server.index.signatures_of(iid)),
            }
        )

    async def feeds(request: Request) -> Response:
        out = []
        for h in view.handlers:
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
        return json_response({"handlers": out, "source": view.source})

    async def invariants(request: Request) -> Response:
        return json_response(view.invariants.report())

    async def drain(request: Request) -> Response:
        started = view.server.start_drain()
        return json_response(view.server.drain_status(), 202 if started else 200)

    async def resume(request: Request) -> Response:
        resumed = view.server.resume()
        return json_response({"resumed": resumed, **view.server.drain_status()})

    async def fault_dangling_entry(request: Request) -> Response:
        if not view.fault_injection:
            return error_response(
                404, "fault injection is off: start the node with --enable-fault-injection"
            )
        conn = inject_dangling_entry(
            view.server.index, view.server.connections, [i.iid for i in view.universe[:1]]
        )
        view.invariants.run_once()  # visible at this scrape, not at the next 30 s check
        log_event("fault_injected", level="warning", fault="dangling_entry", conn=conn)
        return json_response(
            {"injected": "dangling_entry", "conn": conn, **view.invariants.report()}
        )

    async def glass(request: Request) -> Response:
        # What terminals' own guards reported dropping (``report``), and the last offender:
        # who (connection, token subject), which symbol, what it held and what came.
        return json_response(view.server.glass.status())

    return {
        "/admin/glass": glass,
        "/admin/connections": connections,
        "/admin/symbols": symbols,
        "/admin/symbols/{key}": symbol,
        "/admin/feeds": feeds,
        "/admin/invariants": invariants,
        "/admin/drain": drain,
        "/admin/resume": resume,
        "/admin/faults/dangling-entry": fault_dangling_entry,
    }
