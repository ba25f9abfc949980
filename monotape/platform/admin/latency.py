"""Admin routes of the latency picture: merged HDR percentiles, the per-interval timeline with
GC pauses overlaid, the SVG plot, and the GC monitor itself.

Everything that reads the interval logs runs in a worker thread, never on the event loop the
fan-out shares.
"""

from __future__ import annotations

import gc
import time

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from monotape.histograms import query
from monotape.histograms.plot import render_latency_svg
from monotape.histograms.timeline import timeline_rows, timeline_with_gc
from monotape.platform.admin.params import (
    Handler,
    int_param,
    json_response,
    stage_param,
    window_ms,
)
from monotape.platform.admin.view import AdminView

__all__ = ["latency_handlers"]


def latency_handlers(view: AdminView) -> dict[str, Handler]:
    """The handlers by path: /admin/latency, /admin/latency/timeline, /admin/plots/latency.svg,
    /admin/gc, /admin/gc/collect."""

    async def latency(request: Request) -> Response:
        stage = stage_param(request)
        window = window_ms(request, "1m")
        now_ms = int(time.time() * 1000)
        result = await run_in_threadpool(query, view.hdr_dir, stage, now_ms - window, now_ms)
        body = msgspec.to_builtins(result)
        if stage == "glass":
            body["note"] = (
                "RTT/2 of timed pings to a sampled cohort: an upper bound, not a one-way truth"
            )
        return json_response(body)

    def _window(request: Request) -> tuple[int, int]:
        window = window_ms(request, "10m")
        end_ms = view.clock.wall_ns() // 1_000_000
        return end_ms - window, end_ms

    async def latency_timeline(request: Request) -> Response:
        start_ms, end_ms = _window(request)
        rows = await run_in_threadpool(
            timeline_with_gc, view.hdr_dir, start_ms, end_ms, view.gc_monitor
        )
        return json_response(
            {"window_start_ms": start_ms, "window_end_ms": end_ms, "intervals": rows}
        )

    async def latency_svg(request: Request) -> Response:
        start_ms, end_ms = _window(request)
        # Every generation is a candidate: a long young pause matters too; the plot draws only
        # gen 2 and pauses over its threshold (128 short gen-1 bands a minute read as a barcode).
        min_gen = int_param(request, "gen", 0, 0, 2)
        rows = await run_in_threadpool(timeline_rows, view.hdr_dir, start_ms, end_ms)
        pauses = view.gc_monitor.pauses_between(start_ms, end_ms, min_generation=min_gen)
        svg = render_latency_svg(rows, pauses, title="p99 per stage, GC pauses that matter")
        return Response(svg, media_type="image/svg+xml")

    async def gc_view(request: Request) -> Response:
        recent = int_param(request, "recent", 100, 0, 10_000)
        return json_response(
            {"gc": view.gc_monitor.snapshot(recent=recent), "loop_lag": view.loop_lag.snapshot()}
        )

    async def gc_collect(request: Request) -> Response:
        # An operator's lever, and how the tests provoke a gen-2 collection: the pause it causes
        # is recorded by the monitor like any other.
        before = len(view.gc_monitor.pauses())
        collected = gc.collect(2)
        pauses = view.gc_monitor.pauses()[before:]
        return json_response(
            {"collected": collected, "pauses": [p.overlay() for p in pauses if p.generation == 2]}
        )

    return {
        "/admin/latency": latency,
        "/admin/latency/timeline": latency_timeline,
        "/admin/plots/latency.svg": latency_svg,
        "/admin/gc": gc_view,
        "/admin/gc/collect": gc_collect,
    }
