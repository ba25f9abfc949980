"""Server messages (docs/wire.md, Message kinds): a kind byte, then records or a msgpack body.

Hot-path messages (SNAPSHOT, FRAME, PRIORITY) are a header plus records joined as the encoder
built them (``records``); the infrequent ones (HELLO, HEARTBEAT, ERROR, CLOSE, ACK, REFUSED)
(and STALE) are a kind byte plus an array-like msgpack body. ``decode_message`` reads any of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Final

import msgspec

from monotape.platform.model import Instrument, Tick
from monotape.platform.wire.codes import PROTOCOL_VERSION, CodecError, ErrorCode, Kind
from monotape.platform.wire.record_reader import read_record, read_records
from monotape.platform.wire.records import FLAG_DELTA, MIN_RECORD, Record
from monotape.platform.wire.varints import I64_MAX, ONE_BYTE, uvarint

__all__ = [
    "MAX_KEY_TEXT",
    "MAX_REFUSED",
    "Ack",
    "Close",
    "Error",
    "Frame",
    "Heartbeat",
    "Hello",
    "PriorityUpdate",
    "Refusal",
    "Refused",
    "ServerMessage",
    "Snapshot",
    "Stale",
    "StaleVenue",
    "UnknownKind",
    "decode_message",
    "encode_ack",
    "encode_close",
    "encode_error",
    "encode_frame",
    "encode_heartbeat",
    "encode_hello",
    "encode_priority",
    "encode_refused",
    "encode_snapshot",
    "encode_stale",
    "frame_as_json",
    "frame_header",
    "snapshot_header",
]

_LAST_KIND: Final = max(Kind)


# --- hot-path messages: a header plus the records the encoder built once ----------------------


def frame_header(frame_no: int, count: int) -> bytes:
    """FRAME kind + frame_no + count; the payload is ``frame_header(...) + b"".join(chunks)``."""
    return ONE_BYTE[Kind.FRAME] + uvarint(frame_no) + uvarint(count)


def encode_frame(frame_no: int, chunks: Sequence[bytes]) -> bytes:
    return frame_header(frame_no, len(chunks)) + b"".join(chunks)


def snapshot_header(frame_no: int, count: int) -> bytes:
    """SNAPSHOT kind + the frame whose published state it shows + count of full records."""
    return ONE_BYTE[Kind.SNAPSHOT] + uvarint(frame_no) + uvarint(count)


def encode_snapshot(frame_no: int, chunks: Sequence[bytes]) -> bytes:
    return snapshot_header(frame_no, len(chunks)) + b"".join(chunks)


def encode_priority(full_chunk: bytes) -> bytes:
    """PRIORITY kind + one full record: absolute, so it never depends on the frame stream."""
    if len(full_chunk) < MIN_RECORD or full_chunk[2] & FLAG_DELTA:
        raise ValueError("a priority update carries exactly one full record")
    return ONE_BYTE[Kind.PRIORITY] + full_chunk


# --- infrequent messages: kind byte + array-like msgpack body ---------------------------------

U16 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF_FFFF)]
U64 = Annotated[int, msgspec.Meta(ge=0)]  # msgpack itself caps ints at uint64
Text = Annotated[str, msgspec.Meta(max_length=1024)]
# The longest string a request may name as a key. Longer refuses the whole request at decode;
# anything up to this is judged key by key (REFUSED echoes it, so it must stay bounded).
MAX_KEY_TEXT: Final = 128
KeyText = Annotated[str, msgspec.Meta(max_length=MAX_KEY_TEXT)]
MAX_REFUSED: Final = 256  # a request names at most 256 keys (requests.MAX_KEYS)

# Every array-like body below forbids trailing elements (protocol 2): one value has one
# encoding, and a client that reads more than the spec says fails here, not in production.


class _InstrumentRow(
    msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True
):
    # venue and symbol are not sent: they are the two halves of key (saves ~30% of hello).
    iid: U16
    key: Annotated[str, msgspec.Meta(min_length=3, max_length=64, pattern=r"^[^:]+:.+$")]
    price_decimals: Annotated[int, msgspec.Meta(ge=0, le=18)]
    tick_size: Annotated[int, msgspec.Meta(ge=1, le=I64_MAX)]


class _HelloBody(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    protocol: U16
    server_id: Text
    frame_ms: U32
    max_subscriptions: U32
    max_priority: U32
    instruments: list[_InstrumentRow]


class Hello(msgspec.Struct, frozen=True):
    protocol: int
    server_id: str
    frame_ms: int
    max_subscriptions: int
    max_priority: int
    instruments: list[Instrument]


class Snapshot(msgspec.Struct, frozen=True):
    frame_no: int
    records: list[Record]


class Frame(msgspec.Struct, frozen=True):
    frame_no: int
    records: list[Record]


class PriorityUpdate(msgspec.Struct, frozen=True):
    record: Record


class Heartbeat(msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True):
    frame_no: U64
    server_wall_ms: U64


class Error(msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True):
    code: U16
    message: Text
    req: U32 = 0


class Close(msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True):
    code: U16
    reconnect_after_ms: U32
    reason: Text


class Ack(msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True):
    req: U32
    subscribed: U32
    priority: U32


class Refusal(msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True):
    """One key of a request that was not applied: the key as the client sent it, an
    ``ErrorCode`` and a sentence saying why."""

    key: KeyText
    code: U16
    reason: Text


class Refused(msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True):
    """REFUSED: the keys of request ``req`` that were not applied. Sent before that request's
    ACK, only when something was refused; every other key of the request was applied."""

    req: U32
    keys: Annotated[list[Refusal], msgspec.Meta(min_length=1, max_length=MAX_REFUSED)]


VenueText = Annotated[str, msgspec.Meta(min_length=1, max_length=16)]  # the key grammar's venue
MAX_STALE_VENUES: Final = 256


class StaleVenue(
    msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True
):
    """A venue whose feed handlers are all down, and since when (server wall ms)."""

    venue: VenueText
    since_ms: U64


class Stale(msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True):
    """STALE: the writer's whole staleness state, replacing the one before. ``grid_since_ms``
    is when the last frame reached this writer if the frame grid has stalled (more than two
    frame intervals without one), 0 while frames flow; ``venues`` the venues whose symbols are
    stale. The next FRAME clears the grid part; a STALE without a venue clears that venue."""

    frame_no: U64
    grid_since_ms: U64
    venues: Annotated[list[StaleVenue], msgspec.Meta(max_length=MAX_STALE_VENUES)]


class UnknownKind(msgspec.Struct, frozen=True, gc=False):
    """A message of a kind this decoder does not know (10-255): clients skip it, so the
    protocol can add kinds without breaking them."""

    kind: int


ServerMessage = (
    Hello
    | Snapshot
    | Frame
    | PriorityUpdate
    | Heartbeat
    | Error
    | Close
    | Ack
    | Refused
    | Stale
    | UnknownKind
)

_ENC: Final = msgspec.msgpack.Encoder()
_DEC_HELLO: Final = msgspec.msgpack.Decoder(_HelloBody)
_DEC_HEARTBEAT: Final = msgspec.msgpack.Decoder(Heartbeat)
_DEC_ERROR: Final = msgspec.msgpack.Decoder(Error)
_DEC_CLOSE: Final = msgspec.msgpack.Decoder(Close)
_DEC_ACK: Final = msgspec.msgpack.Decoder(Ack)
_DEC_REFUSED: Final = msgspec.msgpack.Decoder(Refused)
_DEC_STALE: Final = msgspec.msgpack.Decoder(Stale)


def encode_hello(
    instruments: Sequence[Instrument],
    *,
    frame_ms: int,
    max_subscriptions: int,
    max_priority: int,
    server_id: str,
) -> bytes:
    """Protocol version and the static dictionary (key -> iid, price scale). Encoded once."""
    rows = []
    for ins in instruments:
        if ins.key != f"{ins.venue}:{ins.symbol}" or ":" in ins.venue:
            raise ValueError(f"instrument {ins.iid}: key {ins.key!r} is not VENUE:SYMBOL")
        rows.append(_InstrumentRow(ins.iid, ins.key, ins.price_decimals, ins.tick_size))
    body = _HelloBody(PROTOCOL_VERSION, server_id, frame_ms, max_subscriptions, max_priority, rows)
    return ONE_BYTE[Kind.HELLO] + _ENC.encode(body)


def encode_heartbeat(frame_no: int, server_wall_ms: int) -> bytes:
    return ONE_BYTE[Kind.HEARTBEAT] + _ENC.encode(Heartbeat(frame_no, server_wall_ms))


def encode_error(code: ErrorCode, message: str, req: int = 0) -> bytes:
    # Bounded so an error echoing client input can never exceed the decoder's limit.
    return ONE_BYTE[Kind.ERROR] + _ENC.encode(Error(int(code), message[:1024], req))


def encode_close(code: int, reconnect_after_ms: int, reason: str) -> bytes:
    return ONE_BYTE[Kind.CLOSE] + _ENC.encode(Close(int(code), reconnect_after_ms, reason[:1024]))


def encode_ack(req: int, subscribed: int, priority: int) -> bytes:
    return ONE_BYTE[Kind.ACK] + _ENC.encode(Ack(req, subscribed, priority))


def encode_refused(req: int, refusals: Sequence[Refusal]) -> bytes:
    """REFUSED for request ``req``; ``refusals`` holds 1-256 keys (one request's worth)."""
    if not 1 <= len(refusals) <= MAX_REFUSED:
        raise ValueError(f"REFUSED carries 1-{MAX_REFUSED} keys, not {len(refusals)}")
    return ONE_BYTE[Kind.REFUSED] + _ENC.encode(Refused(req, list(refusals)))


def encode_stale(frame_no: int, grid_since_ms: int, venues: Sequence[tuple[str, int]]) -> bytes:
    """STALE (kind 10): ``venues`` as (venue, since_ms) pairs, at most 256."""
    if len(venues) > MAX_STALE_VENUES:
        raise ValueError(f"STALE names at most {MAX_STALE_VENUES} venues, not {len(venues)}")
    body = Stale(frame_no, grid_since_ms, [StaleVenue(v, s) for v, s in venues])
    return ONE_BYTE[Kind.STALE] + _ENC.encode(body)


# --- the JSON baseline of the bytes-ratio target ----------------------------------------------


def _decimal(n: int, decimals: int) -> float:
    return n / 10**decimals if decimals else float(n)


def frame_as_json(
    frame_no: int,
    records: Sequence[tuple[Tick | None, Tick]],
    keys: Mapping[int, str],
    *,
    decimals: Mapping[int, int] | int = 2,
) -> bytes:
    """The same frame as a naive JSON feed sends it: the baseline of the bytes-ratio target
    (the target: at most 30% of JSON). Absolute prices, no base version: the smallest honest JSON,
    so the ratio is conservative. ``decimals``: per iid, or one scale for all."""
    updates = []
    for _base, t in records:
        d = decimals if isinstance(decimals, int) else decimals[t.iid]
        updates.append(
            {
                "key": keys[t.iid],
                "epoch": t.epoch,
                "seq": t.seq,
                "bid": _decimal(t.bid, d),
                "ask": _decimal(t.ask, d),
                "last": _decimal(t.last, d),
                "size": t.size,
            }
        )
    return msgspec.json.encode({"type": "frame", "frame": frame_no, "updates": updates})


# --- decoding ---------------------------------------------------------------------------------


def _decode_hello(body: memoryview) -> Hello:
    b = _DEC_HELLO.decode(body)
    instruments = []
    for r in b.instruments:
        venue, _, symbol = r.key.partition(":")
        instruments.append(Instrument(r.iid, r.key, venue, symbol, r.price_decimals, r.tick_size))
    return Hello(
        b.protocol, b.server_id, b.frame_ms, b.max_subscriptions, b.max_priority, instruments
    )


def decode_message(data: bytes) -> ServerMessage:
    """Any server message; CodecError (chained to the cause) on anything malformed."""
    if not isinstance(data, bytes):
        if not isinstance(data, bytearray | memoryview):
            raise CodecError(f"expected bytes, got {type(data).__name__}")
        data = bytes(data)
    if not data:
        raise CodecError("empty message")
    kind = data[0]
    name = Kind(kind).name if kind in Kind._value2member_map_ else str(kind)
    try:
        if kind == Kind.FRAME:
            return Frame(*read_records(data, False, "FRAME"))
        if kind == Kind.SNAPSHOT:
            return Snapshot(*read_records(data, True, "SNAPSHOT"))
        if kind == Kind.PRIORITY:
            rec, pos = read_record(data, 1)
            if rec.has_base or pos != len(data):
                raise CodecError("PRIORITY: must be exactly one full record")
            return PriorityUpdate(rec)
        body = memoryview(data)[1:]
        if kind == Kind.HEARTBEAT:
            return _DEC_HEARTBEAT.decode(body)
        if kind == Kind.ERROR:
            return _DEC_ERROR.decode(body)
        if kind == Kind.CLOSE:
            return _DEC_CLOSE.decode(body)
        if kind == Kind.ACK:
            return _DEC_ACK.decode(body)
        if kind == Kind.REFUSED:
            return _DEC_REFUSED.decode(body)
        if kind == Kind.STALE:
            return _DEC_STALE.decode(body)
        if kind == Kind.HELLO:
            return _decode_hello(body)
        if kind > _LAST_KIND:
            return UnknownKind(kind)  # a later protocol's message: skipped, not malformed
    except CodecError:
        raise
    except IndexError as exc:
        raise CodecError(f"{name}: truncated at {len(data)} bytes") from exc
    except (msgspec.DecodeError, RecursionError) as exc:  # ValidationError names the field
        raise CodecError(f"{name}: {exc}") from exc
    raise CodecError(f"unknown message kind {kind}")
