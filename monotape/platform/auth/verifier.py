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

Every refusal is an ``AuthError`` whose ``reason`` is one of ``REASONS``: short, safe to send
back in a 401 and to count in a label. No token ever reaches a log line or an exception message.

Threading contract: the cache, the in-flight map and the counters are owned by the event-loop
thread (``verify``) or by one caller thread (``verify_sync``); the pool threads only run
``_decode``, a pure function of the token bytes and the clock.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import math
import re
import sys
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from typing import Any, Final, TypeGuard
from urllib.parse import parse_qsl

import jwt
import msgspec

from monotape.clock import Clock, SystemClock
from monotape.platform.auth.keys import KeySet

__all__ = [
    "REASONS",
    "AuthError",
    "Claims",
    "Prechecked",
    "TokenVerifier",
    "token_from_request",
    "www_authenticate",
]

# The closed set of refusal reasons (docs/auth.md). Safe to show a client and to use as a label.
REASONS: Final = (
    "missing token",
    "token too large",
    "malformed token",
    "algorithm not allowed",
    "unknown key id",
    "bad signature",
    "expired",
    "not yet valid",
    "wrong audience",
    "wrong issuer",
    "invalid exp",
    "invalid nbf",
    "duplicate Authorization",
)

# A JWS compact serialization (RFC 7515 §7.1): three base64url segments separated by dots.
# Checked on the loop before anything else costs anything. The signature may be empty here
# only so that an unsecured token (``alg: none``) is refused by its name, not as "malformed".
_COMPACT_JWS: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
# exp and nbf are NumericDates (RFC 7519 §2): finite seconds. Past 9999-12-31T23:59:59Z a value
# is a mistake or an attack (1e300 would never expire, NaN and Infinity broke int()).
MAX_NUMERIC_DATE: Final = 253_402_300_799


class AuthError(Exception):
    """A refused token. ``reason`` is one of ``REASONS``; the message is the reason, nothing else.

    When chained, the cause is a pyjwt/cryptography exception whose text never contains the
    token either (pyjwt messages name claims, not values).
    """

    def __init__(self, reason: str) -> None:
        assert reason in REASONS, reason
        super().__init__(reason)
        self.reason = reason


class Claims(msgspec.Struct, frozen=True, kw_only=True):
    """What a verified token grants. ``aud``/``iss`` are the raw claim values."""

    sub: str
    exp: int  # wall-clock seconds since the epoch (RFC 7519 §4.1.4 NumericDate, floored)
    admin: bool = False  # ``adm: true`` or scope "admin"
    aud: str | tuple[str, ...] = ""
    iss: str = ""

    def expires_in(self, now_wall_s: float) -> float:
        """Seconds until ``exp`` (0.0 when already past): the server closes the session then."""
        return max(0.0, self.exp - now_wall_s)


class Prechecked(msgspec.Struct, frozen=True):
    """A token whose shape ``precheck`` accepted, and its fingerprint (sha256 of its bytes).

    Handed back to ``verify`` so that the length check, the pattern and the sha256 run once per
    upgrade. Only ``precheck`` makes one: the fingerprint is the cache key, so a value built by
    hand with another token's fingerprint would be served that token's claims."""

    token: str
    fingerprint: bytes


class _Header(msgspec.Struct):
    """The JOSE header fields we route on (RFC 7515 §4.1); pyjwt re-checks ``alg`` itself."""

    alg: str = ""
    kid: str | None = None


_HEADER_DECODER: Final = msgspec.json.Decoder(_Header)


def _header(token: str) -> _Header:
    """The header segment, decoded (msgspec: ~10x cheaper than ``jwt.get_unverified_header``)."""
    segment, dot, _ = token.partition(".")
    if not dot:
        raise AuthError("malformed token")
    try:
        return _HEADER_DECODER.decode(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, msgspec.DecodeError):  # binascii.Error is a ValueError
        raise AuthError("malformed token") from None


def _is_admin(payload: Mapping[str, Any]) -> bool:
    if payload.get("adm") is True:
        return True
    # RFC 8693 §4.2: "scope" is a space-separated string; some issuers send a list (or "scp").
    for name in ("scope", "scp"):
        scope = payload.get(name)
        if isinstance(scope, str) and "admin" in scope.split():
            return True
        if isinstance(scope, list) and "admin" in scope:
            return True
    return False


def _reason_for(exc: jwt.PyJWTError) -> str:
    # Order matters: InvalidSignatureError is a DecodeError.
    if isinstance(exc, jwt.InvalidSignatureError):
        return "bad signature"
    if isinstance(exc, jwt.InvalidAlgorithmError):
        return "algorithm not allowed"
    if isinstance(exc, jwt.InvalidAudienceError):
        return "wrong audience"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "wrong issuer"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return {"aud": "wrong audience", "iss": "wrong issuer"}.get(exc.claim, "malformed token")
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "expired"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "not yet valid"
    return "malformed token"


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
        if _COMPACT_JWS.fullmatch(token) is None:  # base64url and two dots, nothing else
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
        header = _header(token)
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
            raise AuthError(_reason_for(exc)) from exc
        except (ValueError, TypeError):  # defensive: a key/curve mismatch deep in cryptography
            raise AuthError("malformed token") from None
        claims = self._claims(payload)
        return claims, time.perf_counter() - started

    def _claims(self, payload: Mapping[str, Any]) -> Claims:
        exp, nbf, sub = payload.get("exp"), payload.get("nbf"), payload.get("sub")
        if not _numeric_date(exp):
            raise AuthError("invalid exp")
        if nbf is not None and not _numeric_date(nbf):
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
            admin=_is_admin(payload),
            # Interned: 100k cached entries share one copy of the usual audience and issuer.
            aud=sys.intern(aud) if isinstance(aud, str) else tuple(str(a) for a in aud),
            iss=sys.intern(str(payload.get("iss", ""))),
        )


def _numeric_date(value: object) -> TypeGuard[int | float]:
    """A finite number of seconds in [0, MAX_NUMERIC_DATE] (bools are ints in Python: refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and 0 <= value <= MAX_NUMERIC_DATE


def token_from_request(
    headers: Mapping[str, str] | Iterable[tuple[str, str]], query: str
) -> str | None:
    """The bearer token of an upgrade request: ``Authorization: Bearer <t>`` first (RFC 6750
    §2.1; header name and scheme case-insensitive), then the ``token`` query parameter (§2.3;
    browsers cannot set headers on a WebSocket). ``query`` may start with ``?``.

    Pass the headers as (name, value) pairs to see every copy: two ``Authorization`` headers
    raise ``AuthError("duplicate Authorization")`` rather than letting one silently win (a
    proxy that adds its own next to the client's would otherwise pick whose identity counts)."""
    pairs_in = headers.items() if isinstance(headers, Mapping) else headers
    found: str | None = None
    seen = 0
    for name, value in pairs_in:
        if name.lower() == "authorization":
            seen += 1
            if seen > 1:
                raise AuthError("duplicate Authorization")
            scheme, _, credentials = value.strip().partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                found = credentials.strip()
    if found is not None:
        return found
    try:
        pairs = parse_qsl(query.removeprefix("?"), max_num_fields=64)
    except ValueError:  # more fields than any terminal sends: no token from there
        return None
    for name, value in pairs:
        if name == "token" and value:
            return value
    return None


def www_authenticate(reason: str) -> str:
    """The ``WWW-Authenticate`` value for a 401 (RFC 6750 §3); the reason is from ``REASONS``."""
    if reason == "missing token":
        return 'Bearer realm="monotape"'  # §3.1: no error code when no credentials were sent
    return f'Bearer realm="monotape", error="invalid_token", error_description="{reason}"'
