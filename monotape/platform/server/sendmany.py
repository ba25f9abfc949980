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

``send_group(payload, conns, behind, open_state)`` is the writer's frame path over connection
objects (server/sendloop.py): per connection the eligibility test of the Python loop (not
closing, protocol state ``open_state``, read from the connection's ``protocol_state`` mirror
when it has one, ``conn_id`` not in ``behind``, ``fd >= 0``, transport buffer empty and not
closing) runs in C, then one send per eligible socket, then
``frames_sent``/``bytes_sent`` are counted on every connection written or handed off (a partial
or EAGAIN: its rest goes to the transport), so only the exceptions reach Python:
``(i, 0, NOT_ELIGIBLE)`` (the ordered Python path), else as ``send_many``, indexed by connection.
Once the sends ran the report always comes back: an error counting (a connection's own Python)
is reported through ``sys.unraisablehook``, since a partial send's rest must still reach its
transport. ``group_via(send_many)`` is its pure-Python twin over any ``send_many``.

``python_send_many`` is the fallback with the same API and results (a socket object wrapped
around each fd for one ``sendmsg``); ``NATIVE`` says whether the extension was built, and
``choose(native)`` is how the server's configuration switches the native writer off (``native``
gives the writer the extension or None, ``describe`` says which for the start-up line).
"""

from __future__ import annotations

import errno
import operator
import socket
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence, Sized
from collections.abc import Set as AbstractSet
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = [
    "MAX_CHUNKS",
    "NATIVE",
    "NATIVE_ERROR",
    "NOT_ELIGIBLE",
    "Payload",
    "SendGroup",
    "SendMany",
    "Shortfall",
    "choose",
    "describe",
    "group_via",
    "native",
    "python_send_many",
    "remainder",
    "send_many",
]

Payload: TypeAlias = "ReadableBuffer | Sequence[ReadableBuffer]"
# (index into fds, bytes sent, errno): (i, n, 0) partial, (i, 0, EAGAIN) would block, (i, 0, e).
Shortfall: TypeAlias = tuple[int, int, int]
SendMany: TypeAlias = "Callable[[Payload, Iterable[int]], list[Shortfall] | None]"
# (payload, connections, the ids behind, State.OPEN) -> None | shortfalls by connection index
SendGroup: TypeAlias = (
    "Callable[[bytes, Sequence[Any], AbstractSet[int], object], list[Shortfall] | None]"
)
NOT_ELIGIBLE = -1  # a send_group shortfall's errno: not sent, the ordered Python path takes it

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

_native_send_many: SendMany | None
_native_send_group: SendGroup | None = None
try:
    from monotape.platform.server import _sendmany
except ImportError as exc:  # no compiler at install time: the fallback runs
    _native_send_many = None
    NATIVE_ERROR: str | None = str(exc)
else:
    _native_send_many = _sendmany.send_many
    _native_send_group = _sendmany.send_group
    NATIVE_ERROR = None
    assert _sendmany.MAX_CHUNKS == MAX_CHUNKS, "the C and Python limits must agree"
    assert _sendmany.NOT_ELIGIBLE == NOT_ELIGIBLE, "the C and Python markers must agree"

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


def group_via(send_many: SendMany) -> SendGroup:
    """``send_group`` for ``send_many``: the extension's own for the extension's ``send_many``,
    else its pure-Python twin over ``send_many`` (the fallback, or a test's modelled sockets)."""
    if send_many is _native_send_many and _native_send_group is not None:
        return _native_send_group

    def send_group(
        payload: bytes, conns: Sequence[Any], behind: AbstractSet[int], open_state: object
    ) -> list[Shortfall] | None:
        out: list[Shortfall] = []
        fds: list[int] = []
        which: list[int] = []
        held: list[Any] = []  # the connections sent to, whatever a setter does to conns
        for i, conn in enumerate(conns):
            transport = conn.transport
            state = getattr(conn, "protocol_state", None)  # the mirror, as the C reads it
            if (
                conn.closing is not False
                or (conn.protocol.state if state is None else state) is not open_state
                or conn.conn_id in behind
                or conn.fd < 0
                or transport.get_write_buffer_size()
                or transport.is_closing()
            ):
                out.append((i, 0, NOT_ELIGIBLE))
                continue
            fds.append(conn.fd)
            which.append(i)
            held.append(conn)
        if not fds or not payload:
            return out or None
        short = {k: (sent, err) for k, sent, err in send_many(payload, fds) or ()}
        size = len(payload)
        for k, i in enumerate(which):
            got = short.get(k)
            if got is not None:
                out.append((i, *got))
                if got[1] and got[1] not in _WOULD_BLOCK:
                    continue  # refused: counts nothing
            conn = held[k]
            try:  # bytes are on the wire: an error here must not swallow the report
                conn.frames_sent += 1
                conn.bytes_sent += size
            except Exception as exc:
                _unraisable(exc, conn)
        return out or None

    return send_group


def _unraisable(exc: BaseException, conn: object) -> None:
    """Report ``exc`` the way the extension reports an error it cannot raise."""
    args: Any = SimpleNamespace(
        exc_type=type(exc),
        exc_value=exc,
        exc_traceback=exc.__traceback__,
        err_msg="Exception ignored counting a send_group send on",
        object=conn,
    )
    try:
        sys.unraisablehook(args)
    except TypeError:  # the default hook takes only its own (private) argument type
        traceback.print_exception(exc, file=sys.stderr)


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
