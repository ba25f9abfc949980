"""wire/codec.py: the face gathers the split modules; every name it exports is the holder's own."""

from __future__ import annotations

from monotape.platform.wire import codec, codes, framing, messages, record_reader, records, varints

HOLDERS = (codes, varints, records, record_reader, messages, framing)


def test_every_exported_name_is_the_object_its_module_holds() -> None:
    for name in codec.__all__:
        holders = [m for m in HOLDERS if name in getattr(m, "__all__", ())]
        assert len(holders) == 1, f"{name}: held by {[m.__name__ for m in holders]}"
        assert getattr(codec, name) is getattr(holders[0], name)


def test_the_face_keeps_every_name_its_callers_use() -> None:
    # What the server, SDK, load tools, tests and bench read through `codec.` before the split.
    used = {
        "Kind", "CloseCode", "ErrorCode", "CodecError", "Record", "Frame", "Snapshot", "Hello",
        "Close", "Error", "Refusal", "Refused", "UnknownKind", "decode_message",
        "encode_delta_record", "encode_full_record", "encode_frame", "frame_header",
        "encode_snapshot", "encode_priority", "encode_hello", "encode_close", "encode_error",
        "encode_heartbeat", "encode_ack", "encode_refused", "ws_binary_frame", "frame_as_json",
        "wrap_int64", "apply_record", "FLAG_DELTA", "FLAG_NEW_EPOCH", "FLAG_SEQ64",
        "PROTOCOL_VERSION", "MAX_KEY_TEXT",
    }  # fmt: skip
    assert used <= set(codec.__all__)
