"""loadgen/frame_walk.py: server frames built by websockets' own serializer, cut anywhere."""

from __future__ import annotations

import itertools
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode

from monotape.loadgen.frame_walk import (
    IGNORE,
    KIND,
    WHOLE,
    Event,
    FrameWalk,
    Op,
    ServerFrameError,
)

MAX_WHOLE = 300


class Ctl(NamedTuple):
    """A control frame the server sends."""

    op: Opcode
    payload: bytes


class Msg(NamedTuple):
    """A data message, sent in ``parts`` fragments with ``between`` after each but the last."""

    op: Opcode
    payload: bytes
    parts: int
    between: Ctl | None


def _server(frame: Frame) -> bytes:
    return frame.serialize(mask=False, extensions=[])  # RFC 6455 §5.1: servers never mask


_payloads = st.one_of(
    st.binary(max_size=40),
    st.binary(min_size=120, max_size=140),  # around the 126 length step
    st.builds(lambda k, n: bytes([k]) * n, st.integers(0, 255), st.integers(250, 70_000)),
)
_controls = st.builds(
    Ctl, st.sampled_from([Opcode.PING, Opcode.PONG, Opcode.CLOSE]), st.binary(max_size=125)
)
_messages = st.builds(
    Msg,
    st.sampled_from([Opcode.TEXT, Opcode.BINARY]),
    _payloads,
    st.integers(1, 3),
    st.none() | _controls,
)
_items = st.lists(st.one_of(_messages, _controls), max_size=12)


def _chunks(payload: bytes, parts: int) -> list[bytes]:
    size = -(-len(payload) // parts)
    return [payload[i : i + size] for i in range(0, len(payload), size)] if payload else [b""]


def _wire(items: list[Msg | Ctl]) -> bytes:
    out = []
    for item in items:
        if isinstance(item, Ctl):
            out.append(_server(Frame(item.op, item.payload)))
            continue
        chunks = _chunks(item.payload, item.parts)
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            out.append(_server(Frame(item.op if i == 0 else Opcode.CONT, chunk, fin=last)))
            if not last and item.between is not None:
                out.append(_server(Frame(item.between.op, item.between.payload)))
    return b"".join(out)


def _expected(items: list[Msg | Ctl], watch: bytes) -> list[Event]:
    """What the walk must report, computed from the messages, not from the bytes: a KIND
    message when its first byte arrives, a WHOLE one when it ends (or, too long to keep, when
    it outgrows the bound), control frames as they come, between fragments too."""
    out: list[Event] = []
    for item in items:
        if isinstance(item, Ctl):
            out.append(Event(Op(item.op), -1, item.payload))
            continue
        o, payload = Op(item.op), item.payload
        if not payload:
            out.append(Event(o, -1, None))
            continue
        chunks = _chunks(payload, item.parts)
        ctl = None if item.between is None else Event(Op(item.between.op), -1, item.between.payload)
        w = watch[payload[0]]
        kept = 0
        for i, chunk in enumerate(chunks):
            if i == 0 and w == KIND:
                out.append(Event(o, payload[0], None))
            kept += len(chunk)
            if w == WHOLE and kept > MAX_WHOLE >= kept - len(chunk):
                out.append(Event(o, payload[0], None))
            if i < len(chunks) - 1 and ctl is not None:
                out.append(ctl)
        if w == WHOLE and len(payload) <= MAX_WHOLE:
            out.append(Event(o, payload[0], payload))
    return out


@settings(max_examples=300, deadline=None)
@given(
    items=_items,
    watch=st.binary(min_size=256, max_size=256).map(lambda b: bytes(x % 3 for x in b)),
    cuts=st.lists(st.integers(0, 200_000), max_size=12),
)
def test_the_walk_reports_what_was_sent_wherever_reads_are_cut(
    items: list[Msg | Ctl], watch: bytes, cuts: list[int]
) -> None:
    wire = _wire(items)
    walk = FrameWalk(bytearray(watch), max_whole=MAX_WHOLE)
    got: list[Event] = []
    edges = sorted({0, len(wire), *(c % (len(wire) + 1) for c in cuts)})
    for a, b in itertools.pairwise(edges):
        got.extend(walk.feed(wire[a:b]))
    assert got == _expected(items, watch)


def test_one_byte_at_a_time() -> None:
    items: list[Msg | Ctl] = [
        Msg(Opcode.BINARY, bytes([3, 1, 2]), 1, None),
        Ctl(Opcode.PING, b"hb"),
        Msg(Opcode.BINARY, bytes([5]) * 200, 3, Ctl(Opcode.PING, b"x")),
        Msg(Opcode.BINARY, bytes([4]) * 70_000, 1, None),
    ]
    watch = bytearray([IGNORE]) * 256
    watch[3], watch[5], watch[4] = KIND, WHOLE, KIND
    walk = FrameWalk(watch, max_whole=MAX_WHOLE)
    wire = _wire(items)
    got = [ev for i in range(len(wire)) for ev in walk.feed(wire[i : i + 1])]
    assert got == [
        Event(Op.BINARY, 3, None),
        Event(Op.PING, -1, b"hb"),
        Event(Op.PING, -1, b"x"),
        Event(Op.PING, -1, b"x"),
        Event(Op.BINARY, 5, bytes([5]) * 200),
        Event(Op.BINARY, 4, None),
    ]


def test_a_whole_message_is_kept_up_to_the_bound_and_not_past_it() -> None:
    watch = bytearray([WHOLE]) * 256
    walk = FrameWalk(watch, max_whole=MAX_WHOLE)
    at, past = bytes([4]) * MAX_WHOLE, bytes([5]) * (MAX_WHOLE + 1)
    wire = _server(Frame(Opcode.BINARY, at)) + _server(Frame(Opcode.BINARY, past))
    assert walk.feed(wire) == [Event(Op.BINARY, 4, at), Event(Op.BINARY, 5, None)]


def test_the_watch_table_can_change_between_reads() -> None:
    watch = bytearray([KIND]) * 256
    walk = FrameWalk(watch)
    assert walk.feed(_server(Frame(Opcode.BINARY, b"\x01hello"))) == [Event(Op.BINARY, 1, None)]
    watch[:] = bytes([IGNORE]) * 256
    assert walk.feed(_server(Frame(Opcode.BINARY, b"\x03frame"))) == []


@pytest.mark.parametrize(
    ("wire", "why"),
    [
        (bytes([0x82, 0x82, 0, 0, 0, 0, 3, 120]), "masked"),  # mask bit and a zero key
        (bytes([0x83, 0]), "reserved opcode"),
        (bytes([0xC2, 0]), "reserved bits"),
        (bytes([0x89, 126, 0, 126]) + bytes(126), "control frame"),
        (bytes([0x09, 0]), "control frame"),  # a fragmented ping
        (bytes([0x80, 1, 3]), "continuation frame outside"),
        (bytes([0x02, 1, 3, 0x82, 1, 3]), "new message inside"),
    ],
)
def test_broken_framing_is_refused(wire: bytes, why: str) -> None:
    with pytest.raises(ServerFrameError, match=why):
        FrameWalk(bytearray(256)).feed(wire)


def test_the_watch_table_has_one_entry_per_kind() -> None:
    with pytest.raises(ValueError, match="256"):
        FrameWalk(bytearray(10))
