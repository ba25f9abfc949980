"""The admin API's request parsing, JSON answers and token guard, shared by its route modules
and by the multi-process host's admin API (host/admin.py).

A bad query parameter is a ``BadParameter`` naming it; the admin guard turns it into a 400 with
``{"error": ..., "parameter": name}``. Every bound is explicit (STYLE 7): windows at most the
retention's 7 days, integers within the route's range and at most 20 digits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, cast

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from monotape.dashboards.web import Handler, json_response
from monotape.histograms import ALL_STAGES
from monotape.histograms.report import ReportArgumentError, parse_duration_ms
from monotape.platform.auth import AuthError, TokenVerifier, token_from_request, www_authenticate

__all__ = [
    "MAX_PATTERN_CHARS",
    "MAX_WINDOW_MS",
    "ROUTE_ERRORS",
    "BadParameter",
    "Handler",
    "admin_guard",
    "error_response",
    "int_param",
    "json_response",
    "pattern_param",
    "stage_param",
    "window_ms",
]

MAX_WINDOW_MS = 7 * 24 * 3600 * 1000  # retention's default: nothing older is on disk
# A symbol pattern (``XNAS:*``, ``AAPL``): keys are ~20 characters; a longer glob is a mistake,
# and on a host it would pass the role's query bound (telemetry.MAX_QUERY_BYTES) as a 400
# from the sequencer that the host could only report as "did not answer".
MAX_PATTERN_CHARS = 200


class BadParameter(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


def error_response(status: int, message: str, **extra: Any) -> Response:
    return json_response({"error": message, **extra}, status)


async def route_error(request: Request, exc: Exception) -> Response:
    """A path the admin server does not serve (404) or a method a route does not take (405),
    as JSON like every other answer of the admin API (Starlette's own is plain text), naming
    where the routes are listed; 405 keeps its ``Allow`` header."""
    http = cast(HTTPException, exc)  # a status code's handler: Starlette hands it its own
    answer = error_response(
        http.status_code,
        f"{http.detail.lower()}: {request.method} {request.url.path}",
        hint="GET /openapi.json (or /admin/ with an admin token) lists every route",
    )
    answer.headers.update(http.headers or {})
    return answer


# Starlette's exception_handlers for both admin servers (the node's and the host's)
ROUTE_ERRORS: Final = {404: route_error, 405: route_error}


def window_ms(request: Request, default: str) -> int:
    raw = request.query_params.get("window", default)
    try:
        ms = parse_duration_ms(raw, "window", positive=False)  # 0s: the range below says why
    except ReportArgumentError as exc:
        shown = raw if len(raw) <= 40 else raw[:40] + "…"
        raise BadParameter("window", f"{shown!r} is not a duration like 40s, 10m, 2h") from exc
    if not 0 < ms <= MAX_WINDOW_MS:
        raise BadParameter("window", f"must be between 1 ms and {MAX_WINDOW_MS // 3_600_000} h")
    return ms


def stage_param(request: Request) -> str:
    stage = request.query_params.get("stage")
    if stage is None:
        raise BadParameter("stage", f"required, one of {', '.join(ALL_STAGES)}")
    if stage not in ALL_STAGES:
        raise BadParameter("stage", f"{stage!r} is not one of {', '.join(ALL_STAGES)}")
    return stage


def int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
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


def pattern_param(request: Request) -> str:
    """The ``pattern`` query parameter (default: every key), at most ``MAX_PATTERN_CHARS``."""
    pattern = request.query_params.get("pattern", "")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise BadParameter("pattern", f"at most {MAX_PATTERN_CHARS} characters")
    return pattern


def admin_guard(verifier: Callable[[], TokenVerifier | None]) -> Callable[[Handler], Handler]:
    """Wraps an /admin handler: 401 without a valid token, 403 for a valid token without the
    admin claim, 400 naming a ``BadParameter``. ``verifier()`` is asked per request (a node's
    view may swap it); None means auth is off, and then every /admin route is 403."""

    def admin(handler: Handler) -> Handler:
        async def guarded(request: Request) -> Response:
            current = verifier()
            if current is None:
                # Fail closed: without auth there is no way to tell an operator from anyone
                # else on the network, and /admin can drain the node.
                return error_response(403, "forbidden: the admin API needs auth.enabled = true")
            try:
                # every (name, value) pair: two Authorization headers are refused, not
                # resolved by whichever copy a dict keeps
                claims = await current.verify(token_from_request(request.headers.items(), ""))
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
                return error_response(403, "forbidden: this token has no admin claim")
            try:
                return await handler(request)
            except BadParameter as exc:
                return error_response(400, str(exc), parameter=exc.name)

        return guarded

    return admin
