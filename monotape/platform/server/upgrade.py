"""The upgrade gate: every WebSocket upgrade passes here before a connection exists.

In order, cheapest refusal first, each a fast answer rather than a queue:
1. draining: 503 with a jittered Retry-After (the node is leaving the rotation);
2. the source address (an IPv6 one by its /64) has failed too many upgrades: 429 with
   Retry-After, unless the token is one already verified and cached (valid, not expired): that
   costs no work, so the terminals behind a NAT or balancer whose address a flood exhausted
   keep reconnecting; everything else from that address (fresh, forged, no token) gets the 429;
3. the token's shape: missing, duplicate ``Authorization``, oversized or not three base64url
   parts: 401 with the reason at once (a failure of that address);
4. overloaded: 503 while the event loop runs late (load shedding: the loop's lag is the truth
   about this core, the bucket's rate only a budget);
5. the JWT, verified off the event loop and cached by fingerprint: 401 with the reason (a
   failure of that address);
6. the token bucket, charged only now, for a verified terminal: 503 with a Retry-After of 1-2x
   its refill time. A flood of tokenless or forged upgrades therefore never spends the budget
   meant for terminals (measured before: ~2,190 tokenless upgrades/s, 35% of real connects 503).
Verified claims are handed to the connection's handler through ``claims_for``.

A browser cannot read the HTTP status of a refused upgrade (it sees close 1006). An upgrade that
offers the ``monotape.v2`` subprotocol and would be refused is therefore accepted and refused
in-band (docs/wire.md, Browsers): ``refusal_for`` hands the handler the close to send (1013 with
the Retry-After as the hint for 503 and 429, 1008 and 30 s for 401), and ``refuse_in_band`` sends
it: no hello, no session. Every refusal is counted where the HTTP one is, with the same labels.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Final
from urllib.parse import urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request as HttpRequest
from websockets.http11 import Response as HttpResponse
from websockets.typing import Subprotocol

from monotape.clock import Clock
from monotape.config import ServerConfig
from monotape.platform.auth import (
    AuthError,
    Claims,
    TokenVerifier,
    token_from_request,
    www_authenticate,
)
from monotape.platform.auth.verifier import Prechecked
from monotape.platform.core.admission import FailedUpgrades, TokenBucket, source_key
from monotape.platform.core.disconnect import InBandRefusal, in_band_refusal
from monotape.platform.server.control import close_reason_with_hint
from monotape.platform.wire import codec

__all__ = ["SUBPROTOCOL", "UpgradeGate", "refuse_in_band", "select_subprotocol"]

SUBPROTOCOL: Final = Subprotocol("monotape.v2")  # what a browser offers, beside bearer.<jwt>
REFUSAL_CLOSE_S: Final = 2.0  # a browser that does not answer the close frame: abort


def select_subprotocol(ws: ServerConnection, offered: Sequence[Subprotocol]) -> Subprotocol | None:
    """``monotape.v2`` when offered, never the ``bearer.`` entry (the token is not echoed);
    no subprotocol for a client that offers none (programs, the SDKs)."""
    return SUBPROTOCOL if SUBPROTOCOL in offered else None


def _offers_v2(request: HttpRequest) -> bool:
    for value in request.headers.get_all("Sec-WebSocket-Protocol"):
        if SUBPROTOCOL in (entry.strip() for entry in value.split(",")):
            return True
    return False


async def refuse_in_band(ws: ServerConnection, refusal: InBandRefusal) -> None:
    """The wire's CLOSE message, then the close frame with the hint at the end of its reason."""
    code, hint = int(refusal.code), refusal.reconnect_after_ms
    with contextlib.suppress(ConnectionClosed, OSError, RuntimeError):
        await ws.send(codec.encode_close(code, hint, refusal.text))
    try:
        await asyncio.wait_for(
            ws.close(code, close_reason_with_hint(refusal.text, hint)), REFUSAL_CLOSE_S
        )
    except (TimeoutError, ConnectionClosed, OSError):
        ws.transport.abort()


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
        self.failures = FailedUpgrades(
            cfg.failed_upgrades_burst, cfg.failed_upgrades_per_s, cfg.failed_upgrades_addresses
        )
        # by reason; every series exists from the start so a rate() over them never starts blank
        self.rejected: Counter[str] = Counter({"rate": 0, "overloaded": 0, "draining": 0})
        # weak: a handshake that fails after the gate leaves nothing behind
        self._claims: weakref.WeakKeyDictionary[ServerConnection, Claims] = (
            weakref.WeakKeyDictionary()
        )
        self._refusals: weakref.WeakKeyDictionary[ServerConnection, InBandRefusal] = (
            weakref.WeakKeyDictionary()
        )
        self._in_band: weakref.WeakSet[ServerConnection] = weakref.WeakSet()  # offered v2

    def _refuse(
        self, ws: ServerConnection, status: HTTPStatus, body: str, retry_s: int | None
    ) -> HttpResponse | None:
        """The HTTP refusal, or, for a client that offered ``monotape.v2`` (``_in_band``), None
        (the upgrade goes through) with the close its handler sends instead."""
        if ws in self._in_band:
            self._refusals[ws] = in_band_refusal(int(status), retry_s, body.strip())
            return None
        response = ws.respond(status, body)
        if retry_s is not None:
            response.headers["Retry-After"] = str(retry_s)
        return response

    def _unavailable(
        self, ws: ServerConnection, reason: str, body: str, retry_s: int
    ) -> HttpResponse | None:
        self.rejected[reason] += 1
        return self._refuse(ws, HTTPStatus.SERVICE_UNAVAILABLE, body, retry_s)

    def _unauthorized(self, ws: ServerConnection, address: str, reason: str) -> HttpResponse | None:
        self.failures.failed(address, self.clock.now_ns())
        response = self._refuse(ws, HTTPStatus.UNAUTHORIZED, f"unauthorized: {reason}\n", None)
        if response is not None:
            response.headers["WWW-Authenticate"] = www_authenticate(reason)
        return response

    async def __call__(self, ws: ServerConnection, request: HttpRequest) -> HttpResponse | None:
        """websockets' process_request: a response refuses the upgrade, None lets it through
        (then ``refusal_for`` says whether it is refused in-band)."""
        if _offers_v2(request):
            self._in_band.add(ws)
        if self.draining():
            body = "draining: reconnect elsewhere\n"
            return self._unavailable(ws, "draining", body, random.randint(1, 5))
        verifier = self.verifier
        address = _source_address(ws)
        checked: Prechecked | None = None
        claims: Claims | None = None
        if verifier is not None:
            now = self.clock.now_ns()
            if self.failures.exhausted(address, now):
                # The cap guards work; a cached token is none. Asked only of an exhausted
                # address, so the usual upgrade pays for its token's shape and hash once.
                claims = self._cached(verifier, request)
                if claims is None and not self.failures.allowed(address, now):  # counts it
                    return self._refuse(
                        ws,
                        HTTPStatus.TOO_MANY_REQUESTS,
                        "too many failed upgrades from this address\n",
                        self.failures.retry_after_s(address, now),
                    )
            if claims is None:
                try:
                    token = token_from_request(
                        request.headers.raw_items(), urlsplit(request.path).query
                    )
                    checked = verifier.precheck(token)  # verify() reuses its fingerprint
                except AuthError as exc:
                    if exc.reason == "duplicate Authorization":
                        verifier.refused[exc.reason] += 1  # precheck counts the others
                    return self._unauthorized(ws, address, exc.reason)
        if self.overloaded is not None and self.overloaded():
            # Cheap to refuse here (no hello, no snapshot); admitting would make every terminal
            # already connected late too, and the queued ones would time out anyway.
            body = "overloaded: retry\n"
            return self._unavailable(ws, "overloaded", body, self.bucket.retry_after_s())
        if verifier is not None:
            if claims is None:
                try:
                    claims = await verifier.verify(checked)
                except AuthError as exc:
                    return self._unauthorized(ws, address, exc.reason)
            if claims.expires_in(self.clock.wall_ns() / 1e9) <= 0:
                # Inside the verifier's leeway but already past exp: a session would be closed
                # at once and the terminal would loop. Refuse it like any expired token.
                return self._unauthorized(ws, address, "expired")
            self._claims[ws] = claims
        if not self.bucket.take(self.clock.now_ns()):
            self._claims.pop(ws, None)
            body = "too many connections: retry\n"
            return self._unavailable(ws, "rate", body, self.bucket.retry_after_s())
        return None

    def claims_for(self, ws: ServerConnection) -> Claims | None:
        return self._claims.pop(ws, None)

    def refusal_for(self, ws: ServerConnection) -> InBandRefusal | None:
        """The in-band refusal of an upgrade the gate let through only to refuse it."""
        self._in_band.discard(ws)
        return self._refusals.pop(ws, None)

    def _cached(self, verifier: TokenVerifier, request: HttpRequest) -> Claims | None:
        """The request token's cached claims if they are still good now, else None."""
        try:
            token = token_from_request(request.headers.raw_items(), urlsplit(request.path).query)
        except AuthError:  # two Authorization headers: not a terminal we know
            return None
        claims = verifier.cached(token)
        if claims is None or claims.expires_in(self.clock.wall_ns() / 1e9) <= 0:
            return None
        return claims


def _source_address(ws: ServerConnection) -> str:
    """What the failed-upgrade cap counts the TCP peer as (``source_key``: IPv6 by its /64).
    Behind an L4 balancer this is the balancer's address, not the terminal's: monotape does
    not read the PROXY protocol (docs/auth.md)."""
    remote = ws.remote_address
    return source_key(str(remote[0])) if remote else "?"
