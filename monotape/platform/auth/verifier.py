"""JWT verification for the WebSocket upgrade: off the event loop, memoized until expiry.

The seed verified every upgrade on the event loop and re-parsed the PEM key per call (~0.9 ms
each), so the reconnect storm at the open (thousands of terminals inside 1-2 s, design:
workload) stalled every other connection. Here:

- the key objects are built once, before the first upgrade (``keys.KeySet``);
- a full verification runs in a small dedicated thread pool (cryptography releases the GIL in
  the signature check), so the loop only hashes the token and looks it up;
- verified claims are memoized by sha256(token) (never the token) until ``exp`` + leeway, in a
  bounded LRU whose evictions are counted (STYLE habit 7);
- concurrent cold verifications of the same token share one signature check.

Every refusal is an ``AuthError`` (``tokens.py``) whose ``reason`` is one of ``REASONS``: short,
safe to send back in a 401 and to count in a label. No token ever reaches a log line or an
exception message.

Threading contract: the cache, the in-flight map and the counters are owned by the event-loop
thread (``verify``) or by one caller thread (``verify_sync``); the pool threads only run
``_decode``, a pure function of the token bytes and the clock.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from typing import Any

import jwt

from monotape.clock import Clock, SystemClock
from monotape.platform.auth.keys import KeySet

# The values and pure checks live in tokens.py; re-exported here, where callers have found them.
from monotape.platform.auth.tokens import (
    COMPACT_JWS,
    REASONS,
    AuthError,
    Claims,
    Prechecked,
    is_admin,
    numeric_date,
    read_header,
    reason_for,
    token_from_request,
    www_authenticate,
)

__all__ = [
    "REASONS",
    "AuthError",
    "Claims",
    "Prechecked",
    "TokenVerifier",
    "token_from_request",
    "www_authenticate",
]


class TokenVerifier:
    """Verifies upgrade tokens against one configured asymmetric algorithm and key set."""

    def __init__(
        self,
        keys: KeySet,
        *,
        audience: str = "monotape",
        issuer: str = "monotape-dev",
        leeway_s: float = 5.0,
        cache_size: int = 100_000,
        max_token_bytes: int = 8192,
        verify_threads: int = 2,
        clock: Clock | None = None,
        executor: Executor | None = None,
    ) -> None:
        if cache_size < 0 or max_token_bytes <= 0 or verify_threads <= 0 or leeway_s < 0:
            raise ValueError("need cache_size >= 0, max_token_bytes > 0, threads > 0, leeway >= 0")
        self.keys = keys
        self.algorithm = keys.algorithm
        self.audience = audience
        self.issuer = issuer
        self.leeway_s = leeway_s
        self.cache_size = cache_size
        self.max_token_bytes = max_token_bytes
        self._clock: Clock = clock or SystemClock()
        self._own_executor = executor is None
        self._executor: Executor = executor or ThreadPoolExecutor(
            max_workers=verify_threads, thread_name_prefix="monotape-auth"
        )
        self._cache: OrderedDict[bytes, Claims] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[tuple[Claims, float]]] = {}
        # Counters (plain ints; the lead's collector exports them at scrape time).
        self.cache_hits = 0
        self.cache_misses = 0
        self.evictions = 0
        self.coalesced = 0  # cold verifications that joined one already in flight
        self.refused: Counter[str] = Counter()
        self.verify_seconds_total = 0.0  # wall time spent in full verifications (pool threads)

    # -- the public surface ----------------------------------------------------------------
    def precheck(self, token: str | None) -> Prechecked:
        """Refuse a missing, oversized or malformed token on the spot (``AuthError``, counted):
        what needs no key, no thread and no cache, so a flood of such upgrades costs nothing
        else (the server checks this before it charges any admission budget). Pass the result
        to ``verify``, which then does not repeat these checks."""
        try:
            return self._admit(token)
        except AuthError as exc:
            self.refused[exc.reason] += 1
            raise

    def cached(self, token: str | None) -> Claims | None:
        """The claims of ``token`` if it verified before and is not past ``exp`` + leeway; else
        None, whatever the reason (nothing refused is counted, no thread is used). The gate asks
        this of an address that is over its failure allowance: a cached token costs no work."""
        try:
            return self._lookup(self._admit(token).fingerprint)
        except AuthError:
            return None

    async def verify(self, token: str | Prechecked | None) -> Claims:
        """Claims for ``token`` or ``AuthError``; a full verification runs in the pool."""
        try:
            checked = token if isinstance(token, Prechecked) else self._admit(token)
            fp = checked.fingerprint
            claims = self._lookup(fp)
            if claims is not None:
                return claims
            fut = self._inflight.get(fp)
            if fut is None:
                self.cache_misses += 1
                loop = asyncio.get_running_loop()
                fut = loop.run_in_executor(self._executor, self._decode, checked.token)
                self._inflight[fp] = fut
                fut.add_done_callback(partial(self._settle, fp))
            else:
                self.coalesced += 1
            # shield: one cancelled upgrade must not cancel the check others are waiting on.
            result, _ = await asyncio.shield(fut)
            return result
        except AuthError as exc:
            self.refused[exc.reason] += 1
            raise

    def verify_sync(self, token: str | None) -> Claims:
        """The same decision on the calling thread (tests, benchmarks, the CLI); not on the loop."""
        try:
            checked = self._admit(token)
            fp = checked.fingerprint
            claims = self._lookup(fp)
            if claims is not None:
                return claims
            self.cache_misses += 1
            claims, seconds = self._decode(checked.token)
            self.verify_seconds_total += seconds
            self._store(fp, claims)
            return claims
        except AuthError as exc:
            self.refused[exc.reason] += 1
            raise

    @property
    def cache_entries(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        """Stop the pool (idempotent); verifications in flight are cancelled."""
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- on the loop: cheap checks, the cache ------------------------------------------------
    def _admit(self, token: str | None) -> Prechecked:
        """Refuse what needs no parsing; return the token with its fingerprint (sha256)."""
        if not token:
            raise AuthError("missing token")
        if len(token) > self.max_token_bytes:  # before encoding: a 10 MB header costs nothing
            raise AuthError("token too large")
        if COMPACT_JWS.fullmatch(token) is None:  # base64url and two dots, nothing else
            raise AuthError("malformed token")
        return Prechecked(token, hashlib.sha256(token.encode("ascii")).digest())

    def _now_s(self) -> float:
        return self._clock.wall_ns() / 1e9

    def _lookup(self, fp: bytes) -> Claims | None:
        claims = self._cache.get(fp)
        if claims is None:
            return None
        if self._now_s() >= claims.exp + self.leeway_s:
            # The same instant a full verification starts refusing: the cache never changes an
            # answer, it only makes it cheaper. Re-checking the signature of a token whose
            # signature we already verified would only burn a pool thread.
            del self._cache[fp]
            raise AuthError("expired")
        self._cache.move_to_end(fp)
        self.cache_hits += 1
        return claims

    def _store(self, fp: bytes, claims: Claims) -> None:
        if self.cache_size == 0:
            return
        self._cache[fp] = claims
        self._cache.move_to_end(fp)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
            self.evictions += 1

    def _settle(self, fp: bytes, fut: asyncio.Future[tuple[Claims, float]]) -> None:
        """Done callback, on the loop thread: retire the in-flight entry, cache a success."""
        if self._inflight.get(fp) is fut:
            del self._inflight[fp]
        if fut.cancelled() or fut.exception() is not None:
            return  # refusals are counted per caller in verify(); never cached
        claims, seconds = fut.result()
        self.verify_seconds_total += seconds
        self._store(fp, claims)

    # -- in the pool: the full verification ------------------------------------------------
    def _decode(self, token: str) -> tuple[Claims, float]:
        """Header, key by ``kid``, signature, then claims; (claims, seconds spent)."""
        started = time.perf_counter()  # a measurement of CPU cost, not a hot-path timestamp
        header = read_header(token)
        # Explicit allow-list of the one configured asymmetric algorithm: refuses "none" and the
        # HS256-signed-with-the-public-key confusion before any key is touched (RFC 8725 §3.1).
        if header.alg != self.algorithm:
            raise AuthError("algorithm not allowed")
        key = self.keys.key_for(header.kid)
        if key is None:
            raise AuthError("unknown key id")
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=[self.algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                # exp/nbf are checked below against the injected clock; pyjwt reads its own.
                options={
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "require": ["exp", "sub"],
                },
            )
        except jwt.PyJWTError as exc:
            raise AuthError(reason_for(exc)) from exc
        except (ValueError, TypeError):  # defensive: a key/curve mismatch deep in cryptography
            raise AuthError("malformed token") from None
        claims = self._claims(payload)
        return claims, time.perf_counter() - started

    def _claims(self, payload: Mapping[str, Any]) -> Claims:
        exp, nbf, sub = payload.get("exp"), payload.get("nbf"), payload.get("sub")
        if not numeric_date(exp):
            raise AuthError("invalid exp")
        if nbf is not None and not numeric_date(nbf):
            raise AuthError("invalid nbf")
        if not isinstance(sub, str) or not sub:
            raise AuthError("malformed token")
        now = self._now_s()
        if now >= int(exp) + self.leeway_s:
            raise AuthError("expired")
        if nbf is not None and now < nbf - self.leeway_s:
            raise AuthError("not yet valid")
        aud = payload.get("aud", "")
        return Claims(
            sub=sub,
            exp=int(exp),
            admin=is_admin(payload),
            # Interned: 100k cached entries share one copy of the usual audience and issuer.
            aud=sys.intern(aud) if isinstance(aud, str) else tuple(str(a) for a in aud),
            iss=sys.intern(str(payload.get("iss", ""))),
        )
