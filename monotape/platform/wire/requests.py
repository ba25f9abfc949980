"""Client -> server requests: decoded strictly, then judged key by key (docs/wire.md, Requests).

Six kinds: ``subscribe``, ``unsubscribe`` and ``priority`` name keys; ``refresh`` (a fresh
token on the open connection), ``report`` (what the terminal's guard dropped: the glass audit)
and ``rate`` (the terminal's ``max_hz``) name none and are the session's (core/session.py).

Two stages, so that one bad key never costs a terminal its good ones:

1. ``decode_request``: the message's *shape*. One binary WebSocket message holding a msgpack map
   whose ``type`` field picks the kind; a field named twice, an unknown field, a key that is not
   a string (or longer than ``MAX_KEY_TEXT``) refuses the whole request with one ``ErrorCode``,
   and the message names the field (``at `$.keys[3]```). Limits are explicit (bounded
   everything).
2. ``judge``: each key against the one key grammar, the dictionary and the connection's limits.
   Pure: values in (the request, the dictionary, what the connection holds), a ``Ruling`` out
   (the instruments to apply it to, each once, and the keys refused with why). The server
   applies the ruling and answers REFUSED (if anything was refused), then ACK.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Annotated, Any, Final

import msgspec
from msgspec import Meta

from monotape.platform.model import key_problem
from monotape.platform.wire.codes import ErrorCode
from monotape.platform.wire.messages import MAX_KEY_TEXT, Refusal

__all__ = [
    "MAX_HZ",
    "MAX_KEYS",
    "MAX_PRIORITY_KEYS",
    "MAX_REQUEST_BYTES",
    "Key",
    "KeyRequest",
    "Rate",
    "Refresh",
    "Report",
    "Request",
    "RequestError",
    "Ruling",
    "SetPriority",
    "Subscribe",
    "Unsubscribe",
    "decode_request",
    "encode_request",
    "judge",
]

# 256 keys of the grammar's longest (57 chars: 59 msgpack bytes each) make 15,137 bytes. The
# limit sits under the server's WebSocket message limit (``max_message_bytes``, 16 KiB), so a
# request between the two is answered TOO_LARGE and only bigger ones are closed with 1009.
MAX_REQUEST_BYTES: Final = 15 * 1024
MAX_KEYS: Final = 256
MAX_PRIORITY_KEYS: Final = 16  # an order ticket holds a handful of symbols

# A key is decoded as a bounded string and judged afterwards (``judge``): a malformed key is
# refused on its own, never the request around it.
Key = Annotated[str, Meta(max_length=MAX_KEY_TEXT)]
ReqId = Annotated[int, Meta(ge=0, le=2**32 - 1)]
U64 = Annotated[int, Meta(ge=0)]  # msgpack holds at most a uint64: that bound is the format's

# max_hz -> k: a terminal at max_hz gets every k-th boundary of the 40 ms grid (25 Hz), those
# with frame_no % k == 0, so terminals of one rate share payloads (docs/wire.md, rate).
MAX_HZ: Final[dict[float, int]] = {25.0: 1, 12.5: 2, 5.0: 5, 2.5: 10, 1.0: 25}


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


class Refresh(msgspec.Struct, tag="refresh", forbid_unknown_fields=True, frozen=True):
    """A fresh token for the open session (verified like the upgrade's; ERROR 11 if not taken).
    Its length is bounded by the request limit here and by ``auth.max_token_bytes`` when it is
    verified."""

    req: ReqId
    token: Annotated[str, Meta(min_length=1)]


class Report(
    msgspec.Struct, tag="report", forbid_unknown_fields=True, frozen=True, omit_defaults=True
):
    """The terminal's guard, cumulative since the connection opened: records dropped as
    regressions (at or below the held version) and gaps (a delta on the wrong base); ``last``
    the last regression: [key, held_epoch, held_seq, got_epoch, got_seq]."""

    req: ReqId
    regressions: U64
    gaps: U64
    last: tuple[Key, U64, U64, U64, U64] | None = None


class Rate(msgspec.Struct, tag="rate", forbid_unknown_fields=True, frozen=True):
    """The terminal's maximum frame rate: one of ``MAX_HZ`` (an int or a float on the wire)."""

    req: ReqId
    max_hz: float

    def __post_init__(self) -> None:
        if self.max_hz not in MAX_HZ:  # msgspec turns this into a ValidationError at $.max_hz
            raise ValueError("max_hz must be one of 25, 12.5, 5, 2.5, 1 - at `$.max_hz`")

    @property
    def k(self) -> int:
        """Every k-th boundary of the 40 ms grid."""
        return MAX_HZ[self.max_hz]


KeyRequest = Subscribe | Unsubscribe | SetPriority  # judged key by key (``judge``)
Request = Subscribe | Unsubscribe | SetPriority | Refresh | Report | Rate


class RequestError(ValueError):
    """A refused request: ``code`` and ``message`` go back to the client in an ``Error``."""

    def __init__(self, code: ErrorCode, message: str, req: int = 0) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.req = req  # 0 when the request id could not be read


_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(Request)
_FLAT: Final = msgspec.msgpack.Decoder()
# type, req, keys (or token, or max_hz): a map of exactly three entries cannot name a field twice
# (all three are required). A report has four or five: always decoded strictly.
_REQUIRED_FIELDS: Final = 3


def encode_request(req: Request) -> bytes:
    return _ENCODER.encode(req)


def _as_flat_array(data: bytes) -> bytes | None:
    """A top-level msgpack map's bytes re-headed as an array of its 2N keys and values (the
    entries are laid out identically), or None if the message is not a map.

    Decoding that array keeps every entry, so a field named twice is seen instead of the last
    copy silently winning, as it would in a dict or a Struct."""
    b = data[0]
    if 0x80 <= b <= 0x8F:  # fixmap
        n, head = b & 0x0F, 1
    elif b == 0xDE and len(data) >= 3:  # map 16
        n, head = int.from_bytes(data[1:3], "big"), 3
    elif b == 0xDF and len(data) >= 5:  # map 32
        n, head = int.from_bytes(data[1:5], "big"), 5
    else:
        return None
    n *= 2
    if n <= 15:
        prefix = bytes((0x90 | n,))
    elif n <= 0xFFFF:
        prefix = b"\xdc" + n.to_bytes(2, "big")
    else:  # a map 32 of 2**31+ entries cannot fit MAX_REQUEST_BYTES: the decoder says so
        prefix = b"\xdd" + min(n, 0xFFFF_FFFF).to_bytes(4, "big")
    return prefix + data[head:]


def _req_of(fields: Mapping[str, Any]) -> int:
    """The request id of an invalid request, so the error can name it; 0 if unreadable."""
    req = fields.get("req")
    if type(req) is int and 0 <= req <= 2**32 - 1:
        return req
    return 0


def _salvage_req(data: bytes) -> int:
    """``_req_of`` an undecodable-as-a-request message (error path only, <= 15 KiB)."""
    try:
        obj: Any = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return 0
    return _req_of(obj) if isinstance(obj, dict) else 0


def decode_request(data: bytes | str) -> Request:
    """Decode one client message or raise RequestError (chained to msgspec's error).

    Keys come out as bounded strings, not yet judged: ``judge`` refuses bad ones one by one."""
    if isinstance(data, str):
        # Text frames are refused outright: the protocol is binary end to end (close 1003).
        raise RequestError(ErrorCode.TEXT_NOT_ALLOWED, "text messages are not accepted")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise RequestError(ErrorCode.BAD_MESSAGE, f"expected bytes, got {type(data).__name__}")
    if len(data) > MAX_REQUEST_BYTES:
        raise RequestError(
            ErrorCode.TOO_LARGE, f"{len(data)} bytes exceeds the {MAX_REQUEST_BYTES} byte limit"
        )
    data = bytes(data)
    try:
        request = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        _decode_strictly(data)  # the same verdict, with a field named twice found first
        raise RequestError(ErrorCode.INVALID_REQUEST, str(exc), _salvage_req(data)) from exc
    except (msgspec.DecodeError, RecursionError) as exc:  # deep nesting: msgspec recurses
        raise RequestError(ErrorCode.BAD_MESSAGE, f"undecodable msgpack: {exc}") from exc
    # The typed decoder keeps the last copy of a field named twice. Three entries (the common
    # case) cannot hold a repeat; anything else is checked entry by entry.
    if data[0] != 0x80 | _REQUIRED_FIELDS:
        return _decode_strictly(data)
    return request


def _decode_strictly(data: bytes) -> Request:
    """Decode keeping every map entry, so a field named twice is refused (INVALID_REQUEST)
    instead of the last copy silently winning; RequestError for anything else wrong."""
    try:
        flat = _as_flat_array(data)
        obj: Any = _FLAT.decode(data if flat is None else flat)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise RequestError(ErrorCode.BAD_MESSAGE, f"undecodable msgpack: {exc}") from exc
    if flat is None:
        cause = msgspec.ValidationError(f"Expected `object`, got `{type(obj).__name__}`")
        raise RequestError(ErrorCode.INVALID_REQUEST, str(cause)) from cause
    fields: dict[str, Any] = {}
    for i in range(0, len(obj), 2):
        name = obj[i]
        if type(name) is not str:
            cause = msgspec.ValidationError(f"Expected field names as `str`, got `{name!r:.40}`")
            raise RequestError(ErrorCode.INVALID_REQUEST, str(cause), _req_of(fields)) from cause
        if name in fields:
            cause = msgspec.ValidationError(f"Field `{name[:40]}` appears more than once")
            raise RequestError(ErrorCode.INVALID_REQUEST, str(cause), _req_of(fields)) from cause
        fields[name] = obj[i + 1]
    try:
        request: Request = msgspec.convert(fields, Request)
    except msgspec.ValidationError as exc:  # well-formed msgpack, wrong shape: names the field
        raise RequestError(ErrorCode.INVALID_REQUEST, str(exc), _req_of(fields)) from exc
    return request


# -- judging, key by key -----------------------------------------------------------------------


class Ruling(msgspec.Struct, frozen=True, gc=False):
    """What one request does: ``iids`` to apply it to (each once, in the request's order) and
    the keys ``refused``, in the request's order. A key named twice counts once (a snapshot
    never repeats a record); every key is either applied or refused."""

    iids: list[int]
    refused: list[Refusal]


def _refusal(key: str, code: ErrorCode, reason: str) -> Refusal:
    return Refusal(key, int(code), reason)


def judge(
    request: KeyRequest,
    ids: Mapping[str, int],
    subscribed: Set[int],
    priority: Set[int],
    *,
    max_subscriptions: int,
    max_priority: int,
) -> Ruling:
    """Each key of ``request`` against the key grammar, the dictionary ``ids`` (key -> iid)
    and the connection's holdings (``subscribed``, ``priority``: iids) and limits.

    - malformed (outside the key grammar): MALFORMED_KEY, with what is wrong;
    - not in the dictionary: UNKNOWN_SYMBOL;
    - subscribe beyond ``max_subscriptions``: TOO_MANY_SUBSCRIPTIONS for the keys past the
      limit, in request order (a key already held is always accepted: re-subscribing is how a
      terminal asks for a fresh snapshot);
    - priority on a key not subscribed: NOT_SUBSCRIBED; beyond ``max_priority``:
      TOO_MANY_PRIORITY. Unsubscribing, or priority off, a key not held is a no-op, not a refusal.
    """
    iids: list[int] = []
    refused: list[Refusal] = []
    seen: set[str] = set()
    is_sub = isinstance(request, Subscribe)
    prio_on = isinstance(request, SetPriority) and request.on
    room_subs = max_subscriptions - len(subscribed)
    room_prio = max_priority - len(priority)
    for key in request.keys:
        if key in seen:
            continue
        seen.add(key)
        iid = ids.get(key)
        if iid is None:
            # The grammar is asked only about keys the dictionary lacks: every dictionary key
            # obeys it (checked where keys are born), and a lookup is the storm-time cost.
            problem = key_problem(key)
            if problem is not None:
                refused.append(_refusal(key, ErrorCode.MALFORMED_KEY, problem))
            else:
                refused.append(_refusal(key, ErrorCode.UNKNOWN_SYMBOL, "not in the dictionary"))
            continue
        if is_sub and iid not in subscribed:
            if room_subs <= 0:
                refused.append(
                    _refusal(
                        key,
                        ErrorCode.TOO_MANY_SUBSCRIPTIONS,
                        f"over the limit of {max_subscriptions} subscriptions per connection",
                    )
                )
                continue
            room_subs -= 1
        elif prio_on:
            if iid not in subscribed:
                refused.append(_refusal(key, ErrorCode.NOT_SUBSCRIBED, "subscribe before priority"))
                continue
            if iid not in priority:
                if room_prio <= 0:
                    refused.append(
                        _refusal(
                            key,
                            ErrorCode.TOO_MANY_PRIORITY,
                            f"over the limit of {max_priority} priority symbols per connection",
                        )
                    )
                    continue
                room_prio -= 1
        iids.append(iid)
    return Ruling(iids, refused)
