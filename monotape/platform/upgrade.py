"""The upgrade gate: every WebSocket upgrade passes here before a connection exists.

In order, each a fast refusal rather than a queue (DESIGN: Connections):
1. draining: 503 with a jittered Retry-After (the node is leaving the rotation);
2. overloaded: 503 while the event loop runs late (load shedding: the loop's lag is the truth
   about this core, the bucket's rate only a budget);
3. the token bucket: 503 with a Retry-After of 1-2x its refill time;
4. the JWT, verified off the event loop and cached by fingerprint: 401 with the reason.
Verified claims are handed to the connection's handler through ``claims_for``.
"""

from __future__ import annotations

import random
import weakref
from collections import Counter
from collections.abc import Callable
from http import HTTPStatus
from urllib.parse import urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request as HttpRequest
from websockets.http11 import Response as HttpResponse

from monotape.clock import Clock
from monotape.config import ServerConfig
from monotape.platform.admission import TokenBucket
from monotape.platform.auth import (
    AuthError,
    Claims,
    TokenVerifier,
    token_from_request,
    www_authenticate,
)

__all__ = ["UpgradeGate"]


class UpgradeGate:
    def __init__(
        self,
        cfg: ServerConfig,
        clock: Clock,
        *,
        verifier: TokenVerifier | None,
        draining: Callable[[], bool],
        overloaded: Callable[[], bool] | None = None,
    ) -> None:
        self.clock = clock
        self.verifier = verifier
        self.draining = draining
        self.overloaded = overloaded
        self.bucket = TokenBucket(cfg.admission_rate_per_s, cfg.admission_burst, clock.now_ns())
        # by reason; every series exists from the start so a rate() over them never starts blank
        self.rejected: Counter[str] = Counter({"rate": 0, "overloaded": 0, "draining": 0})
        # weak: a handshake that fails after the gate leaves nothing behind
        self._claims: weakref.WeakKeyDictionary[ServerConnection, Claims] = (
            weakref.WeakKeyDictionary()
        )

    def _unavailable(
        self, ws: ServerConnection, reason: str, body: str, retry_s: int
    ) -> HttpResponse:
        self.rejected[reason] += 1
        response = ws.respond(HTTPStatus.SERVICE_UNAVAILABLE, body)
        response.headers["Retry-After"] = str(retry_s)
        return response

    @staticmethod
    def _unauthorized(ws: ServerConnection, reason: str) -> HttpResponse:
        response = ws.respond(HTTPStatus.UNAUTHORIZED, f"unauthorized: {reason}\n")
        response.headers["WWW-Authenticate"] = www_authenticate(reason)
        return response

    async def __call__(self, ws: ServerConnection, request: HttpRequest) -> HttpResponse | None:
        """websockets' process_request: a response refuses the upgrade, None lets it through."""
        if self.draining():
            body = "draining: reconnect elsewhere\n"
            return self._unavailable(ws, "draining", body, random.randint(1, 5))
        if self.overloaded is not None and self.overloaded():
            # Cheap to refuse here (no hello, no snapshot); admitting would make every terminal
            # already connected late too, and the queued ones would time out anyway.
            body = "overloaded: retry\n"
            return self._unavailable(ws, "overloaded", body, self.bucket.retry_after_s())
        if not self.bucket.take(self.clock.now_ns()):
            body = "too many connections: retry\n"
            return self._unavailable(ws, "rate", body, self.bucket.retry_after_s())
        if self.verifier is None:
            return None
        token = token_from_request(dict(request.headers.raw_items()), urlsplit(request.path).query)
        try:
            claims = await self.verifier.verify(token)
        except AuthError as exc:
            return self._unauthorized(ws, exc.reason)
        if claims.expires_in(self.clock.wall_ns() / 1e9) <= 0:
            # Inside the verifier's leeway but already past exp: a session would be closed at
            # once and the terminal would loop. Refuse it like any expired token.
            return self._unauthorized(ws, "expired")
        self._claims[ws] = claims
        return None

    def claims_for(self, ws: ServerConnection) -> Claims | None:
        return self._claims.pop(ws, None)
