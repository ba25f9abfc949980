"""Client -> server requests: small msgpack maps, strictly validated (docs/wire.md, Requests).

Every request is one binary WebSocket message holding a msgpack map whose ``type`` field picks
the kind. Validation is msgspec's, so a refusal names the offending field (``at `$.keys[3]```);
limits are explicit (STYLE 7: bounded everything). Semantic checks (unknown symbol,
subscription and priority limits) are the server's: it answers them with the same ``Error``
message and the ``ErrorCode``s defined beside the codec.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec
from msgspec import Meta

from monotape.platform.codec import ErrorCode
from monotape.platform.model import KEY_MAX_LENGTH, KEY_PATTERN

__all__ = [
    "MAX_KEYS",
    "MAX_PRIORITY_KEYS",
    "MAX_REQUEST_BYTES",
    "Key",
    "Request",
    "RequestError",
    "SetPriority",
    "Subscribe",
    "Unsubscribe",
    "decode_request",
    "encode_request",
]

MAX_REQUEST_BYTES: Final = 16 * 1024  # 256 keys of 64 chars fit with room to spare
MAX_KEYS: Final = 256
MAX_PRIORITY_KEYS: Final = 16  # an order ticket holds a handful of symbols

Key = Annotated[
    str,
    Meta(min_length=3, max_length=KEY_MAX_LENGTH, pattern=KEY_PATTERN),
]
ReqId = Annotated[int, Meta(ge=0, le=2**32 - 1)]


class Subscribe(msgspec.Struct, tag="subscribe", forbid_unknown_fields=True, frozen=True):
    req: ReqId
    keys: Annotated[list[Key], Meta(min_length=1, max_length=MAX_KEYS)]


class Unsubscribe(msgspec.Struct, tag="unsubscribe", forbid_unknown_fields=True, frozen=True):
    req: ReqId
    keys: Annotated[list[Key], Meta(min_length=1, max_length=MAX_KEYS)]


class SetPriority(msgspec.Struct, tag="priority", forbid_unknown_fields=True, frozen=True):
    req: ReqId
    keys: Annotated[list[Key], Meta(min_length=1, max_length=MAX_PRIORITY_KEYS)]
    on: bool = True


Request = Subscribe | Unsubscribe | SetPriority


class RequestError(ValueError):
    """A refused request: ``code`` and ``message`` go back to the client in an ``Error``."""

    def __init__(self, code: ErrorCode, message: str, req: int = 0) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.req = req  # 0 when the request id could not be read


_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(Request)


def encode_request(req: Request) -> bytes:
    return _ENCODER.encode(req)


def _salvage_req(data: bytes) -> int:
    """The request id of an invalid request, so the error can name it; 0 if unreadable.

    Only on the error path, on at most MAX_REQUEST_BYTES of input."""
    try:
        obj: Any = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return 0
    if isinstance(obj, dict):
        req = obj.get("req")
        if type(req) is int and 0 <= req <= 2**32 - 1:
            return req
    return 0


def decode_request(data: bytes | str) -> Request:
    """Decode one client message or raise RequestError (chained to msgspec's error)."""
    if isinstance(data, str):
        # Text frames are refused outright: the protocol is binary end to end (close 1003).
        raise RequestError(ErrorCode.TEXT_NOT_ALLOWED, "text messages are not accepted")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise RequestError(ErrorCode.BAD_MESSAGE, f"expected bytes, got {type(data).__name__}")
    if len(data) > MAX_REQUEST_BYTES:
        raise RequestError(
            ErrorCode.TOO_LARGE, f"{len(data)} bytes exceeds the {MAX_REQUEST_BYTES} byte limit"
        )
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:  # well-formed msgpack, wrong shape: names the field
        raise RequestError(ErrorCode.INVALID_REQUEST, str(exc), _salvage_req(bytes(data))) from exc
    except (msgspec.DecodeError, RecursionError) as exc:  # deep nesting: msgspec recurses
        raise RequestError(ErrorCode.BAD_MESSAGE, f"undecodable msgpack: {exc}") from exc
