"""Per-terminal control-frame budgets (budget.py) and where websockets meets them (control.py),
without a socket: the Sans-I/O protocol is fed bytes and asked what it would write."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.protocol import Protocol, State
from websockets.server import ServerProtocol

from monotape.platform.core.budget import ControlBudget, ControlLimits, Overrun
from monotape.platform.server.control import TerminalProtocol, close_reason_with_hint
from monotape.platform.wire import codec
from tests.conftest import server_frames

S = 1_000_000_000
OP_BINARY, OP_CLOSE, OP_PONG = 0x2, 0x8, 0xA


def test_the_burst_then_the_rate() -> None:
    budget = ControlBudget(ControlLimits(10.0, 50, 1 << 20), now_ns=0)
    assert sum(budget.take(0) for _ in range(100)) == 50
    assert sum(budget.take(S) for _ in range(100)) == 10  # one second refills ten
    assert budget.spent == 60
    assert budget.take(S + S // 10) and not budget.take(S + S // 10)


def test_a_quiet_terminal_never_exceeds_the_burst() -> None:
    budget = ControlBudget(ControlLimits(10.0, 5, 1 << 20), now_ns=0)
    budget.take(3600 * S)
    assert budget.tokens == 4.0


@given(st.lists(st.integers(0, 20 * S), max_size=300).map(sorted))
def test_never_more_than_burst_plus_rate_times_elapsed(times: list[int]) -> None:
    limits = ControlLimits(frames_per_s=5.0, burst=8, max_queued_bytes=1)
    budget = ControlBudget(limits, now_ns=0)
    taken = [t for t in times if budget.take(t)]
    if taken:
        assert len(taken) <= limits.burst + limits.frames_per_s * taken[-1] / S + 1e-9


def test_limits_are_validated_and_bytes_compared() -> None:
    with pytest.raises(ValueError):
        ControlLimits(0.0, 1, 1)
    with pytest.raises(ValueError):
        ControlLimits(1.0, 0, 1)
    limits = ControlLimits(1.0, 1, 1000)
    assert not limits.over_queued(1000) and limits.over_queued(1001)
    assert Overrun.CONTROL_FLOOD.value == "control_flood"
    assert "not reading" in Overrun.QUEUED_BYTES.close_reason


@pytest.mark.parametrize("reason", ["", "short", "é" * 200, "x" * 500])
def test_the_close_reason_keeps_the_hint_within_125_bytes(reason: str) -> None:
    text = close_reason_with_hint(reason, 5000)
    assert text.endswith("; reconnect_after_ms=5000")
    assert len(text.encode()) <= 123  # + the 2-byte code: a control frame's 125


# -- the protocol, Sans-I/O ------------------------------------------------------------------
def _open_protocol(burst: int) -> TerminalProtocol:
    protocol = ServerProtocol()
    protocol.__class__ = TerminalProtocol  # as TerminalSocket does with websockets' own
    assert isinstance(protocol, TerminalProtocol)
    # Past the handshake, which is not the subject here: open, reading frames.
    protocol.state = State.OPEN
    protocol.parser = Protocol.parse(protocol)
    next(protocol.parser)
    protocol.budget = ControlBudget(ControlLimits(1.0, burst, 1 << 20), now_ns=0)
    protocol.clock_ns = lambda: 0
    return protocol


def _client_frame(opcode: int, payload: bytes) -> bytes:
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes((0x80 | opcode, 0x80 | len(payload))) + mask + masked


def _written(protocol: ServerProtocol) -> list[tuple[int, bytes]]:
    """(opcode, payload) of each frame the protocol would write (server frames: unmasked)."""
    return server_frames(b"".join(protocol.data_to_send()))


def test_pings_over_the_budget_get_no_pong_but_a_close_message_and_1008() -> None:
    protocol = _open_protocol(burst=3)
    protocol.receive_data(b"".join(_client_frame(0x9, b"%d" % i) for i in range(10)))
    frames = _written(protocol)
    assert [p for op, p in frames if op == OP_PONG] == [b"0", b"1", b"2"]
    binary = [p for op, p in frames if op == OP_BINARY]
    close_msg = codec.decode_message(binary[-1])
    assert isinstance(close_msg, codec.Close)
    assert (close_msg.code, close_msg.reconnect_after_ms) == (1008, 5000)
    opcode, close = frames[-1]
    assert opcode == OP_CLOSE
    assert struct.unpack("!H", close[:2])[0] == 1008
    assert b"reconnect_after_ms=5000" in close
    assert protocol.overrun is Overrun.CONTROL_FLOOD
    assert protocol.state is State.CLOSING
    # The rest of the input is discarded: more pings write nothing.
    protocol.receive_data(_client_frame(0x9, b"late"))
    assert b"".join(protocol.data_to_send()) == b""


def test_unsolicited_pongs_count_too() -> None:
    protocol = _open_protocol(burst=2)
    protocol.receive_data(b"".join(_client_frame(0xA, b"") for _ in range(3)))
    assert protocol.overrun is Overrun.CONTROL_FLOOD


def test_protocol_errors_carry_a_close_message_with_the_hint() -> None:
    """websockets fails the connection itself on a protocol error (here: an unmasked client
    frame, RFC 6455 §5.1); the CLOSE message now goes out just before its close frame."""
    protocol = _open_protocol(burst=100)
    protocol.receive_data(b"\x82\x03abc")
    frames = _written(protocol)
    assert [op for op, _ in frames] == [OP_BINARY, OP_CLOSE]
    close_msg = codec.decode_message(frames[0][1])
    assert isinstance(close_msg, codec.Close) and close_msg.code == 1002
    assert close_msg.reconnect_after_ms == 5000
    assert frames[1][1].endswith(b"; reconnect_after_ms=5000")
    assert protocol.overrun is None


def test_an_unarmed_protocol_answers_every_ping() -> None:
    protocol = _open_protocol(burst=1)
    protocol.budget = None
    protocol.receive_data(b"".join(_client_frame(0x9, b"") for _ in range(100)))
    assert sum(1 for op, _ in _written(protocol) if op == OP_PONG) == 100
