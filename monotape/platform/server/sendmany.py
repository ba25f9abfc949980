"""One payload to many sockets: the native send loop and its pure-Python twin (issue 13).

A frame's signature group is one pre-framed payload for hundreds of terminals. The per-terminal
Python work around ``transport.write`` (loop, attribute reads, transport call, bookkeeping) is
what a delivered frame costs once payloads are shared: 10.0-10.9 µs per frame for the bare
Python floor against 8.0-8.8 µs for a prototype of this C loop in the same bench_fanout runs.
So the loop moves into ``_sendmany.c``: one call per payload, GIL released, one non-blocking
``send``/``sendmsg`` per socket with ``MSG_DONTWAIT | MSG_NOSIGNAL`` (a vanished terminal is an
errno, never a SIGPIPE).

``send_many(payload, fds)`` takes a bytes-like payload, or a sequence of them sent as one
iovec (a header and record chunks need not be joined), and the sockets' file descriptors. It
returns ``None`` when every socket took every byte (the common case costs the caller nothing),
else a list, in fd order, of ``(index, sent, errno)`` for the sockets that fell short:

- ``(i, n, 0)``: partial, the first ``n`` bytes are queued; ``remainder(payload, n)`` is the rest,
  and it must go out before anything else is written to that socket;
- ``(i, 0, EAGAIN)``: would block, nothing was queued;
- ``(i, 0, errno)``: the send failed (``EPIPE``, ``ECONNRESET``, ``EBADF``...): tear it down.

Every descriptor is validated (``TypeError``, ``ValueError`` for a negative one,
``OverflowError`` past a C int) before anything is sent; an empty payload sends nothing.

``SendTable`` is what the writer's frame path runs on (server/sendloop.py): its terminals as C
entries, each the table's own duplicate of the socket (so the fd number stays that terminal's
while the entry lives, whatever its transport does), a generation, its frame and byte counts,
and the reasons it may not be sent to behind its transport's back, as flag bits that the
connection keeps on every change (server/connection.py): ``FLAG_CLOSING``, ``FLAG_NOT_OPEN``,
``FLAG_BEHIND``, ``FLAG_QUEUED`` (its transport holds bytes). ``add(fd, flags)`` returns a
handle (generation << 32 | slot), ``remove(handle)`` the entry's counts; ``send(payload,
handles)`` takes a payload group as an ``array('q')`` of handles and sends to every entry whose
flags are clear, counting frames and bytes there (a partial or EAGAIN too: its rest goes to the
transport), so a frame's pass reads no Python object: ``(i, 0, NOT_ELIGIBLE)`` for a flagged or
removed handle, else as ``send_many``. ``PySendTable`` is its pure-Python twin over any
``send_many``; ``new_table(send_many)`` picks the one that matches.

``python_send_many`` is the fallback with the same API and results (a socket object wrapped
around each fd for one ``sendmsg``); ``NATIVE`` says whether the extension was built, and
``choose(native)`` is how the server's configuration switches the native writer off (``native``
gives the writer the extension or None, ``describe`` says which for the start-up line).
"""

from __future__ import annotations

import errno
import fcntl
import operator
import os
import socket
import sys
from array import array
from collections.abc import Callable, Iterable, Sequence, Sized
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = [
    "FLAG_BEHIND",
    "FLAG_CLOSING",
    "FLAG_NOT_OPEN",
    "FLAG_QUEUED",
    "MAX_CHUNKS",
    "NATIVE",
    "NATIVE_ERROR",
    "NOT_ELIGIBLE",
    "Payload",
    "PySendTable",
    "SendMany",
    "SendTable",
    "Shortfall",
    "choose",
    "describe",
    "native",
    "new_table",
    "python_send_many",
    "remainder",
    "send_many",
]

Payload: TypeAlias = "ReadableBuffer | Sequence[ReadableBuffer]"
# (index into fds, bytes sent, errno): (i, n, 0) partial, (i, 0, EAGAIN) would block, (i, 0, e).
Shortfall: TypeAlias = tuple[int, int, int]
SendMany: TypeAlias = "Callable[[Payload, Iterable[int]], list[Shortfall] | None]"
NOT_ELIGIBLE = -1  # a SendTable.send shortfall's errno: not sent, the ordered Python path takes it
# Why a table entry may not be sent to behind its transport's back (all clear: it may).
FLAG_CLOSING = 1  # the server is closing it (Connection.closing)
FLAG_NOT_OPEN = 2  # its WebSocket state is not OPEN
FLAG_BEHIND = 4  # it has frames in its ring, or a gap (Terminals.behind)
FLAG_QUEUED = 8  # its transport holds bytes (the protocol's pause_writing until resume_writing)
_ALL_FLAGS = FLAG_CLOSING | FLAG_NOT_OPEN | FLAG_BEHIND | FLAG_QUEUED

# Linux's UIO_MAXIOV: a longer iovec is EMSGSIZE from the kernel, so both refuse it up front.
MAX_CHUNKS = 1024
_INT_MAX = 2**31 - 1
# getattr: neither flag exists on macOS, where the extension does not build either; CPython
# ignores SIGPIPE there as everywhere, so a vanished peer is still an EPIPE, not a crash.
_FLAGS = socket.MSG_DONTWAIT | getattr(socket, "MSG_NOSIGNAL", 0)
# SOCK_NONBLOCK gives the wrapper a zero timeout without touching the fd's own flags: no poll
# before the send, and no change to a socket asyncio owns (a default timeout would clear it).
_WOULD_BLOCK = frozenset({errno.EAGAIN, errno.EWOULDBLOCK})
_KIND = socket.SOCK_STREAM | getattr(socket, "SOCK_NONBLOCK", 0)


class SendTable(Protocol):
    """The writer's terminals as entries (the extension's ``SendTable``, or ``PySendTable``)."""

    def __len__(self) -> int: ...
    def add(self, fd: int, flags: int, /) -> int: ...
    def remove(self, handle: int, /) -> tuple[int, int]: ...
    def set(self, handle: int, bits: int, on: bool, /) -> bool: ...
    def counts(self, handle: int, /) -> tuple[int, int]: ...
    def flags(self, handle: int, /) -> int: ...
    def send(self, payload: bytes, handles: array[int], /) -> list[Shortfall] | None: ...


_native_send_many: SendMany | None
try:
    from monotape.platform.server import _sendmany
except ImportError as exc:  # no compiler at install time: the fallback runs
    _native_send_many = None
    NATIVE_ERROR: str | None = str(exc)
else:
    _native_send_many = _sendmany.send_many
    NATIVE_ERROR = None
    assert _sendmany.MAX_CHUNKS == MAX_CHUNKS, "the C and Python limits must agree"
    assert _sendmany.NOT_ELIGIBLE == NOT_ELIGIBLE, "the C and Python markers must agree"
    assert (
        _sendmany.FLAG_CLOSING,
        _sendmany.FLAG_NOT_OPEN,
        _sendmany.FLAG_BEHIND,
        _sendmany.FLAG_QUEUED,
    ) == (FLAG_CLOSING, FLAG_NOT_OPEN, FLAG_BEHIND, FLAG_QUEUED), "the flags must agree"

NATIVE: bool = _native_send_many is not None


def _hold(payload: Payload) -> list[memoryview]:
    """The payload as contiguous views, refused the way the extension refuses it."""
    whole: Any = payload  # one buffer or a sequence of them: known only by asking for a buffer
    try:
        views = [memoryview(whole)]
    except TypeError:
        try:
            chunks = list(whole)
        except TypeError as exc:
            raise TypeError("payload must be a bytes-like object or a sequence of them") from exc
        if len(chunks) > MAX_CHUNKS:
            raise ValueError(
                f"payload has {len(chunks)} chunks, at most {MAX_CHUNKS} are allowed"
            ) from None
        views = [memoryview(chunk) for chunk in chunks]
    for view in views:
        if not view.c_contiguous:
            raise BufferError("memoryview: underlying buffer is not C-contiguous")
    return views


def _checked_fds(fds: Iterable[int]) -> list[int]:
    """Every descriptor as an int, refused in order before any send (as the extension does)."""
    out = [operator.index(fd) for fd in fds]
    if isinstance(fds, Sized) and len(fds) != len(out):  # an __index__ that edits the list
        raise RuntimeError("fds changed size while being read")
    if out and (min(out) < 0 or max(out) > _INT_MAX):
        for fd in out:
            if fd < 0:
                raise ValueError("negative file descriptor")
            if fd > _INT_MAX:
                raise OverflowError("file descriptor out of range")
    return out


def python_send_many(payload: Payload, fds: Iterable[int], /) -> list[Shortfall] | None:
    """The pure-Python ``send_many``: same arguments, same checks, same results."""
    views = _hold(payload)
    total = sum(view.nbytes for view in views)
    if total > sys.maxsize:
        raise OverflowError("payload larger than PY_SSIZE_T_MAX bytes")
    checked = _checked_fds(fds)
    if total == 0:
        return None
    single = views[0] if len(views) == 1 else None
    shortfalls: list[Shortfall] | None = None
    for index, fd in enumerate(checked):
        try:
            # Wrapping probes the fd (EBADF, ENOTSOCK surface here); detach() below leaves it
            # open: the connection owns it, not this loop.
            sock = socket.socket(socket.AF_UNIX, _KIND, 0, fd)
        except OSError as exc:
            sent, err = 0, exc.errno or 0
        else:
            try:
                # PEP 475: EINTR is retried inside, as the C loop retries it.
                if single is not None:
                    sent, err = sock.send(single, _FLAGS), 0
                else:
                    sent, err = sock.sendmsg(views, (), _FLAGS), 0
            except OSError as exc:
                sent, err = 0, exc.errno or 0
            finally:
                sock.detach()
        if sent != total:
            if shortfalls is None:
                shortfalls = []
            shortfalls.append((index, sent, err))
    return shortfalls


def remainder(payload: Payload, sent: int) -> list[memoryview]:
    """What a partial send left: the payload's bytes after the first ``sent``, as views (no
    copy), ready for ``send_many`` again or ``b"".join`` for a transport. Empty when none."""
    if sent < 0:
        raise ValueError("sent must be >= 0")
    rest: list[memoryview] = []
    for view in _hold(payload):
        flat = view.cast("B")
        if sent >= flat.nbytes:
            sent -= flat.nbytes
            continue
        rest.append(flat[sent:])
        sent = 0
    return rest


class PySendTable:
    """The pure-Python ``SendTable``: the same entries, handles, flags, counts and results,
    sending through ``send_many`` (the fallback, or a test's modelled sockets). ``own_fds``:
    each entry holds a duplicate of its fd, as the extension's does (False for a model whose
    descriptors are not the kernel's)."""

    def __init__(self, send_many: SendMany = python_send_many, *, own_fds: bool = True) -> None:
        self._send_many = send_many
        self._own = own_fds
        self._fd: list[int] = []  # -1: a free slot
        self._gen: list[int] = []
        self._flags: list[int] = []
        self._frames: list[int] = []
        self._bytes: list[int] = []
        self._free: list[int] = []
        self._live = 0
        self._sending = False

    def __len__(self) -> int:
        return self._live

    def __del__(self) -> None:
        if getattr(self, "_own", False):
            for fd in self._fd:
                if fd >= 0:
                    os.close(fd)

    def _slot(self, handle: int) -> int:
        """The live slot of ``handle``, or -1."""
        slot, gen = handle & 0xFFFFFFFF, handle >> 32
        if handle < 0 or slot >= len(self._fd) or self._fd[slot] < 0 or self._gen[slot] != gen:
            return -1
        return slot

    def _live_slot(self, handle: int) -> int:
        slot = self._slot(operator.index(handle))
        if slot < 0:
            raise KeyError(f"no terminal with handle {handle}")
        return slot

    def _not_busy(self) -> None:
        if self._sending:
            raise RuntimeError("a send is in progress on this table")

    def add(self, fd: int, flags: int, /) -> int:
        self._not_busy()
        fd, flags = operator.index(fd), operator.index(flags)
        if fd < 0 or fd > _INT_MAX:
            raise ValueError("file descriptor out of range")
        if flags < 0 or flags & ~_ALL_FLAGS:
            raise ValueError("unknown flag bits")
        own = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 0) if self._own else fd
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self._fd)
            for column in (self._fd, self._flags, self._frames, self._bytes):
                column.append(0)
            self._gen.append(1)
        self._fd[slot], self._flags[slot] = own, flags
        self._frames[slot] = self._bytes[slot] = 0
        self._live += 1
        return self._gen[slot] << 32 | slot

    def remove(self, handle: int, /) -> tuple[int, int]:
        self._not_busy()
        slot = self._live_slot(handle)
        if self._own:
            os.close(self._fd[slot])
        self._fd[slot] = -1
        gen = self._gen[slot]
        self._gen[slot] = 1 if gen == 0x7FFFFFFF else gen + 1
        self._free.append(slot)
        self._live -= 1
        return self._frames[slot], self._bytes[slot]

    def set(self, handle: int, bits: int, on: bool, /) -> bool:
        bits = operator.index(bits)
        if bits < 0 or bits & ~_ALL_FLAGS:
            raise ValueError("unknown flag bits")
        slot = self._slot(operator.index(handle))
        if slot < 0:
            return False
        self._flags[slot] = self._flags[slot] | bits if on else self._flags[slot] & ~bits
        return True

    def counts(self, handle: int, /) -> tuple[int, int]:
        slot = self._live_slot(handle)
        return self._frames[slot], self._bytes[slot]

    def flags(self, handle: int, /) -> int:
        return self._flags[self._live_slot(handle)]

    def send(self, payload: bytes, handles: array[int], /) -> list[Shortfall] | None:
        self._not_busy()
        size = memoryview(payload).nbytes
        try:
            view = memoryview(handles)
        except TypeError:
            view = None
        if (
            view is None
            or view.ndim != 1
            or view.itemsize != 8
            or view.format.lstrip("@=") not in ("q", "l")
        ):
            raise TypeError("handles must be an array('q')")
        if not len(view) or not size:
            return None
        out: list[Shortfall] = []
        fds: list[int] = []
        slots: list[int] = []
        which: list[int] = []
        for i, handle in enumerate(handles):
            slot = self._slot(handle)
            if slot < 0 or self._flags[slot]:
                out.append((i, 0, NOT_ELIGIBLE))
                continue
            fds.append(self._fd[slot])
            slots.append(slot)
            which.append(i)
        if not fds:
            return out or None
        self._sending = True
        try:
            short = {k: (sent, err) for k, sent, err in self._send_many(payload, fds) or ()}
        finally:
            self._sending = False
        for k, slot in enumerate(slots):
            got = short.get(k)
            if got is not None:
                out.append((which[k], *got))
                if got[1] and got[1] not in _WOULD_BLOCK:
                    continue  # refused: counts nothing
            self._frames[slot] += 1
            self._bytes[slot] += size
        return out or None


def new_table(send_many: SendMany) -> SendTable:
    """The table for ``send_many``: the extension's for the extension's, else the twin."""
    if send_many is _native_send_many:
        return cast(SendTable, _sendmany.SendTable())
    return PySendTable(send_many)


def choose(native: bool) -> SendMany:
    """The implementation to run: the extension when ``native`` is asked for and it was built,
    else the fallback. The server passes its configured native-writer switch here."""
    if native and _native_send_many is not None:
        return _native_send_many
    return python_send_many


def native(enabled: bool) -> SendMany | None:
    """The extension's ``send_many`` when ``enabled`` and built, else None: what the server's
    writer runs its native path with (None: the transport path, byte for byte today's)."""
    return _native_send_many if enabled else None


def describe(native: bool) -> str:
    """Which implementation ``choose(native)`` runs, and why, for the start-up line."""
    if not native:
        return "python (native writer switched off)"
    if _native_send_many is None:
        return f"python (native extension not built: {NATIVE_ERROR})"
    return "native"


send_many: SendMany = choose(True)
