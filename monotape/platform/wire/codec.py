"""The codec's face: every name a codec of docs/wire.md exposes, from the modules that hold it.

The spec is split along its own seams: ``codes`` (kinds, error and close codes), ``varints``,
``records`` (record layout and encoders) and ``record_reader``, ``messages`` (every server
message), ``framing`` (RFC 6455 server frames). This module only gathers them, so the many
``from monotape.platform.wire import codec`` call sites (server, SDK, load tools, tests, bench)
read ``codec.encode_frame`` / ``codec.Kind`` as before; the codec's own modules import the
module that holds a name instead (the test vectors use this face, as any client does).
"""

from __future__ import annotations

from monotape.platform.wire.codes import PROTOCOL_VERSION, CloseCode, CodecError, ErrorCode, Kind
from monotape.platform.wire.framing import ws_binary_frame
from monotape.platform.wire.messages import (
    MAX_KEY_TEXT,
    Ack,
    Close,
    Error,
    Frame,
    Heartbeat,
    Hello,
    PriorityUpdate,
    Refusal,
    Refused,
    ServerMessage,
    Snapshot,
    Stale,
    StaleVenue,
    UnknownKind,
    decode_message,
    encode_ack,
    encode_close,
    encode_error,
    encode_frame,
    encode_heartbeat,
    encode_hello,
    encode_priority,
    encode_refused,
    encode_snapshot,
    encode_stale,
    frame_as_json,
    frame_header,
    snapshot_header,
)
from monotape.platform.wire.record_reader import decode_record
from monotape.platform.wire.records import (
    FLAG_DELTA,
    FLAG_NEW_EPOCH,
    FLAG_SEQ64,
    Record,
    apply_record,
    encode_delta_record,
    encode_full_record,
)
from monotape.platform.wire.varints import wrap_int64

__all__ = [
    "FLAG_DELTA",
    "FLAG_NEW_EPOCH",
    "FLAG_SEQ64",
    "MAX_KEY_TEXT",
    "PROTOCOL_VERSION",
    "Ack",
    "Close",
    "CloseCode",
    "CodecError",
    "Error",
    "ErrorCode",
    "Frame",
    "Heartbeat",
    "Hello",
    "Kind",
    "PriorityUpdate",
    "Record",
    "Refusal",
    "Refused",
    "ServerMessage",
    "Snapshot",
    "Stale",
    "StaleVenue",
    "UnknownKind",
    "apply_record",
    "decode_message",
    "decode_record",
    "encode_ack",
    "encode_close",
    "encode_delta_record",
    "encode_error",
    "encode_frame",
    "encode_full_record",
    "encode_heartbeat",
    "encode_hello",
    "encode_priority",
    "encode_refused",
    "encode_snapshot",
    "encode_stale",
    "frame_as_json",
    "frame_header",
    "snapshot_header",
    "wrap_int64",
    "ws_binary_frame",
]
