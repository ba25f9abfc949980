"""send_many: the native loop and its pure-Python twin deliver the same bytes and report the same
shortfalls, on real sockets (Unix socketpairs and TCP on 127.0.0.1).

Every test runs against both implementations. ``make native-sanitize`` runs this module against
an AddressSanitizer + UndefinedBehaviorSanitizer build named by SENDMANY_SANITIZED_BUILD (a path
to the instrumented ``_sendmany`` shared object; a test-tool hook, not a setting of the node).
"""

from __future__ import annotations

import array
import collections
import errno
import itertools
import os
import random
import signal
import socket
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monotape.platform.server import sendmany
from monotape.platform.server.sendmany import (
    MAX_CHUNKS,
    Payload,
    SendMany,
    python_send_many,
    remainder,
)
from tests.sanitized import load_sanitized

IN_CI = os.environ.get("CI", "").lower() == "true"
SANITIZED_BUILD = os.environ.get("SENDMANY_SANITIZED_BUILD", "")
SETTLE_S = 10.0  # generous: both cores may be busy; only an outright hang reaches it
VANISHED = {errno.EPIPE, errno.ECONNRESET}


def _native() -> SendMany | None:
    if SANITIZED_BUILD:
        fn: SendMany = load_sanitized("sanitized._sendmany", SANITIZED_BUILD).send_many
        return fn
    return sendmany.choose(True) if sendmany.NATIVE else None


NATIVE_IMPL = _native()
IMPLS: dict[str, SendMany] = {"python": python_send_many}
if NATIVE_IMPL is not None:
    IMPLS["native"] = NATIVE_IMPL


@pytest.fixture(params=["native", "python"])
def impl(request: pytest.FixtureRequest) -> SendMany:
    name: str = request.param
    if name not in IMPLS:
        if IN_CI:  # CI must compare native with Python, never Python with Python
            pytest.fail(f"native extension not built: {sendmany.NATIVE_ERROR}")
        pytest.skip(f"native extension not built: {sendmany.NATIVE_ERROR}")
    return IMPLS[name]


# -- sockets ---------------------------------------------------------------------------------


@dataclass
class Pair:
    """A sending end (the server's side) and the terminal's end."""

    send: socket.socket
    recv: socket.socket
    filler: int = 0  # bytes queued before the test's payload (a full buffer)

    @property
    def fd(self) -> int:
        return self.send.fileno()


@dataclass
class Pairs:
    """Socket pairs made for one test, all closed at its end."""

    stack: ExitStack
    made: list[Pair] = field(default_factory=list)

    def _own(self, send: socket.socket, recv: socket.socket) -> Pair:
        self.stack.enter_context(send)
        self.stack.enter_context(recv)
        pair = Pair(send, recv)
        self.made.append(pair)
        return pair

    def unix(self, *, tiny: bool = False) -> Pair:
        send, recv = socket.socketpair()
        if tiny:  # the kernel's floor (4,608 bytes): a payload of a few KB cannot fit whole
            send.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
            recv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        return self._own(send, recv)

    def tcp(self, *, tiny: bool = False) -> Pair:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            recv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if tiny:  # before connect: the window is negotiated from it
                recv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
            recv.connect(listener.getsockname())
            send, _ = listener.accept()
        send.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio sets it
        send.setblocking(False)  # as the server's sockets are
        if tiny:
            send.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
        return self._own(send, recv)

    def make(self, kind: str, *, tiny: bool = False) -> Pair:
        return self.tcp(tiny=tiny) if kind == "tcp" else self.unix(tiny=tiny)

    def full(self, kind: str = "unix") -> Pair:
        """A terminal that stopped reading with its buffers full: the next send would block."""
        pair = self.make(kind, tiny=True)
        block = b"\xee" * 65536
        # TCP frees sent memory as the peer's acks arrive, a moment after the send: full means
        # still full after a few pauses.
        refused = 0
        while refused < (1 if kind == "unix" else 4):
            try:
                pair.filler += pair.send.send(block, socket.MSG_DONTWAIT)
                refused = 0
            except BlockingIOError:
                refused += 1
                if kind == "tcp":
                    time.sleep(0.02)
        return pair


@pytest.fixture
def pairs() -> Iterator[Pairs]:
    with ExitStack() as stack:
        yield Pairs(stack)


def read_available(sock: socket.socket) -> bytes:
    """Everything queued for ``sock`` right now, without waiting."""
    got = bytearray()
    while True:
        try:
            data = sock.recv(1 << 20, socket.MSG_DONTWAIT)
        except (BlockingIOError, ConnectionResetError):
            return bytes(got)
        if not data:
            return bytes(got)
        got += data


def read_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock`` (TCP on loopback may hand them over in steps)."""
    got = bytearray()
    deadline = time.monotonic() + SETTLE_S
    while len(got) < n and time.monotonic() < deadline:
        got += read_available(sock)
        if len(got) < n:
            time.sleep(0.001)
    assert len(got) == n, f"read {len(got)} of {n} bytes"
    return bytes(got)


def split(payload: bytes, count: int, rng: random.Random) -> list[bytes]:
    """``payload`` cut into ``count`` chunks at random points (empty chunks included)."""
    cuts = sorted(rng.randint(0, len(payload)) for _ in range(count - 1))
    bounds = [0, *cuts, len(payload)]
    return [payload[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.fixture
def sigpipes() -> Iterator[list[int]]:
    """Counts SIGPIPEs delivered to this process while a test runs (CPython ignores SIGPIPE by
    default, which would hide a send without MSG_NOSIGNAL; a handler makes it visible)."""
    caught: list[int] = []

    def count(signum: int, _frame: FrameType | None) -> None:
        caught.append(signum)

    previous = signal.signal(signal.SIGPIPE, count)
    try:
        yield caught
    finally:
        signal.signal(signal.SIGPIPE, previous)


# -- byte identity ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_every_socket_gets_the_identical_bytes(impl: SendMany, pairs: Pairs, kind: str) -> None:
    rng = random.Random(13)
    group = [pairs.make(kind) for _ in range(48 if kind == "unix" else 24)]
    fds = [p.fd for p in group]
    sent = bytearray()
    for size in (1, 2, 7, 300, 1_400, 4_096, 20_000, 60_000):
        for count in (1, 2, 5, 9, 64):
            payload = rng.randbytes(size)
            assert impl(split(payload, count, rng) if count > 1 else payload, fds) is None
            sent += payload
            for p in group:  # read as we go: a terminal that keeps up
                p.filler += len(read_exactly(p.recv, size))
    assert all(p.filler == len(sent) for p in group)


def test_every_bytes_like_kind_counts_its_bytes_not_its_items(impl: SendMany, pairs: Pairs) -> None:
    """bytes, bytearray, memoryview slices and arrays of wider items, in one iovec."""
    p = pairs.unix()
    wide = array.array("H", [1, 2, 0xFFFF])  # 3 items, 6 bytes
    chunks: Payload = [b"head", bytearray(b"-ba-"), memoryview(b"xxmvxx")[2:4], wide]
    assert impl(chunks, [p.fd, p.fd]) is None
    expected = b"head-ba-mv" + wide.tobytes()
    assert read_exactly(p.recv, 2 * len(expected)) == expected * 2
    assert impl(collections.deque([b"any ", b"sequence"]), [p.fd]) is None
    assert read_exactly(p.recv, 12) == b"any sequence"


def test_the_longest_iovec_is_sent_and_a_longer_one_refused(impl: SendMany, pairs: Pairs) -> None:
    p = pairs.unix()
    chunks = [struct.pack("!H", i) for i in range(MAX_CHUNKS)]
    assert impl(chunks, [p.fd]) is None
    assert read_exactly(p.recv, 2 * MAX_CHUNKS) == b"".join(chunks)
    with pytest.raises(ValueError, match="chunks"):
        impl([*chunks, b"!"], [p.fd])
    assert read_available(p.recv) == b""


def test_an_empty_payload_or_fd_list_sends_nothing(impl: SendMany, pairs: Pairs) -> None:
    p = pairs.unix()
    assert impl(b"", [p.fd]) is None
    assert impl([], [p.fd]) is None
    assert impl([b"", bytearray()], [p.fd]) is None
    assert impl(b"frame", []) is None
    assert read_available(p.recv) == b""


# -- would block, partial sends, the remainder -------------------------------------------------


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_a_full_terminal_would_block_and_the_others_get_the_frame(
    impl: SendMany, pairs: Pairs, kind: str
) -> None:
    healthy_a, full, healthy_b = pairs.make(kind), pairs.full(kind), pairs.make(kind)
    frame = b"F" * 900
    result = impl(frame, [healthy_a.fd, full.fd, healthy_b.fd])
    assert result == [(1, 0, errno.EAGAIN)]
    assert read_exactly(healthy_a.recv, 900) == frame
    assert read_exactly(healthy_b.recv, 900) == frame


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_a_partial_send_reports_the_exact_bytes_and_the_remainder_completes_the_stream(
    impl: SendMany, pairs: Pairs, kind: str
) -> None:
    """A terminal with tiny buffers that stops reading: the first send queues part of the
    payload, the next would block, and once it reads again the remainder goes out in pieces,
    never a byte twice or out of order."""
    rng = random.Random(7)
    p = pairs.make(kind, tiny=True)
    payload = rng.randbytes(300_000)
    chunks = split(payload, 6, rng)
    first = impl(chunks, [p.fd])
    assert first is not None and len(first) == 1
    index, offset, err = first[0]
    assert (index, err) == (0, 0) and 0 < offset < len(payload)
    second = impl(remainder(chunks, offset), [p.fd])
    if kind == "unix":  # nothing more fits until the terminal reads
        assert second == [(0, 0, errno.EAGAIN)]
    else:  # TCP frees what the peer acked a moment after the send returned
        assert second is not None and second[0][2] in (0, errno.EAGAIN)
        offset += second[0][1]
    got = bytearray()
    partials = 1
    deadline = time.monotonic() + SETTLE_S
    while offset < len(payload):
        assert time.monotonic() < deadline, f"stuck at {offset} of {len(payload)} bytes"
        got += read_available(p.recv)
        result = impl(remainder(chunks, offset), [p.fd])
        if result is None:
            offset = len(payload)
            continue
        [(index, sent, err)] = result
        assert index == 0 and err in (0, errno.EAGAIN)
        assert (sent > 0) == (err == 0)
        if err == 0:
            partials += 1
        offset += sent
    got += read_exactly(p.recv, len(payload) - len(got))
    assert bytes(got) == payload
    assert partials >= 2


def test_remainder_is_the_exact_tail_of_the_iovec() -> None:
    chunks: Payload = [b"ab", b"", bytearray(b"cde"), memoryview(b"f"), array.array("H", [0x4142])]
    whole = b"abcdef" + array.array("H", [0x4142]).tobytes()
    for sent in range(len(whole) + 3):
        assert b"".join(remainder(chunks, sent)) == whole[sent:]
    assert remainder(chunks, len(whole)) == []
    assert b"".join(remainder(b"frame", 2)) == b"ame"
    with pytest.raises(ValueError):
        remainder(b"frame", -1)


# -- peers that vanish -----------------------------------------------------------------------


def test_the_sigpipe_counter_sees_a_write_without_msg_nosignal(
    pairs: Pairs, sigpipes: list[int]
) -> None:
    """The detector the vanishing-peer tests rely on can fail: a plain write to a socket whose
    peer closed raises SIGPIPE, and the handler counts it."""
    p = pairs.unix()
    p.recv.close()
    with pytest.raises(BrokenPipeError):
        os.write(p.fd, b"x")
    assert sigpipes == [signal.SIGPIPE]


def test_vanished_peers_give_an_errno_and_no_sigpipe_and_the_others_are_unaffected(
    impl: SendMany, pairs: Pairs, sigpipes: list[int]
) -> None:
    healthy = [pairs.unix(), pairs.tcp(), pairs.unix(), pairs.tcp()]
    closed_unix, peer_shut_unix, shut_tcp, rst_tcp, closed_tcp = (
        pairs.unix(),
        pairs.unix(),
        pairs.tcp(),
        pairs.tcp(),
        pairs.tcp(),
    )
    closed_unix.recv.close()
    peer_shut_unix.recv.shutdown(socket.SHUT_RD)
    shut_tcp.send.shutdown(socket.SHUT_WR)  # our own side shut down for writing
    rst_tcp.recv.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    rst_tcp.recv.close()  # linger 0: an RST instead of a FIN
    closed_tcp.recv.close()
    vanished = [closed_unix, peer_shut_unix, shut_tcp, rst_tcp, closed_tcp]
    order = [healthy[0], *vanished[:3], healthy[1], healthy[2], *vanished[3:], healthy[3]]
    fds = [p.fd for p in order]
    frame = b"\x82\x7e\x01\x00" + bytes(range(256))
    errors: dict[int, int] = {}
    calls = 0
    deadline = time.monotonic() + SETTLE_S
    # A TCP peer that closed may accept one more send (its RST answers it); the next fails.
    while len(errors) < len(vanished):
        assert time.monotonic() < deadline, f"only {errors} reported an error"
        result = impl(frame, fds) or []
        calls += 1
        for index, sent, err in result:
            assert order[index] in vanished, f"a healthy terminal fell short: {result}"
            assert sent == 0 and err in VANISHED, result
            errors.setdefault(index, err)
        for p in healthy:
            assert read_exactly(p.recv, len(frame)) == frame
    # Unix sockets and our own shutdown fail at once, and always with EPIPE.
    assert {i: e for i, e in errors.items() if i in (1, 2, 3)} == dict.fromkeys(
        (1, 2, 3), errno.EPIPE
    )
    assert sigpipes == []
    assert calls >= 1


def test_a_peer_that_resets_in_the_middle_of_a_payload(
    impl: SendMany, pairs: Pairs, sigpipes: list[int]
) -> None:
    p, other = pairs.tcp(tiny=True), pairs.tcp()
    payload = random.Random(3).randbytes(200_000)
    first = impl(payload, [p.fd])
    assert first is not None and first[0][1] > 0 and first[0][2] == 0
    sent = first[0][1]
    p.recv.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    p.recv.close()
    deadline = time.monotonic() + SETTLE_S
    while True:
        assert time.monotonic() < deadline
        result = impl(remainder(payload, sent), [other.fd, p.fd])
        assert read_exactly(other.recv, len(payload) - sent) == payload[sent:]
        assert result is not None and [i for i, _, _ in result] == [1]
        [(_, more, err)] = result
        if err in VANISHED:
            break
        assert err in (0, errno.EAGAIN)  # the reset may not have landed yet
        sent += more
    assert sigpipes == []


# -- arguments ---------------------------------------------------------------------------------


BAD_CALLS: list[tuple[str, object, object, type[Exception]]] = [
    ("str payload", "text", [0], TypeError),
    ("int payload", 3, [0], TypeError),
    ("str chunk", [b"x", "y"], [0], TypeError),
    ("int chunk", [b"x", 1], [0], TypeError),
    ("strided chunk", memoryview(b"abcdef")[::2], [0], BufferError),
    ("too many chunks", [b"x"] * (MAX_CHUNKS + 1), [0], ValueError),
    ("fds not iterable", b"x", 5, TypeError),
    ("float fd", b"x", [1.5], TypeError),
    ("str fd", b"x", ["3"], TypeError),
    ("negative fd", b"x", [-1], ValueError),
    ("fd past a C int", b"x", [2**31], OverflowError),
    ("negative fd, empty payload", b"", [-1], ValueError),
]


@pytest.mark.parametrize(
    ("payload", "fds", "error"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS]
)
def test_bad_arguments_raise_the_same_error_and_send_to_nobody(
    impl: SendMany, pairs: Pairs, payload: Any, fds: Any, error: type[Exception]
) -> None:
    p = pairs.unix()
    with pytest.raises(error):  # a good descriptor first: it must get nothing either
        impl(payload, [p.fd, *fds] if isinstance(fds, list) else fds)
    assert read_available(p.recv) == b""


def test_a_descriptor_whose_index_edits_the_list_is_refused(impl: SendMany, pairs: Pairs) -> None:
    """No crash and no send when reading a descriptor changes the list being read."""
    p = pairs.unix()
    fds: list[Any] = []

    class Shrinking:
        def __index__(self) -> int:
            fds.clear()
            return p.fd

    fds.extend([p.fd, Shrinking(), p.fd])
    with pytest.raises(RuntimeError, match="changed size"):
        impl(b"frame", fds)
    assert read_available(p.recv) == b""


def test_a_descriptor_that_is_no_socket_is_an_errno(impl: SendMany, pairs: Pairs) -> None:
    p = pairs.unix()
    with open(os.devnull, "wb") as devnull:
        result = impl(b"frame", [devnull.fileno(), p.fd])
    assert result == [(0, 0, errno.ENOTSOCK)]
    assert read_exactly(p.recv, 5) == b"frame"


def test_a_socket_keeps_its_blocking_mode_even_under_a_default_timeout(
    impl: SendMany, pairs: Pairs
) -> None:
    """The server's sockets belong to asyncio: a send must never flip their O_NONBLOCK (the
    fallback's wrapper would, under a process-wide default timeout, without SOCK_NONBLOCK)."""
    blocking, non_blocking = pairs.unix(), pairs.tcp()
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(5.0)
    try:
        assert impl(b"frame", [blocking.fd, non_blocking.fd]) is None
    finally:
        socket.setdefaulttimeout(previous)
    assert os.get_blocking(blocking.fd) and not os.get_blocking(non_blocking.fd)
    assert read_exactly(blocking.recv, 5) == read_exactly(non_blocking.recv, 5) == b"frame"


def test_buffers_are_released_after_every_call(impl: SendMany, pairs: Pairs) -> None:
    """A held export would make the bytearray impossible to resize afterwards."""
    p = pairs.unix()
    payload, chunk = bytearray(b"frame"), bytearray(b"chunk")
    assert impl(payload, [p.fd]) is None
    assert impl([b"h", chunk], [p.fd]) is None
    with pytest.raises(ValueError):
        impl([b"h", chunk], [p.fd, -1])  # refused after the buffers were taken
    not_a_chunk: Any = "x"
    with pytest.raises(TypeError):
        impl([chunk, not_a_chunk], [p.fd])  # refused while taking them
    payload.append(0x21)
    chunk.append(0x21)
    assert read_exactly(p.recv, 11) == b"framehchunk"


# -- the property: any payload, any iovec, any mix of terminals --------------------------------

STATES = ("open", "tiny", "full", "closed", "shut", "peer_shut")


def _scenario(pairs: Pairs, states: list[str]) -> list[Pair]:
    made = []
    for state in states:
        if state == "full":
            made.append(pairs.full())
            continue
        p = pairs.unix(tiny=state == "tiny")
        if state == "closed":
            p.recv.close()
        elif state == "shut":
            p.send.shutdown(socket.SHUT_WR)
        elif state == "peer_shut":
            p.recv.shutdown(socket.SHUT_RD)
        made.append(p)
    return made


def _run(
    send_many: SendMany, payload: bytes, chunks: list[bytes], states: list[str]
) -> tuple[list[tuple[int, int, int]] | None, list[bytes]]:
    with ExitStack() as stack:
        pairs = Pairs(stack)
        group = _scenario(pairs, states)
        result = send_many(chunks if len(chunks) > 1 else payload, [p.fd for p in group])
        received = []
        for p, state in zip(group, states, strict=True):
            data = b"" if state in ("closed", "peer_shut") else read_available(p.recv)
            received.append(data[p.filler :])
        return result, received


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.integers(0, 160_000),
    count=st.integers(1, 24),
    states=st.lists(st.sampled_from(STATES), min_size=1, max_size=6),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_every_socket_gets_a_prefix_and_the_report_says_which(
    size: int, count: int, states: list[str], seed: int
) -> None:
    rng = random.Random(seed)
    payload = rng.randbytes(size)
    chunks = split(payload, count, rng)
    outcomes = {}
    for name, send_many in IMPLS.items():
        result, received = _run(send_many, payload, chunks, states)
        outcomes[name] = (result, received)
        report = {i: (sent, err) for i, sent, err in result or []}
        assert result is None or (
            [i for i, _, _ in result] == sorted(report) and len(report) == len(result)
        )
        for i, state in enumerate(states):
            got = received[i]
            if size == 0:
                assert i not in report and got == b""
            elif state in ("closed", "shut", "peer_shut"):
                assert report[i] == (0, errno.EPIPE) and got == b""
            elif state == "full":
                assert report[i] == (0, errno.EAGAIN) and got == b""
            elif i in report:  # open or tiny: a partial send, never nothing
                sent, err = report[i]
                assert err == 0 and 0 < sent < size and got == payload[:sent]
            else:
                assert got == payload
    if len(outcomes) == 2:
        assert outcomes["native"] == outcomes["python"]


def test_native_and_python_report_the_same_on_the_same_scenario() -> None:
    if len(IMPLS) < 2:
        if IN_CI:
            pytest.fail(f"native extension not built: {sendmany.NATIVE_ERROR}")
        pytest.skip("native extension not built")
    rng = random.Random(11)
    payload = rng.randbytes(90_000)
    chunks = split(payload, 5, rng)
    states = ["open", "tiny", "full", "closed", "open", "shut", "tiny", "peer_shut", "open"]
    native, python = (_run(IMPLS[n], payload, chunks, states) for n in ("native", "python"))
    assert native == python
    assert native[0] is not None and {e for _, _, e in native[0]} == {
        0,
        errno.EAGAIN,
        errno.EPIPE,
    }


# -- the module ------------------------------------------------------------------------------


def test_the_switch_chooses_the_fallback_when_the_native_writer_is_off() -> None:
    assert sendmany.choose(False) is python_send_many
    assert sendmany.describe(False).startswith("python")
    if sendmany.NATIVE:
        assert sendmany.choose(True) is not python_send_many
        assert sendmany.send_many is sendmany.choose(True)
        assert sendmany.describe(True) == "native"
        assert sendmany.NATIVE_ERROR is None
    else:
        assert not IN_CI, f"CI=true must build the extension: {sendmany.NATIVE_ERROR}"
        assert sendmany.send_many is python_send_many
        assert "not built" in sendmany.describe(True)


def test_send_many_is_what_the_callers_get(pairs: Pairs) -> None:
    chosen: Callable[..., object] = sendmany.send_many
    p = pairs.unix()
    assert chosen(b"frame", [p.fd]) is None
    assert read_exactly(p.recv, 5) == b"frame"
