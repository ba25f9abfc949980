"""One load terminal's connection, as its frame walk reports it (``worker.py`` runs them).

The hello comes first (anything else is an error and ends the session), then the terminal
subscribes to its watchlist; the first SNAPSHOT or FRAME means it is hydrated (receiving from
then on), the first FRAME is timed; every server ERROR is counted and every CLOSE message's
``reconnect_after_ms`` kept for the reconnect. The watch table narrows as the session goes:
every kind until the hello, then snapshot, frame, ERROR and CLOSE, then ERROR and CLOSE only,
so a streaming terminal's frames are skipped by the walk without reaching Python code here.
"""

from __future__ import annotations

import contextlib
from typing import Final, Protocol

from monotape.loadgen.frame_walk import IGNORE, KIND, WHOLE, Event
from monotape.loadgen.ws_terminal import TerminalSocket
from monotape.platform.wire import codec
from monotape.platform.wire.requests import Subscribe, encode_request

__all__ = ["UNTIL_HELLO", "Session", "Tally"]

_HELLO, _SNAPSHOT, _FRAME, _ERROR, _CLOSE = (
    codec.Kind.HELLO,
    codec.Kind.SNAPSHOT,
    codec.Kind.FRAME,
    codec.Kind.ERROR,
    codec.Kind.CLOSE,
)


class Tally(Protocol):
    """What a session reports to its worker."""

    def now(self) -> float: ...
    def error(self, what: str) -> None: ...
    def framed(self, wanted_at: float, first_of_terminal: bool) -> None: ...


class Session:
    """One connection's messages, as the walk reports them: the hello (then the subscribe),
    the first snapshot or frame (hydrated), the first frame, and every ERROR and CLOSE."""

    __slots__ = (
        "framed",
        "got_hello",
        "hint",
        "session_framed",
        "up_since",
        "w",
        "wanted_at",
        "watchlist",
        "ws",
    )

    def __init__(
        self,
        w: Tally,
        ws: TerminalSocket,
        watchlist: list[str],
        wanted_at: float,
        session_framed: list[bool],
    ) -> None:
        self.w = w
        self.ws = ws
        self.watchlist = watchlist
        self.wanted_at = wanted_at
        self.session_framed = session_framed
        self.got_hello = self.framed = False
        self.up_since: float | None = None
        self.hint: int | None = None  # a CLOSE message's reconnect hint, or 0 if ended here
        ws.start(self.on_event)

    def on_event(self, ev: Event) -> None:
        w = self.w
        kind = ev.kind
        if not self.got_hello:
            if kind != _HELLO:
                w.error(f"first message is kind {kind}, not hello")
                self.hint = 0
                self.ws.fail("no hello")
                return
            self.got_hello = True
            self.ws.walk.watch[:] = _HYDRATING
            self.ws.send(encode_request(Subscribe(req=1, keys=self.watchlist)))
            return
        if self.up_since is None and kind in (_SNAPSHOT, _FRAME):
            self.up_since = w.now()  # hydrated: the subscription is live
        if kind == _FRAME and not self.framed:
            self.framed = True
            self.ws.walk.watch[:] = _STREAMING  # from here on only ERROR and CLOSE are read
            first = not self.session_framed[0]
            self.session_framed[0] = True
            w.framed(self.wanted_at, first)
        elif kind == _ERROR:
            w.error(f"server error: {_describe(ev.payload)}")
        elif kind == _CLOSE and ev.payload is not None:
            self.hint = _close_hint(ev.payload)

    def late(self, after_s: float) -> None:
        """The first-frame timer: an error if the session has not been shown a FRAME."""
        if not self.framed and not self.ws.closed.done():
            self.w.error(f"no frame within {after_s:g} s")


def _watch(kinds: dict[int, int]) -> bytes:
    table = bytearray([IGNORE]) * 256
    for k, w in kinds.items():
        table[k] = w
    return bytes(table)


UNTIL_HELLO: Final = bytes([KIND]) * 256  # the first message, whatever its kind
_HYDRATING: Final = _watch({_SNAPSHOT: KIND, _FRAME: KIND, _ERROR: WHOLE, _CLOSE: WHOLE})
_STREAMING: Final = _watch({_ERROR: WHOLE, _CLOSE: WHOLE})


def _describe(data: bytes | None) -> str:
    if data is None:
        return "not read (the message was too long to keep)"
    try:
        msg = codec.decode_message(data)
    except codec.CodecError as exc:
        return f"undecodable: {exc}"
    return f"{msg!r}"


def _close_hint(data: bytes) -> int | None:
    with contextlib.suppress(codec.CodecError):
        msg = codec.decode_message(data)
        if isinstance(msg, codec.Close):
            return msg.reconnect_after_ms
    return None
