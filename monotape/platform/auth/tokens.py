"""What a token is to the node, before any key: the refusal reasons, the claims, the shape checks.

``verifier.TokenVerifier`` does the signature and the cache; this module holds the values and
pure checks it and the upgrade share: the closed set of refusal reasons (``AuthError``), what a
verified token grants (``Claims``), a token whose shape passed (``Prechecked``), the header and
claim readers, where an upgrade carries its token (``token_from_request``) and the 401's
``WWW-Authenticate`` value. Nothing here touches a key, a thread or a clock.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeGuard
from urllib.parse import parse_qsl

import jwt
import msgspec

__all__ = [
    "COMPACT_JWS",
    "MAX_NUMERIC_DATE",
    "REASONS",
    "AuthError",
    "Claims",
    "Prechecked",
    "is_admin",
    "numeric_date",
    "read_header",
    "reason_for",
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
COMPACT_JWS: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
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


def read_header(token: str) -> _Header:
    """The header segment, decoded (msgspec: ~10x cheaper than ``jwt.get_unverified_header``)."""
    segment, dot, _ = token.partition(".")
    if not dot:
        raise AuthError("malformed token")
    try:
        return _HEADER_DECODER.decode(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, msgspec.DecodeError):  # binascii.Error is a ValueError
        raise AuthError("malformed token") from None


def is_admin(payload: Mapping[str, Any]) -> bool:
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


def reason_for(exc: jwt.PyJWTError) -> str:
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


def numeric_date(value: object) -> TypeGuard[int | float]:
    """A finite number of seconds in [0, MAX_NUMERIC_DATE] (bools are ints in Python: refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and 0 <= value <= MAX_NUMERIC_DATE


def token_from_request(
    headers: Mapping[str, str] | Iterable[tuple[str, str]], query: str
) -> str | None:
    """The bearer token of an upgrade request: ``Authorization: Bearer <t>`` first (RFC 6750
    §2.1; header name and scheme case-insensitive), then a ``bearer.<t>`` entry of
    ``Sec-WebSocket-Protocol`` (what a browser can send: ``new WebSocket(url, ["monotape.v2",
    "bearer." + t])``; a JWT's characters are valid in a subprotocol token, RFC 6455 §4.1), then
    the ``token`` query parameter (§2.3; accepted, but discouraged: URLs get logged). ``query``
    may start with ``?``.

    Pass the headers as (name, value) pairs to see every copy: two ``Authorization`` headers
    raise ``AuthError("duplicate Authorization")`` rather than letting one silently win (a
    proxy that adds its own next to the client's would otherwise pick whose identity counts)."""
    pairs_in = headers.items() if isinstance(headers, Mapping) else headers
    found: str | None = None
    offered: str | None = None  # the first bearer. entry among the subprotocols
    seen = 0
    for name, value in pairs_in:
        lowered = name.lower()
        if lowered == "authorization":
            seen += 1
            if seen > 1:
                raise AuthError("duplicate Authorization")
            scheme, _, credentials = value.strip().partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                found = credentials.strip()
        elif lowered == "sec-websocket-protocol" and offered is None:
            for entry in value.split(","):
                entry = entry.strip()
                if entry.startswith("bearer.") and len(entry) > len("bearer."):
                    offered = entry[len("bearer.") :]
                    break
    if found is not None:
        return found
    if offered is not None:
        return offered
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
