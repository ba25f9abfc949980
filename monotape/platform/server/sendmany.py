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

``python_send_many`` is the fallback with the same API and results (a socket object wrapped
around each fd for one ``sendmsg``); ``NATIVE`` says whether the extension was built, and
``choose(native)`` is how the server's configuration switches the native writer off (``native``
gives the writer the extension or None, ``describe`` says which for the start-up line).
"""

from __future__ import annotations

import operator
import socket
import sys
from collections.abc import Callable, Iterable, Sequence, Sized
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = [
    "MAX_CHUNKS",
    "NATIVE",
    "NATIVE_ERROR",
    "Payload",
    "SendMany",
    "Shortfall",
    "choose",
    "describe",
    "native",
    "python_send_many",
    "remainder",
    "send_many",
]

Payload: TypeAlias = "ReadableBuffer | Sequence[ReadableBuffer]"
# (index into fds, bytes sent, errno): (i, n, 0) partial, (i, 0, EAGAIN) would block, (i, 0, e).
Shortfall: TypeAlias = tuple[int, int, int]
SendMany: TypeAlias = "Callable[[Payload, Iterable[int]], list[Shortfall] | None]"

# Linux's UIO_MAXIOV: a longer iovec is EMSGSIZE from the kernel, so both refuse it up front.
MAX_CHUNKS = 1024
_INT_MAX = 2**31 - 1
# getattr: neither flag exists on macOS, where the extension does not build either; CPython
# ignores SIGPIPE there as everywhere, so a vanished peer is still an EPIPE, not a crash.
_FLAGS = socket.MSG_DONTWAIT | getattr(socket, "MSG_NOSIGNAL", 0)
# SOCK_NONBLOCK gives the wrapper a zero timeout without touching the fd's own flags: no poll
# before the send, and no change to a socket asyncio owns (a default timeout would clear it).
_KIND = socket.SOCK_STREAM | getattr(socket, "SOCK_NONBLOCK", 0)

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
