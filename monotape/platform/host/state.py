"""What each role answers the host's admin API about itself (telemetry.RoleState, loopback).

A role answers with the node's own route handlers (admin/desk.py, admin/latency.py)
run against a ``RoleView``: the members of the node's ``AdminView`` this role has (a writer its
server, invariant monitor, GC monitor and loop lag; a feed handler its one handler). So a
writer's connections, glass, invariants, GC and drain answers are the node's, byte for byte,
and the host (admin_merge.py) only adds them up. The sequencer holds the prices:
``symbol_prices`` answers ``/admin/symbols/{key}`` from its lanes, ``symbols_prices``
``/admin/symbols`` (at most ``SYMBOLS_CAP`` rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlencode

import msgspec
from starlette.requests import Request

from monotape.clock import Clock
from monotape.histograms.gc import GcMonitor
from monotape.invariants import InvariantMonitor
from monotape.platform.admin.desk import desk_handlers, match_keys, symbol_row, tick_prices
from monotape.platform.admin.latency import latency_handlers
from monotape.platform.admin.params import BadParameter, Handler
from monotape.platform.admin.view import (
    AdminView,
    FeedView,
    LoopLagView,
    QuoteBook,
    TerminalTable,
)
from monotape.platform.host.admin_routes import SYMBOLS_CAP
from monotape.platform.host.admin_views import gc_pauses_state
from monotape.platform.host.telemetry import Provider, RoleState
from monotape.platform.model import Instrument, Tick

__all__ = [
    "NoLoopLag",
    "NoQuotes",
    "RoleView",
    "handler_state",
    "node_route",
    "sequencer_state",
    "symbol_prices",
    "symbols_prices",
    "writer_state",
]


class NoQuotes:
    """A writer holds no prices (the sequencer does): its symbol answer carries only what it
    has, the subscriber signatures of the symbol."""

    def current(self, iid: int) -> Tick | None:
        return None

    def published(self, iid: int) -> Tick | None:
        return None


class NoLoopLag:
    """A feed handler runs no loop-lag monitor: the node's /admin/gc answer says so with
    ``"loop_lag": null``."""

    def snapshot(self) -> None:
        return None


class RoleView:
    """The part of the node's ``AdminView`` one role has; ``as_view`` hands it to the node's
    route factories, whose handlers read only the members their route needs (a writer is never
    asked for feeds, a handler never for connections)."""

    def __init__(
        self,
        clock: Clock,
        *,
        universe: Sequence[Instrument] = (),
        server: TerminalTable | None = None,
        invariants: InvariantMonitor | None = None,
        gc_monitor: GcMonitor | None = None,
        loop_lag: LoopLagView | None = None,
        handlers: Sequence[FeedView] = (),
        source: str = "simulator",
        hdr_dir: Path = Path(),
    ) -> None:
        self.clock = clock
        self.universe = universe
        self.server = server
        self.invariants = invariants
        self.gc_monitor = gc_monitor
        self.loop_lag = loop_lag
        self.handlers = handlers
        self.source = source
        self.hdr_dir = hdr_dir
        self.sequencer = NoQuotes()
        self.fault_injection = False

    def as_view(self) -> AdminView:
        return cast(AdminView, self)


def node_route(handler: Handler, method: str = "GET", path_param: str = "") -> Provider:
    """One of the node's route handlers as a role's provider: the host's query becomes the
    request's (``path_param`` moves from the query to the path, as ``{key}``)."""

    async def provider(params: Mapping[str, str]) -> tuple[int, bytes]:
        query = dict(params)
        path_params = {path_param: query.pop(path_param, "")} if path_param else {}
        scope: dict[str, Any] = {
            "type": "http",
            "method": method,
            "path": "/",
            "query_string": urlencode(query).encode(),
            "headers": [],
            "path_params": path_params,
        }
        try:
            response = await handler(Request(scope))
        except BadParameter as exc:  # the host checks first; a role still says which
            body = {"error": str(exc), "parameter": exc.name}
            return 400, msgspec.json.encode(body)
        return response.status_code, bytes(response.body)

    return provider


def writer_state(state: RoleState, view: RoleView) -> RoleState:
    """A writer's answers: its terminals, their glass reports, its invariants, GC, one symbol's
    subscribers; drain, resume and a full collection as actions."""
    desk = desk_handlers(view.as_view())
    lat = latency_handlers(view.as_view())
    state.states.update(
        {
            "connections": node_route(desk["/admin/connections"]),
            "glass": node_route(desk["/admin/glass"]),
            "invariants": node_route(desk["/admin/invariants"]),
            "gc": node_route(lat["/admin/gc"]),
            "gc_pauses": gc_pauses_state(view.gc_monitor),  # the host's timeline (admin_views)
            "symbol": node_route(desk["/admin/symbols/{key}"], path_param="key"),
        }
    )
    state.actions.update(
        {
            "drain": node_route(desk["/admin/drain"], "POST"),
            "resume": node_route(desk["/admin/resume"], "POST"),
            "gc-collect": node_route(lat["/admin/gc/collect"], "POST"),
        }
    )
    return state


def handler_state(state: RoleState, view: RoleView) -> RoleState:
    """A feed handler's answers: its row of /admin/feeds; with a GC monitor, its GC (no loop
    lag monitor here: ``loop_lag`` is null) and a full collection as an action."""
    state.states["feeds"] = node_route(desk_handlers(view.as_view())["/admin/feeds"])
    if view.gc_monitor is not None:
        if view.loop_lag is None:
            view.loop_lag = cast(LoopLagView, NoLoopLag())
        lat = latency_handlers(view.as_view())
        state.states["gc"] = node_route(lat["/admin/gc"])
        state.states["gc_pauses"] = gc_pauses_state(view.gc_monitor)  # admin_views' timeline
        state.actions["gc-collect"] = node_route(lat["/admin/gc/collect"], "POST")
    return state


def symbol_prices(universe: Sequence[Instrument], quotes: QuoteBook) -> Provider:
    """The sequencer's answer for one symbol (``?key=``): current and published prices, as the
    node's ``/admin/symbols/{key}`` shows them (the same ``tick_prices`` rows)."""
    by_key = {inst.key: inst for inst in universe}

    async def provider(params: Mapping[str, str]) -> tuple[int, bytes]:
        key = params.get("key", "")
        inst = by_key.get(key)
        if inst is None:
            error = {"error": f"unknown symbol {key[:40]!r}", "parameter": "key"}
            return 404, msgspec.json.encode(error)
        decimals = inst.price_decimals
        body: dict[str, Any] = {
            "key": key,
            "iid": inst.iid,
            "current": tick_prices(quotes.current(inst.iid), decimals),
            "published": tick_prices(quotes.published(inst.iid), decimals),
        }
        return 200, msgspec.json.encode(body)

    return provider


def symbols_prices(universe: Sequence[Instrument], quotes: QuoteBook) -> Provider:
    """The sequencer's answer for ``/admin/symbols`` (``?pattern=&limit=``): the node's rows,
    each with its current prices; at most ``SYMBOLS_CAP`` rows (``count`` says how many match)."""
    keys = [inst.key for inst in universe]
    by_key = {inst.key: inst for inst in universe}

    async def provider(params: Mapping[str, str]) -> tuple[int, bytes]:
        pattern = params.get("pattern", "")
        raw = params.get("limit", "")
        if raw and (len(raw) > 9 or not raw.isdigit()):
            error = {"error": f"limit: {raw[:24]!r} is not a whole number", "parameter": "limit"}
            return 400, msgspec.json.encode(error)
        limit = min(max(int(raw or SYMBOLS_CAP), 1), SYMBOLS_CAP)
        matched = match_keys(keys, pattern)
        rows = []
        for key in matched[:limit]:
            inst = by_key[key]
            current = tick_prices(quotes.current(inst.iid), inst.price_decimals)
            rows.append(symbol_row(inst, current))
        body = {"pattern": pattern, "count": len(matched), "symbols": rows}
        return 200, msgspec.json.encode(body)

    return provider


def sequencer_state(
    state: RoleState, view: RoleView, universe: Sequence[Instrument], quotes: QuoteBook
) -> RoleState:
    """The sequencer's answers: one symbol's prices, every matching symbol's, its GC; a full
    collection as an action."""
    lat = latency_handlers(view.as_view())
    state.states.update(
        {
            "symbol": symbol_prices(universe, quotes),
            "symbols": symbols_prices(universe, quotes),
            "gc": node_route(lat["/admin/gc"]),
            "gc_pauses": gc_pauses_state(view.gc_monitor),  # the host's timeline (admin_views)
        }
    )
    state.actions["gc-collect"] = node_route(lat["/admin/gc/collect"], "POST")
    return state
