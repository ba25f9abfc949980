"""The admin API (Starlette). This issue serves the unauthenticated operational endpoints;
the /admin/* routes arrive with the observability issue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from monotape.platform.node import Node

__all__ = ["build_admin_app"]


def build_admin_app(node: Node) -> Starlette:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if not node.ready:
            return JSONResponse({"status": "starting"}, status_code=503)
        up = sum(1 for h in node.handlers if h.up)
        return JSONResponse(
            {
                "status": "ready",
                "connections": len(node.server.connections),
                "feed_handlers_up": up,
                "instruments": len(node.universe),
            }
        )

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(node.registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
        ]
    )
