"""A terminal's WebSocket as websockets drives it, with our budgets where it reads.

websockets' asyncio connection parses the terminal's frames and writes the automatic answers
itself (a pong per ping, the close frame of a failed connection), straight to the transport and
outside our outbox. Two things therefore belong at that layer and nowhere else:

- every control frame (ping or pong) is charged to the terminal's ``ControlBudget`` while it is
  parsed, so a flood is cut off in the middle of a read: the first frame over budget fails the
  connection with 1008 and no pong is written for it or for anything after it (RFC 6455 §7.1.7:
  the rest of the input is discarded). After each read the bytes queued in the transport (pongs
  included) are held against ``ControlLimits.max_queued_bytes``. Either overrun is handed to the
  server once (``on_overrun``), which tears the connection down with the overrun's reason;
- every close the connection is *failed* with (by websockets: 1002 protocol error, 1007, 1009
  message too big, 1011; by us: budget overruns, keepalive timeout, slow consumer) carries the
  wire's CLOSE message with ``reconnect_after_ms`` just before the close frame, and the same hint
  at the end of the close reason (docs/wire.md), so a terminal knows when to come back.

Nothing here runs per delivered frame: the fan-out writes pre-framed bytes to the transport and
never passes through these methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Final, cast

from websockets.asyncio.server import Server, ServerConnection
from websockets.frames import PING, PONG, CloseCode, Frame
from websockets.protocol import Protocol, State
from websockets.server import ServerProtocol

from monotape.platform.core.budget import ControlBudget, ControlLimits, Overrun
from monotape.platform.core.disconnect import Disconnect, library_close_hint_ms
from monotape.platform.wire import codec

__all__ = [
    "TerminalProtocol",
    "TerminalSocket",
    "close_reason_with_hint",
]

# websockets' own state property (its setter logs the change in debug mode)
_PROTOCOL_STATE: Final = cast(property, Protocol.__dict__["state"])
_CLOSE_REASON_MAX: Final = 123  # RFC 6455 §5.5: a control frame's payload is at most 125 bytes


def close_reason_with_hint(reason: str, reconnect_after_ms: int) -> str:
    """``"<reason>; reconnect_after_ms=N"`` within a close frame's 123 bytes (the reason is
    shortened, never the hint: the SDK reads the hint from here when no CLOSE message came)."""
    suffix = f"; reconnect_after_ms={reconnect_after_ms}"
    room = _CLOSE_REASON_MAX - len(suffix.encode())
    head = reason.encode()[:room].decode("utf-8", "ignore")
    return head + suffix


class TerminalProtocol(ServerProtocol):
    """websockets' Sans-I/O server protocol plus the control-frame budget and the CLOSE message.

    websockets' ``serve()`` builds a plain ``ServerProtocol`` itself; ``TerminalSocket`` re-classes
    it to this subclass, which adds state only through class-level defaults (same layout)."""

    budget: ControlBudget | None = None  # armed once the connection is served
    clock_ns: Callable[[], int] | None = None
    overrun: Overrun | None = None
    # The object whose ``protocol_state`` follows this protocol's state (server/connection.py:
    # the native writer reads it there, on the connection it already holds, instead of
    # reaching into this cold object and its dict for every frame).
    mirror: Any = None

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, state: State) -> None:
        # Every state change of websockets' Protocol goes through this setter (it never assigns
        # ``_state`` elsewhere), so the mirror cannot miss one.
        _PROTOCOL_STATE.__set__(self, state)
        mirror = self.mirror
        if mirror is not None:
            mirror.protocol_state = state

    def recv_frame(self, frame: Frame) -> None:
        if frame.opcode is PING or frame.opcode is PONG:
            budget, clock_ns = self.budget, self.clock_ns
            if (
                budget is not None
                and clock_ns is not None
                and self.state is State.OPEN
                and not budget.take(clock_ns())
            ):
                self.overrun = Overrun.CONTROL_FLOOD
                # Failing from here is how websockets itself ends a connection mid-parse (a
                # close frame): the parser is replaced by a discarding one, so the rest of
                # this read costs no pong and no event.
                close = Disconnect.CONTROL_FLOOD.close()
                self.fail_with_hint(close.code, close.text, close.reconnect_after_ms)
                return
        super().recv_frame(frame)

    def fail(self, code: CloseCode | int, reason: str = "") -> None:
        # reconnect_after_ms for the closes websockets starts on its own (core/disconnect.py)
        self.fail_with_hint(code, reason, library_close_hint_ms(int(code)))

    def fail_with_hint(self, code: CloseCode | int, reason: str, reconnect_after_ms: int) -> None:
        """Fail the connection (RFC 6455 §7.1.7) after the wire's CLOSE message, when the
        connection can still take one (open, and not failing because the network broke)."""
        if self.state is State.OPEN and code != CloseCode.ABNORMAL_CLOSURE:
            with contextlib.suppress(Exception):  # best effort: the close frame is what counts
                self.send_binary(codec.encode_close(int(code), reconnect_after_ms, reason))
            reason = close_reason_with_hint(reason, reconnect_after_ms)
        super().fail(code, reason)


class TerminalSocket(ServerConnection):
    """The connection class handed to ``websockets.serve(create_connection=...)``."""

    limits: ControlLimits | None = None
    on_overrun: Callable[[Overrun], None] | None = None
    # The connection told when the transport starts and stops holding bytes (track_queued).
    queued_mirror: Any = None

    def __init__(self, protocol: ServerProtocol, server: Server, **kwargs: Any) -> None:
        protocol.__class__ = TerminalProtocol
        super().__init__(protocol, server, **kwargs)

    @property
    def terminal_protocol(self) -> TerminalProtocol:
        return cast(TerminalProtocol, self.protocol)

    def arm(
        self,
        limits: ControlLimits,
        now_ns: Callable[[], int],
        on_overrun: Callable[[Overrun], None],
    ) -> None:
        """Start charging this terminal's control frames (once its handler runs)."""
        proto = self.terminal_protocol
        proto.budget = ControlBudget(limits, now_ns())
        proto.clock_ns = now_ns
        self.limits = limits
        self.on_overrun = on_overrun

    def track_queued(self, mirror: Any) -> None:
        """Tell ``mirror.set_queued`` when the transport starts holding bytes and when it has
        handed them all to the kernel: the native writer sends to the socket itself only
        while it holds none (server/sendloop.py). The write buffer's limits become 0 and 0,
        so asyncio's and uvloop's flow control call ``pause_writing`` at the first byte the
        transport keeps and ``resume_writing`` once it holds none; websockets' own waits
        (a ping's or a close's drain) therefore wait for an empty buffer, not the default
        low-water mark."""
        self.queued_mirror = mirror
        self.transport.set_write_buffer_limits(high=0, low=0)

    def connection_lost(self, exc: Exception | None) -> None:
        # The socket is gone for the transport: the entry goes now (its duplicate closes, so
        # the peer gets the end at once, not at the teardown that follows the handler), and
        # no send can follow. A transport that closed itself after a fatal error, without
        # telling the protocol yet, is the one window left: a send there meets a dead socket
        # (an errno: torn down by name) or writes whole frames the Python path would drop.
        mirror = self.queued_mirror
        if mirror is not None:
            self.queued_mirror = None
            mirror.detach()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        mirror = self.queued_mirror
        if mirror is not None:
            mirror.set_queued(True)
        if not self.paused:  # already paused under websockets' own limits before tracking
            super().pause_writing()

    def resume_writing(self) -> None:
        mirror = self.queued_mirror
        if mirror is not None:
            mirror.set_queued(False)
        if self.paused:
            super().resume_writing()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        on_overrun = self.on_overrun
        if on_overrun is None:
            return
        overrun = self.terminal_protocol.overrun
        if overrun is None:
            limits = self.limits
            assert limits is not None
            # One call per read (requests are rate-limited, so reads are rare), not per frame.
            if limits.over_queued(self.transport.get_write_buffer_size()):
                overrun = Overrun.QUEUED_BYTES
        if overrun is not None:
            self.on_overrun = None  # handed over once; the server's teardown is idempotent
            on_overrun(overrun)
