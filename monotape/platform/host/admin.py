"""The host's admin API: one /metrics, one /healthz and /admin/processes for every process.

``Observer`` scrapes the roles (aggregate.py) and renders them with the host's own metrics
(``HostCollector``: processes up, restarts by role and reason, scrapes that failed) as one
exposition; the app is built from it and the process table, like admin/app.py builds its app
from an ``AdminView``. /healthz is 200 when every role process runs (503 naming those that do
not: a load balancer's probe takes the host out while a writer restarts), /readyz when every
role is also ready (its metrics port published) and no drain holds it out of rotation (503
"draining"/"drained" from POST /admin/drain to /admin/resume), /admin/latency the exact
percentiles of a stage merged over every process's histogram intervals. /admin/* needs an admin
token, as on the node. The node's desk routes (connections, feeds, invariants, glass, GC, drain,
resume, the symbols and their prices) are answered by the roles that hold the state and merged
(admin_routes.py). The routes, /admin/ and /openapi.json come from one table: the
node's ``ENDPOINTS`` entries this app has a handler for, plus ``HOST_ENDPOINTS``; a route is
added by adding its handler to ``handlers`` below and its row, if the node has none (a handler
without a row is an error when the app is built, never a route silently left out).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from monotape import metric_names as m
from monotape.clock import SystemClock
from monotape.log import Throttle, log_event
from monotape.platform.admin.app import (
    ENDPOINTS,
    PARAMETERS,
    Endpoint,
    Param,
    admin_index,
    openapi_document,
)
from monotape.platform.admin.latency import latency_handlers
from monotape.platform.admin.params import (
    ROUTE_ERRORS,
    Handler,
    admin_guard,
    json_response,
)
from monotape.platform.auth import TokenVerifier
from monotape.platform.host.admin_routes import HostDrain, RoleAsker, host_desk_handlers
from monotape.platform.host.admin_views import host_views
from monotape.platform.host.aggregate import MergedCollector, Scrape, merge, scrape_all
from monotape.platform.host.state import RoleView
from monotape.platform.host.supervisor import ProcessTable, SlotState
from monotape.platform.model import Instrument

__all__ = [
    "HOST_ENDPOINTS",
    "HOST_PARAMETERS",
    "HostCollector",
    "Observer",
    "build_host_admin_app",
    "host_endpoints",
    "terminal_count",
]

HOST = "host"  # the host's own samples carry process="host"

# The host's routes that the one-process node has no use for (same row shape as ENDPOINTS).
HOST_ENDPOINTS: list[Endpoint] = [
    (
        "GET",
        "/admin/processes",
        "Every role process: state, pid, uptime, restarts; terminals per writer.",
        True,
    ),
]
HOST_PARAMETERS: dict[str, list[Param]] = {
    **PARAMETERS,
    "/admin/gc/collect": [
        ("process", "query", "string", "one process (writer-0, sequencer); default every one")
    ],
}


def host_endpoints(paths: set[str]) -> list[Endpoint]:
    """The rows of ``ENDPOINTS`` and ``HOST_ENDPOINTS`` the host has a handler for, in order:
    what it routes, lists at /admin/ and documents at /openapi.json (one list: no drift).
    Raises ValueError for a handler without a row (it would be served by no route)."""
    rows = [row for row in [*ENDPOINTS, *HOST_ENDPOINTS] if row[1] in paths]
    unlisted = sorted(paths - {row[1] for row in rows})
    if unlisted:
        raise ValueError(f"host admin handlers without an ENDPOINTS row: {', '.join(unlisted)}")
    return rows


class HostCollector:
    """The host's metrics about its roles, computed from the table at scrape time."""

    def __init__(self, table: ProcessTable, scrape_failures: Counter[str]) -> None:
        self._table = table
        self._failures = scrape_failures

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            m.PROCESS_UP, "1 while the role process runs", labels=["role", "process"]
        )
        for s in self._table.slots.values():
            up.add_metric([s.role, s.name], 1.0 if s.state is SlotState.RUNNING else 0.0)
        yield up
        restarts = CounterMetricFamily(
            m.counter_base(m.PROCESS_RESTARTS),
            "Role processes that exited while the host was running, by exit reason",
            labels=["role", "process", "reason"],
        )
        for (role, name, reason), n in sorted(self._table.restart_counts.items()):
            restarts.add_metric([role, name, reason], float(n))
        yield restarts
        silence = GaugeMetricFamily(
            m.PROCESS_BEAT_SILENCE_MAX,
            "The longest a role went without a liveness beat (outside a GC or a disk wait)",
            labels=["role", "process"],
        )
        for s in self._table.slots.values():
            silence.add_metric([s.role, s.name], s.beat_silence_max_s)
        yield silence
        failed = CounterMetricFamily(
            m.counter_base(m.PROCESS_SCRAPE_FAILURES),
            "Scrapes of a role's metrics that failed (that role was left out of /metrics)",
            labels=["process"],
        )
        for name, n in sorted(self._failures.items()):
            failed.add_metric([name], float(n))
        yield failed


def terminal_count(text: str) -> int:
    """``monotape_connections`` in one writer's exposition (0 if absent or unparsable)."""
    try:
        for fam in text_string_to_metric_families(text):
            if fam.name == m.CONNECTIONS:
                return int(sum(s.value for s in fam.samples if s.name == m.CONNECTIONS))
    except (ValueError, TypeError, IndexError):
        return 0
    return 0


class Observer:
    """Scrapes every ready role and renders one exposition with the host's own metrics."""

    def __init__(self, table: ProcessTable, run_dir: Path, timeout_s: float) -> None:
        self.table = table
        self.run_dir = run_dir
        self.timeout_s = timeout_s
        self.scrape_failures: Counter[str] = Counter()
        self.registry = CollectorRegistry()
        self.registry.register(HostCollector(table, self.scrape_failures))
        self._log_once = Throttle(30 * 1_000_000_000)  # a stuck role: one line per 30 s

    async def scrape(self) -> Scrape:
        # Only roles that run and published their port: one that is starting or in backoff is
        # shown by monotape_process_up, not counted as a failed scrape.
        names = [s.name for s in self.table.running() if s.ready]
        got = await scrape_all(self.run_dir, names, self.timeout_s)
        for name, why in got.failed.items():
            self.scrape_failures[name] += 1
            if self._log_once.allow(name, time.monotonic_ns()) is not None:
                log_event("scrape_failed", level="warning", process=HOST, role=name, error=why)
        return got

    def exposition(self, got: Scrape) -> bytes:
        texts = {HOST: generate_latest(self.registry).decode(), **got.texts}
        families, problems = merge(texts, honor=frozenset({HOST}))
        for problem in problems:
            if self._log_once.allow(problem, time.monotonic_ns()) is not None:
                log_event("metrics_merge_problem", level="warning", process=HOST, problem=problem)
        merged = MergedCollector()
        merged.families = families
        out = CollectorRegistry()
        out.register(merged)
        return generate_latest(out)


def build_host_admin_app(
    observer: Observer,
    verifier: TokenVerifier | None,
    about: Callable[[], dict[str, object]],
    hdr_dir: Path,
    universe: Sequence[Instrument] = (),
) -> Starlette:
    """``about()``: the host's own facts for /admin/processes (pid, ports, writers, stopping);
    ``hdr_dir``: where every process writes its histogram intervals (``<data-dir>/hdr``);
    ``universe``: the instrument dictionary /admin/symbols lists (``monotape symbols``)."""
    table = observer.table

    admin = admin_guard(lambda: verifier)  # the node's rule, from one place
    asker = RoleAsker(table, observer.run_dir, observer.timeout_s)
    host_drain = HostDrain()

    def states() -> dict[str, str]:
        return {s.name: s.state.value for s in table.slots.values()}

    async def healthz(request: Request) -> Response:
        down = [s.name for s in table.slots.values() if s.state is not SlotState.RUNNING]
        body = {"status": "ok" if not down else "degraded", "down": down, "processes": states()}
        return json_response(body, 200 if not down else 503)

    async def readyz(request: Request) -> Response:
        if host_drain.requested:  # out of rotation until POST /admin/resume, as the node
            return json_response({"status": await host_drain.status(asker)}, 503)
        ready = table.all_ready() and not table.stopping
        return json_response({"status": "ready" if ready else "starting"}, 200 if ready else 503)

    async def metrics(request: Request) -> Response:
        body = observer.exposition(await observer.scrape())
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def processes(request: Request) -> Response:
        got = await observer.scrape()
        now_ms = time.time_ns() // 1_000_000
        rows = []
        split: dict[str, int] = {}
        for s in table.slots.values():
            row: dict[str, object] = {
                "name": s.name,
                "role": s.role,
                "state": s.state.value,
                "pid": s.pid or None,
                "up_since_ms": s.up_since_ms if s.pid else None,
                "uptime_s": round((now_ms - s.up_since_ms) / 1e3, 1) if s.pid else None,
                "ready": s.ready,
                "restarts": s.restarts,
                "last_reason": s.last_reason or None,
                "metrics": s.name in got.texts,
            }
            if s.role == "writer":
                terminals = terminal_count(got.texts[s.name]) if s.name in got.texts else None
                row["terminals"] = terminals
                split[s.name] = terminals or 0
            rows.append(row)
        restarts = [
            {"role": role, "process": name, "reason": reason, "count": n}
            for (role, name, reason), n in sorted(table.restart_counts.items())
        ]
        return json_response(
            {"host": about(), "processes": rows, "terminals": split, "restarts": restarts}
        )

    async def openapi(request: Request) -> Response:
        return json_response(openapi_document(served, HOST_PARAMETERS))

    async def index(request: Request) -> Response:
        return json_response(admin_index(served, HOST_PARAMETERS))

    # Every process writes its intervals to the same directory (proc=<name>-<pid> in each
    # file's name): the node's own handler merges them, exact, across processes (off the loop).
    latency = latency_handlers(RoleView(SystemClock(), hdr_dir=hdr_dir).as_view())["/admin/latency"]
    views = host_views(observer, hdr_dir)
    handlers: dict[str, Handler] = {
        "/healthz": healthz,
        "/readyz": readyz,
        "/metrics": metrics,
        "/openapi.json": openapi,
        "/admin/": index,
        "/admin/latency": latency,
        "/admin/processes": processes,
        **host_desk_handlers(asker, universe, host_drain),
        **views.handlers(),  # admin_views.py: the timeline, dashboards, watchlist
    }
    served = host_endpoints(set(handlers))
    routes: list[BaseRoute] = [
        Route(path, admin(handlers[path]) if admin_only else handlers[path], methods=[method])
        for method, path, _, admin_only in served
    ]
    app = Starlette(routes=[*routes, *views.mounts()], exception_handlers=ROUTE_ERRORS)
    # The host's hooks: its stop ends the views' sampler, a writer that comes back while the
    # host is drained is told to drain (host.py).
    app.state.host_views = views
    app.state.host_drain = host_drain
    app.state.asker = asker
    return app
