"""The protocol's numbers (docs/wire.md): its version, message kinds, error and close codes.

Values only: the server, the SDK, the session's ``Disconnect`` and every codec module name a
kind or a code from here, so each number is written once.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

__all__ = ["PROTOCOL_VERSION", "CloseCode", "CodecError", "ErrorCode", "Kind"]

# 2: the REFUSED message (per-key answers), unknown kinds skipped, arrays exact. A v1 client
# would close on kind 9 (v1 called any unknown kind malformed), hence the bump. Still 2 with
# the refresh, report and rate requests, ERROR 11 and close 1013: new request types (an older
# server answers INVALID_REQUEST), no new server message kind, nothing an existing client reads
# differently. Still 2 with STALE (kind 10): version 2 clients skip kinds they do not know.
PROTOCOL_VERSION: Final = 2


class Kind(IntEnum):
    """First byte of every server message."""

    HELLO = 1
    SNAPSHOT = 2
    FRAME = 3
    PRIORITY = 4
    HEARTBEAT = 5
    ERROR = 6
    CLOSE = 7
    ACK = 8
    REFUSED = 9  # the keys of a request that were not applied, each with why (protocol 2)
    # prices stopped: the frame grid stalled, or venues whose handlers are all down. Added
    # within protocol 2: a version 2 client skips kinds 10-255 (docs/wire.md, STALE)
    STALE = 10


class ErrorCode(IntEnum):
    """``Error.code``: why a request (or a message) was refused."""

    BAD_MESSAGE = 1  # undecodable bytes
    TEXT_NOT_ALLOWED = 2
    TOO_LARGE = 3  # over the request limit, under the WebSocket message limit (else 1009)
    UNKNOWN_SYMBOL = 4  # per key: not in HELLO's dictionary
    TOO_MANY_SUBSCRIPTIONS = 5  # per key: over HELLO's max_subscriptions
    RATE_LIMITED = 6
    TOO_MANY_PRIORITY = 7  # per key: over HELLO's max_priority
    NOT_SUBSCRIBED = 8  # per key: priority on a symbol not subscribed
    INVALID_REQUEST = 9  # schema / validation failure: the whole request is refused
    MALFORMED_KEY = 10  # per key: not VENUE:SYMBOL by the key grammar (REFUSED only)
    TOKEN_REJECTED = 11  # refresh: invalid, expired, another subject, or wider claims


class CloseCode(IntEnum):
    """Every WebSocket close code the server sends (RFC 6455 §7.4.1), repeated in ``Close.code``;
    docs/wire.md's close table lists the same set. The ones marked *library* are sent by
    websockets itself when it fails a connection; the server still puts its CLOSE message with
    ``reconnect_after_ms`` in front of them. Why each is sent: ``core.disconnect``."""

    NORMAL = 1000  # the echo of a terminal's own close; the server never starts one
    GOING_AWAY = 1001  # drain / shutdown: reconnect elsewhere after reconnect_after_ms
    PROTOCOL_ERROR = 1002  # library: a frame that breaks RFC 6455 (bad opcode, unmasked, ...)
    UNSUPPORTED_DATA = 1003  # a text frame
    INVALID_DATA = 1007  # library: a text frame that is not UTF-8
    POLICY_VIOLATION = 1008  # rate limit, too many errors, slow consumer, budgets, token expiry
    MESSAGE_TOO_BIG = 1009  # library: over the WebSocket message limit (max_message_bytes)
    INTERNAL_ERROR = 1011  # keepalive timeout (as websockets' own keepalive), a server fault
    # An upgrade refused in-band (a browser offered monotape.v2 and cannot read an HTTP 503 or
    # 429: it sees 1006): IANA's "Try Again Later", the hint is the Retry-After the HTTP answer
    # would have carried.
    TRY_AGAIN_LATER = 1013


class CodecError(ValueError):
    """Bytes that are not a valid server message; the message says what and where."""
