"""The host's views (issue 12, "observed as one"): the latency timeline with every process's
GC pauses, the embedded dashboards, and the watchlist page, as the one-process node serves them.

- ``GET /admin/latency/timeline?window=``: the node's per-interval percentiles, merged over the
  interval logs of every process (one ``<data-dir>/hdr``), with each slot's GC pauses named by
  the process that paused (``"process": "writer-0"``). Pauses come from each role over its
  loopback state port (telemetry.py): ``GET /state/gc_pauses`` (``gc_pauses_state`` below,
  exact over the window), which every role with a GC monitor registers (host/state.py: the
  writers, the sequencer, the feed handlers). A role that does not answer, or answers what is
  not a list of pauses, is named in ``"missing"``, never a 500.
- ``/dashboards``: the node's page and panels (dashboards/web.py), over a ``SampleRing`` the
  host fills once a second from the same scrape as its merged ``/metrics`` (a ``process`` label
  on every series: the panels sum over it as Prometheus would), with the GC pauses that matter
  from every role drawn over them.
- ``/watchlist``: the node's page, config and dev sign-in (admin/watchlist.py), the terminals'
  port being the one every writer shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec
from prometheus_client import CollectorRegistry, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from monotape.config import Config
from monotape.dashboards.panels import DASHBOARDS, sampled_names
from monotape.dashboards.sampler import SAMPLE_PERIOD_S, SampleRing
from monotape.dashboards.view import WINDOWS
from monotape.dashboards.web import dashboard_handlers, static_mount
from monotape.histograms.gc import GcMonitor, GcPause
from monotape.histograms.plot import PAUSE_THRESHOLD_MS, render_latency_svg
from monotape.histograms.timeline import overlay, timeline_rows
from monotape.log import log_event
from monotape.platform.admin.params import Handler, int_param, json_response, window_ms
from monotape.platform.admin.watchlist import (
    watchlist_handlers,
    watchlist_mounts,
    watchlist_site,
)
from monotape.platform.host.admin_routes import GC_ROLES, RoleAsker
from monotape.platform.host.aggregate import Scrape, merge
from monotape.platform.host.spec import RoleSpec, load_config
from monotape.platform.host.supervisor import ProcessTable


class Observer(Protocol):
    """What the views need of admin.py's ``Observer`` (a Protocol: admin.py imports this
    module, so importing it back would be a circle)."""

    table: ProcessTable
    run_dir: Path
    timeout_s: float
    registry: CollectorRegistry

    async def scrape(self) -> Scrape: ...


__all__ = [
    "HOST_MIN_SERIES",
    "MAX_PAUSES",
    "HostViews",
    "ProcessPauses",
    "fetch_pauses",
    "gc_pauses_state",
    "host_max_series",
    "host_views",
    "keep_sampled",
    "pauses_in",
    "timeline_by_process",
]

# A role answers at most this many pauses for one window (gens 1-2 first, then the longest
# gen-0 ones); what it leaves out it counts. Gen 0 runs up to ~1,000 times a second under load
# (histograms/gc.py): a 10-minute window can hold 600k of them, the overlay wants the few that
# matter. ~80 bytes of JSON each: 5,000 is ~400 KB per role.
MAX_PAUSES = 5_000
# The host's ring holds every process's series (a `process` label each): a host with 2 writers
# fills 763 (measured; the one-process node 262), each writer ~130 of them and the rest (12
# feed handlers, the sequencer, the venue, the host) ~500. The cap leaves room for 160 a writer
# over 512 and never goes under 1,536: 16 writers (the most `--writers auto` gives) 3,072, ~88 MB
# at the worst (3,600 rows x 8 B a series), numpy columns the collector never walks.
HOST_MIN_SERIES = 1_536


def host_max_series(writers: int) -> int:
    """The dashboard ring's series cap for a host of ``writers`` writer processes."""
    return max(HOST_MIN_SERIES, 512 + 160 * writers)


_HOST = "host"


# -- the role's side ---------------------------------------------------------------------------
def _int(params: Mapping[str, str], name: str, default: int) -> int:
    raw = params.get(name, "")
    if not raw:
        return default
    if len(raw) > 20 or not raw.lstrip("-").isdigit():
        raise ValueError(f"{name}: {raw[:24]!r} is not a whole number")
    return int(raw)


def pauses_in(
    pauses: Sequence[GcPause], min_generation: int = 0, cap: int = MAX_PAUSES
) -> tuple[list[GcPause], int]:
    """At most ``cap`` of ``pauses`` of ``min_generation`` or older, oldest first: the older
    generations first, the longest first within one; and how many were left out (pure)."""
    kept = [p for p in pauses if p.generation >= min_generation]
    if len(kept) <= cap:
        return sorted(kept, key=_start), 0
    chosen = sorted(kept, key=lambda p: (-p.generation, -p.duration_ns))[:cap]
    return sorted(chosen, key=_start), len(kept) - len(chosen)


def gc_pauses_state(
    monitor: GcMonitor | None,
) -> Callable[[Mapping[str, str]], Awaitable[tuple[int, bytes]]]:
    """A role's ``/state/gc_pauses?start_ms=&end_ms=&min_generation=`` (telemetry.Provider,
    registered in host/state.py): its pauses that started in [start_ms, end_ms), bounded by
    ``MAX_PAUSES``; 404 from a role without a GC monitor."""

    async def provider(params: Mapping[str, str]) -> tuple[int, bytes]:
        if monitor is None:
            return 404, msgspec.json.encode({"error": "no GC monitor in this process"})
        try:
            start = _int(params, "start_ms", 0)
            end = _int(params, "end_ms", 2**62)
            gen = _int(params, "min_generation", 0)
        except ValueError as exc:
            return 400, msgspec.json.encode({"error": str(exc)})
        kept, left_out = pauses_in(monitor.pauses_between(start, end), gen)
        body = {"pauses": kept, "left_out": left_out, "dropped": monitor.dropped}
        return 200, msgspec.json.encode(body)

    return provider


# -- the host's side ---------------------------------------------------------------------------
class _Pauses(msgspec.Struct):
    pauses: list[GcPause]
    left_out: int = 0


@dataclass
class ProcessPauses:
    """GC pauses of a window by process (those with a GC monitor); ``missing``: roles that
    did not answer; ``left_out``: pauses a role held back (over ``MAX_PAUSES``)."""

    by_process: dict[str, list[GcPause]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)


async def fetch_pauses(
    asker: RoleAsker, start_ms: int, end_ms: int, *, min_generation: int = 0
) -> ProcessPauses:
    """The pauses in [start_ms, end_ms) of every process with a GC monitor (``GC_ROLES``), at
    once, each within the host's scrape timeout (admin_routes.RoleAsker)."""
    names = asker.names(GC_ROLES)
    params = {"start_ms": start_ms, "end_ms": end_ms, "min_generation": min_generation}
    got = await asker.ask(names, "state", "gc_pauses", params)
    out = ProcessPauses()
    why = dict(got.why)
    for name, body in got.bodies.items():
        try:
            pauses = msgspec.convert(body, type=_Pauses)
        except msgspec.ValidationError as exc:  # a role's bug: named, never a 500
            why[name] = f"gc_pauses: {str(exc)[:160]}"
            continue
        out.by_process[name] = pauses.pauses
        if pauses.left_out:
            out.left_out[name] = pauses.left_out
    out.missing = sorted(why)
    return out


def timeline_by_process(
    rows: Mapping[str, Any], got: ProcessPauses, *, step_ms: int = 10_000
) -> list[dict[str, Any]]:
    """The node's timeline slots (histograms/timeline.overlay), each pause named by its
    process (pure)."""
    tagged = sorted(
        ((p, name) for name, ps in got.by_process.items() for p in ps),
        key=lambda pn: (pn[0].start_ms, pn[1]),
    )
    slots = overlay(dict(rows), [p for p, _ in tagged], step_ms=step_ms)
    # overlay appends each slot's pauses in the order given: name them in the same order
    names = iter(name for _, name in tagged)
    for slot in slots:
        for pause in slot["gc_pauses"]:
            pause["process"] = next(names)
    return slots


# -- the dashboards' ring ------------------------------------------------------------------------
def keep_sampled(text: str, names: Collection[str]) -> str:
    """Only the exposition lines the dashboards read (and the comments that type them): the
    text parser costs per sample line, and a writer's exposition is mostly other series."""
    kept = []
    for line in text.splitlines():
        if line.startswith("#"):
            kept.append(line)
            continue
        end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=len(line))
        if line[:end] in names:
            kept.append(line)
    return "\n".join(kept) + "\n"


_request_pauses: contextvars.ContextVar[list[GcPause]] = contextvars.ContextVar("host_pauses")


class HostViews:
    """The routes, the host's dashboard ring and its sampler task (started by ``start``: with
    the admin app's loop, ended by the host's stop)."""

    def __init__(
        self,
        observer: Observer,
        hdr_dir: Path,
        cfg: Config | None,
    ) -> None:
        self.observer = observer
        self.asker = RoleAsker(observer.table, observer.run_dir, observer.timeout_s)
        self.hdr_dir = hdr_dir
        self.names = frozenset(sampled_names())
        writers = cfg.host.writer_count if cfg is not None else 0
        self.ring = SampleRing(self.names, max_series=host_max_series(writers))
        self.samples = 0
        self._task: asyncio.Task[None] | None = None
        # The host wrote the reserved port into the roles' config: every writer binds it.
        port = cfg.server.ws_port if cfg is not None else 0
        self._site = watchlist_site(cfg, lambda: port) if cfg is not None else None

    # -- sampling ------------------------------------------------------------------------------
    async def sample_once(self) -> None:
        """One row of the ring from one scrape of every ready role (the /metrics scrape)."""
        got = await self.observer.scrape()
        texts = {_HOST: generate_latest(self.observer.registry).decode()}
        texts.update({n: keep_sampled(t, self.names) for n, t in got.texts.items()})
        families, _problems = merge(texts, honor=frozenset({_HOST}))  # /metrics logs them
        self.ring.record(
            time.time(), ((s.name, s.labels, s.value) for f in families for s in f.samples)
        )
        self.samples += 1

    async def run_sampler(self, period_s: float = SAMPLE_PERIOD_S) -> None:
        failures = 0
        while not self.observer.table.stopping:
            t0 = time.monotonic()
            try:
                await self.sample_once()
            except Exception as exc:  # the dashboards must never take the host down
                failures += 1
                if failures == 1 or failures % 600 == 0:
                    log_event("dashboard_sample_failed", process=_HOST, failures=failures,
                              error=repr(exc))  # fmt: skip
            await asyncio.sleep(max(0.0, period_s - (time.monotonic() - t0)))

    def start(self) -> None:
        """Start sampling on the running loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self.run_sampler(), name="host.dashboards.sampler"
            )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- GC pauses -----------------------------------------------------------------------------
    async def pauses(self, start_ms: int, end_ms: int, min_generation: int = 0) -> ProcessPauses:
        return await fetch_pauses(self.asker, start_ms, end_ms, min_generation=min_generation)

    # -- routes --------------------------------------------------------------------------------
    def handlers(self) -> dict[str, Handler]:
        """By path, unguarded: host/admin.py routes them from the node's ENDPOINTS rows, which
        say which need the admin token (all but the two pages and the watchlist's own)."""

        def span(request: Request) -> tuple[int, int]:
            end_ms = time.time_ns() // 1_000_000
            return end_ms - window_ms(request, "10m"), end_ms

        async def timeline(request: Request) -> Response:
            start_ms, end_ms = span(request)
            rows_job = run_in_threadpool(timeline_rows, self.hdr_dir, start_ms, end_ms)
            rows, got = await asyncio.gather(rows_job, self.pauses(start_ms, end_ms))
            body: dict[str, Any] = {
                "window_start_ms": start_ms,
                "window_end_ms": end_ms,
                "intervals": timeline_by_process(rows, got),
                "processes": sorted(got.by_process),
                "missing": got.missing,
            }
            if got.left_out:
                body["pauses_left_out"] = got.left_out
            return json_response(body)

        async def latency_svg(request: Request) -> Response:
            start_ms, end_ms = span(request)
            min_gen = int_param(request, "gen", 0, 0, 2)
            rows_job = run_in_threadpool(timeline_rows, self.hdr_dir, start_ms, end_ms)
            rows, got = await asyncio.gather(
                rows_job, self.pauses(start_ms, end_ms, min_generation=min_gen)
            )
            pauses = sorted((p for ps in got.by_process.values() for p in ps), key=_start)
            svg = render_latency_svg(rows, pauses, title="p99 per stage, GC pauses that matter")
            return Response(svg, media_type="image/svg+xml")

        board = dashboard_handlers(
            self.ring, lambda: time.time_ns() // 1_000_000, self._pauses_of_request
        )
        data = board["/admin/dashboards/{uid}"]
        uids = frozenset(d.uid for d in DASHBOARDS)

        async def dashboard(request: Request) -> Response:
            # The node hands its own monitor; here the roles are asked first (over loopback,
            # every generation, as the node's overlay draws gen 2 and any pause over its
            # threshold; a role answers at most MAX_PAUSES, older generations and longer
            # pauses first) and the page's handler reads them from this request.
            window_s = WINDOWS.get(request.query_params.get("window", "5m"), 0)
            held: list[GcPause] = []
            # An unknown uid or a bad window: the page's handler answers the 404/400 without a
            # round to every role.
            if window_s and request.path_params.get("uid") in uids:
                end_ms = time.time_ns() // 1_000_000
                start_ms = end_ms - window_s * 1000 - 1000
                got = await self.pauses(start_ms, end_ms + 1, min_generation=0)
                held = [p for ps in got.by_process.values() for p in ps]
            _request_pauses.set(held)
            return await data(request)

        out: dict[str, Handler] = {
            "/admin/latency/timeline": timeline,
            "/admin/plots/latency.svg": latency_svg,
            **board,
            "/admin/dashboards/{uid}": dashboard,
        }
        if self._site is not None:
            out.update(watchlist_handlers(self._site))
        return out

    def mounts(self) -> list[BaseRoute]:
        """The pages' scripts, uPlot and the JS SDK: static, no data, no token."""
        routes: list[BaseRoute] = [static_mount()]
        if self._site is not None:
            routes.extend(watchlist_mounts())
        return routes

    @staticmethod
    def _pauses_of_request(start_ms: int, end_ms: int) -> list[GcPause]:
        pauses = _request_pauses.get([])
        return sorted(
            (p for p in pauses if start_ms <= p.start_ms < end_ms and _matters(p)), key=_start
        )


def _start(p: GcPause) -> int:
    return p.start_ms


def _matters(p: GcPause) -> bool:
    return p.generation >= 2 or p.duration_ns > PAUSE_THRESHOLD_MS * 1e6


def host_views(observer: Observer, hdr_dir: Path) -> HostViews:
    """The views of the host whose run dir ``observer`` reads. The config is the one the host
    wrote for its roles (``run_dir/config.json``, spec.py); without it (a unit test's bare
    table) the watchlist is left out and nothing samples."""
    cfg: Config | None = None
    spec = RoleSpec(role="host", run_dir=str(observer.run_dir))
    if spec.config_path.is_file():
        cfg = load_config(spec)
    views = HostViews(observer, hdr_dir, cfg)
    if cfg is not None:
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to sample on
            views.start()
    return views
