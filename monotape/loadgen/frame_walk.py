"""What a load terminal receives, walked frame header by frame header: bytes in, events out.

A load worker replays thousands of terminals in one process, and at a storm's steady state each
of them is shown a FRAME every 40 ms: 6,000 terminals are 150,000 messages a second. The
websockets client parses every message into a queue and wakes a task for it, and the workers
fell behind the server they were meant to load: beside the two-writer host they got 0.58-0.61
of their core and thousands of terminals were still closing at the deadline. The worker acts
on a handful of messages per session (the hello, the first snapshot or frame, a server ERROR
or CLOSE, the close frame), so this walks the RFC 6455 §5.2 headers, reads the first payload
byte (the ``codec.Kind``) of each message, and keeps a whole payload only for the kinds the
caller asks for; everything else is skipped without a copy. Measured (docs/benchmarks.md, "The
storm's terminals walk their frames", ``bench_load_client``): 0.83 µs a one-frame read against
2.79 for websockets' Sans-I/O parser; a terminal's whole receive at ~10 µs a message (mostly
uvloop's read and the kernel's) against 20 for websockets' client.

Sans-I/O, as websockets' own ``frames.py``: ``FrameWalk.feed(data)`` returns the events in
order; the asyncio driver (``ws_terminal.py``) answers pings and closes. What the terminal
sends still goes through websockets (its handshake, masking and close frames).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final, NamedTuple

__all__ = ["IGNORE", "KIND", "WHOLE", "Event", "FrameWalk", "Op", "ServerFrameError"]

IGNORE, KIND, WHOLE = 0, 1, 2  # what the caller wants of a message, by its first payload byte


class Op(IntEnum):
    """RFC 6455 §5.2 opcodes."""

    CONT = 0x0
    TEXT = 0x1
    BINARY = 0x2
    CLOSE = 0x8
    PING = 0x9
    PONG = 0xA


class Event(NamedTuple):
    """A data message (``op`` TEXT or BINARY: its first payload byte as ``kind``, -1 when it is
    empty; ``payload`` the whole message when its kind is watched WHOLE and fits, else None)
    or a control frame (``op`` CLOSE, PING or PONG: ``payload`` its application data)."""

    op: Op
    kind: int
    payload: bytes | None


class ServerFrameError(Exception):
    """The server broke RFC 6455 framing: the connection cannot go on (fail it, §7.1.7)."""


_MAX_CONTROL: Final = 125  # §5.5: control frames carry at most 125 bytes, never fragmented
_DATA_OPS: Final = (Op.CONT, Op.TEXT, Op.BINARY)  # by opcode: no enum lookup per message
_CONTROL_OPS: Final = {0x8: Op.CLOSE, 0x9: Op.PING, 0xA: Op.PONG}


class FrameWalk:
    """One connection's incoming frames. ``watch`` (256 bytes, one per kind: IGNORE, KIND or
    WHOLE) may be edited between calls; a message is judged by the table when its first
    payload byte arrives. A WHOLE message longer than ``max_whole`` is reported with no
    payload (bounded: a server cannot make a terminal hold more). An empty message is always
    reported (kind -1). The server never fragments, but continuation frames are followed."""

    __slots__ = ("_fin", "_head", "_keep", "_kind", "_left", "_op", "_whole", "max_whole", "watch")

    def __init__(self, watch: bytearray, max_whole: int = 64 * 1024) -> None:
        if len(watch) != 256:
            raise ValueError("watch needs one entry per kind (256)")
        self.watch = watch
        self.max_whole = max_whole
        self._head = b""  # an incomplete frame header, or an incomplete control frame
        self._left = 0  # payload bytes of the current data frame still to arrive
        self._fin = False  # the current data frame ends its message
        self._op: Op | None = None  # the data message under way (TEXT or BINARY), if any
        self._kind = -2  # its kind: -2 until its first payload byte arrives
        self._keep = False  # its payload is being kept (watched WHOLE, still within max_whole)
        self._whole = bytearray()

    def feed(self, data: bytes) -> list[Event]:
        """Walk ``data`` (the next bytes from the server); the messages and control frames
        completed or begun in it, in order. ServerFrameError if the framing is broken."""
        out: list[Event] = []
        pos = 0
        if self._left:  # the current data frame goes on
            pos = self._payload(data, 0, out)
            if pos >= len(data):
                return out
        if self._head:
            data = self._head + data[pos:]
            self._head = b""
            pos = 0
        n = len(data)
        while n - pos >= 2:
            b0 = data[pos]
            b1 = data[pos + 1]
            if b1 & 0x80:
                raise ServerFrameError("a masked server frame (RFC 6455 §5.1)")
            if b0 & 0x70:
                raise ServerFrameError("reserved bits set without an extension (§5.2)")
            ln = b1 & 0x7F
            start = pos + 2
            if ln == 126:
                start = pos + 4
                if start > n:
                    break
                ln = int.from_bytes(data[pos + 2 : start], "big")
            elif ln == 127:
                start = pos + 10
                if start > n:
                    break
                ln = int.from_bytes(data[pos + 2 : start], "big")
            op = b0 & 0x0F
            fin = bool(b0 & 0x80)
            if op >= 0x8:
                control = _CONTROL_OPS.get(op)
                if control is None or ln > _MAX_CONTROL or not fin:
                    raise ServerFrameError(f"a bad control frame (opcode {op:#x}, {ln} bytes)")
                if start + ln > n:
                    break  # keep it whole: a pong or a close needs all of it
                out.append(Event(control, -1, data[start : start + ln]))
                pos = start + ln
                continue
            if op == 0x0:
                if self._op is None:
                    raise ServerFrameError("a continuation frame outside a message (§5.4)")
            elif op in (0x1, 0x2):
                if self._op is not None:
                    raise ServerFrameError("a new message inside a fragmented one (§5.4)")
                self._op = _DATA_OPS[op]
            else:
                raise ServerFrameError(f"a reserved opcode {op:#x} (§5.2)")
            self._left = ln
            self._fin = fin
            if ln == 0:
                self._frame_done(out)
                pos = start
            else:
                pos = self._payload(data, start, out)
        if pos < n and not self._left:
            self._head = data[pos:]
        return out

    # -- the current data frame --------------------------------------------------------------
    def _payload(self, data: bytes, pos: int, out: list[Event]) -> int:
        """Take what ``data`` holds of the current frame's payload from ``pos``; the position
        after it."""
        take = min(self._left, len(data) - pos)
        if take <= 0:
            return pos
        if self._kind == -2:  # the message's first payload byte: its kind
            assert self._op is not None
            kind = self._kind = data[pos]
            w = self.watch[kind]
            self._keep = w == WHOLE
            if w == KIND:
                out.append(Event(self._op, kind, None))
        if self._keep:
            if len(self._whole) + take <= self.max_whole:
                self._whole += data[pos : pos + take]
            else:  # too long to keep: its kind only
                assert self._op is not None
                self._keep = False
                self._whole.clear()
                out.append(Event(self._op, self._kind, None))
        self._left -= take
        if not self._left:
            self._frame_done(out)
        return pos + take

    def _frame_done(self, out: list[Event]) -> None:
        if not self._fin:
            return  # a fragment: the message goes on in a continuation frame
        assert self._op is not None
        if self._kind == -2:
            out.append(Event(self._op, -1, None))
        elif self._keep:
            out.append(Event(self._op, self._kind, bytes(self._whole)))
            self._whole.clear()
        self._op = None
        self._kind = -2
        self._keep = False
