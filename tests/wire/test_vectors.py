"""tests/vectors/: checked in, regenerated here (any difference fails), and decoded back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from monotape.platform.wire import codec, vectors
from monotape.platform.wire.requests import (
    RequestError,
    SetPriority,
    Subscribe,
    Unsubscribe,
    decode_request,
    judge,
)

VECTORS = Path(__file__).parents[1] / "vectors"
BUILT = vectors.build()


def load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(BUILT))
def test_checked_in_vectors_match_the_generator(name: str) -> None:
    expected = vectors.render(BUILT[name])
    assert (VECTORS / name).read_text(encoding="utf-8") == expected, (
        f"tests/vectors/{name} is stale: run python -m monotape.platform.wire.vectors tests/vectors"
    )


def test_no_stray_vector_files() -> None:
    assert sorted(p.name for p in VECTORS.glob("*.json")) == sorted(BUILT)


def as_dict(value: Any) -> Any:
    """Structs (array-like ones too) as plain field dicts, recursively."""
    if isinstance(value, msgspec.Struct):
        return {f: as_dict(getattr(value, f)) for f in value.__struct_fields__}
    if isinstance(value, list):
        return [as_dict(v) for v in value]
    return value


@pytest.mark.parametrize("case", load("records.json")["cases"], ids=lambda c: c["name"])
def test_record_vectors_decode_to_inputs(case: dict[str, Any]) -> None:
    rec = codec.decode_record(bytes.fromhex(case["hex"]))
    assert as_dict(rec) == case["decoded"]
    base, new = case["base"], case["new"]
    held = None if base is None else (base["bid"], base["ask"], base["last"])
    assert codec.apply_record(held, rec) == (new["bid"], new["ask"], new["last"])


@pytest.mark.parametrize("case", load("messages.json")["cases"], ids=lambda c: c["name"])
def test_message_vectors_decode_to_inputs(case: dict[str, Any]) -> None:
    assert as_dict(codec.decode_message(bytes.fromhex(case["hex"]))) == case["decoded"]


@pytest.mark.parametrize("case", load("bad_messages.json")["cases"], ids=lambda c: c["name"])
def test_bad_message_vectors_are_refused(case: dict[str, Any]) -> None:
    with pytest.raises(codec.CodecError):
        codec.decode_message(bytes.fromhex(case["hex"]))


@pytest.mark.parametrize("case", load("websocket.json")["cases"], ids=lambda c: c["name"])
def test_websocket_vectors(case: dict[str, Any]) -> None:
    payload = bytes(i % 251 for i in range(case["payload_len"]))
    assert codec.ws_binary_frame(payload) == bytes.fromhex(case["header_hex"]) + payload


@pytest.mark.parametrize("case", load("requests.json")["good"], ids=lambda c: c["name"])
def test_good_request_vectors(case: dict[str, Any]) -> None:
    decoded = msgspec.to_builtins(decode_request(bytes.fromhex(case["hex"])))
    assert json.loads(json.dumps(decoded)) == case["input"]  # a tuple (report's last) as a list


@pytest.mark.parametrize("case", load("requests.json")["bad"], ids=lambda c: c["name"])
def test_bad_request_vectors(case: dict[str, Any]) -> None:
    if case["text"] is not None:
        data: bytes | str = case["text"]
    elif case["hex"] is not None:
        data = bytes.fromhex(case["hex"])
    else:
        data = bytes(case["repeat_zero_bytes"])
    with pytest.raises(RequestError) as info:
        decode_request(data)
    assert int(info.value.code) == case["error_code"]
    assert info.value.req == case["req"]
    assert case["names"] in info.value.message


@pytest.mark.parametrize("case", load("requests.json")["judged"], ids=lambda c: c["name"])
def test_judged_request_vectors(case: dict[str, Any]) -> None:
    """A request that decodes is judged key by key: REFUSED (if any) then ACK, byte for byte."""
    ids = {k: i for i, k in enumerate(case["dictionary"])}
    held = frozenset(ids[k] for k in case["held"])
    prio = frozenset(ids[k] for k in case["priority"])
    request = decode_request(bytes.fromhex(case["request_hex"]))
    assert isinstance(request, Subscribe | Unsubscribe | SetPriority)  # the judged kinds
    ruling = judge(
        request,
        ids,
        held,
        prio,
        max_subscriptions=case["max_subscriptions"],
        max_priority=case["max_priority"],
    )
    assert [msgspec.to_builtins(r, order="deterministic") for r in ruling.refused] == [
        [r["key"], r["code"], r["reason"]] for r in case["refused"]
    ]
    if case["refused_hex"] is None:
        assert ruling.refused == []
    else:
        assert codec.encode_refused(request.req, ruling.refused).hex() == case["refused_hex"]
        assert as_dict(codec.decode_message(bytes.fromhex(case["refused_hex"]))) == {
            "req": request.req,
            "keys": case["refused"],
        }
    # the ACK's counts after applying the ruling as a server does
    subs, marks = set(held), set(prio)
    if isinstance(request, Subscribe):
        subs |= set(ruling.iids)
    elif isinstance(request, Unsubscribe):
        subs -= set(ruling.iids)
        marks -= set(ruling.iids)
    elif request.on:
        marks |= set(ruling.iids)
    else:
        marks -= set(ruling.iids)
    ack = codec.encode_ack(request.req, len(subs), len(marks))
    assert ack.hex() == case["ack_hex"]
    assert len(set(ruling.iids)) == len(ruling.iids)  # never twice in one snapshot
