"""loadgen/session.py: a terminal's session fed the walk's events, no socket."""

from __future__ import annotations

from typing import Any, cast

from monotape.loadgen.frame_walk import IGNORE, KIND, WHOLE, Event, FrameWalk, Op
from monotape.loadgen.session import UNTIL_HELLO, Session
from monotape.loadgen.ws_terminal import TerminalSocket
from monotape.platform.wire.codes import ErrorCode, Kind
from monotape.platform.wire.messages import encode_close, encode_error
from monotape.platform.wire.requests import Subscribe, decode_request


class _Done:
    def done(self) -> bool:
        return False


class FakeSocket:
    def __init__(self) -> None:
        self.walk = FrameWalk(bytearray(UNTIL_HELLO))
        self.sent: list[bytes] = []
        self.failed: str | None = None
        self.closed = _Done()
        self.on_event: Any = None

    def start(self, on_event: Any) -> None:
        self.on_event = on_event

    def send(self, message: bytes) -> None:
        self.sent.append(message)

    def fail(self, why: str) -> None:
        self.failed = why


class FakeTally:
    def __init__(self) -> None:
        self.t = 0.0
        self.errors: list[str] = []
        self.framed_calls: list[tuple[float, bool]] = []

    def now(self) -> float:
        return self.t

    def error(self, what: str) -> None:
        self.errors.append(what)

    def framed(self, wanted_at: float, first_of_terminal: bool) -> None:
        self.framed_calls.append((wanted_at, first_of_terminal))


def _session(framed_before: bool = False) -> tuple[Session, FakeSocket, FakeTally]:
    ws, tally = FakeSocket(), FakeTally()
    s = Session(tally, cast(TerminalSocket, ws), ["XNAS:AAPL"], 1.5, [framed_before])
    assert ws.on_event == s.on_event
    return s, ws, tally


def _msg(kind: Kind, payload: bytes | None = None) -> Event:
    return Event(Op.BINARY, int(kind), payload)


def test_hello_subscribe_hydrate_frame_and_the_watch_narrowing() -> None:
    s, ws, tally = _session()
    s.on_event(_msg(Kind.HELLO))
    assert [decode_request(m) for m in ws.sent] == [Subscribe(req=1, keys=["XNAS:AAPL"])]
    w = ws.walk.watch
    assert (w[Kind.SNAPSHOT], w[Kind.FRAME], w[Kind.ERROR], w[Kind.HELLO]) == (
        KIND,
        KIND,
        WHOLE,
        IGNORE,
    )
    tally.t = 2.0
    s.on_event(_msg(Kind.SNAPSHOT))
    assert s.up_since == 2.0 and tally.framed_calls == []
    tally.t = 2.04
    s.on_event(_msg(Kind.FRAME))
    assert s.up_since == 2.0 and tally.framed_calls == [(1.5, True)]
    assert (w[Kind.SNAPSHOT], w[Kind.FRAME], w[Kind.ERROR], w[Kind.CLOSE]) == (
        IGNORE,
        IGNORE,
        WHOLE,
        WHOLE,
    )
    s.late(30.0)
    assert tally.errors == []  # framed in time


def test_a_reconnected_terminal_is_not_counted_as_a_first_frame_twice() -> None:
    s, _, tally = _session(framed_before=True)
    s.on_event(_msg(Kind.HELLO))
    s.on_event(_msg(Kind.FRAME))
    assert tally.framed_calls == [(1.5, False)]
    assert s.up_since == 0.0  # a FRAME before any snapshot hydrates too


def test_anything_before_the_hello_ends_the_session() -> None:
    s, ws, tally = _session()
    s.on_event(_msg(Kind.FRAME))
    assert tally.errors == [f"first message is kind {int(Kind.FRAME)}, not hello"]
    assert ws.failed is not None and s.hint == 0 and ws.sent == []


def test_errors_are_described_and_a_close_keeps_its_hint() -> None:
    s, _, tally = _session()
    s.on_event(_msg(Kind.HELLO))
    s.on_event(_msg(Kind.ERROR, encode_error(ErrorCode.RATE_LIMITED, "slow down")))
    s.on_event(_msg(Kind.ERROR, b"\x04\xff"))
    s.on_event(_msg(Kind.ERROR, None))  # too long to keep
    s.on_event(_msg(Kind.CLOSE, encode_close(4001, 750, "restart")))
    assert "slow down" in tally.errors[0]
    assert tally.errors[1].startswith("server error: undecodable")
    assert "too long" in tally.errors[2]
    assert s.hint == 750
    s.late(30.0)
    assert tally.errors[-1] == "no frame within 30 s"
