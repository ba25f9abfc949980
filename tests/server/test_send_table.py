"""SendTable: the native writer's terminals as entries (the extension's and its pure-Python twin),
on real sockets. Every test runs against both; ``make native-sanitize`` runs this module against
the AddressSanitizer + UndefinedBehaviorSanitizer build too (SENDMANY_SANITIZED_BUILD).

What must hold: a payload reaches exactly the entries of the handles given whose flags are all
clear, and each of those counts one frame and its bytes (a partial or a would-block too, a
refused send not); a removed handle is never another terminal's, even once its slot is reused;
the entry's duplicate keeps the fd number its own after the transport closed the original.
"""

from __future__ import annotations

import errno
import os
import socket
from array import array
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monotape.platform.server import sendmany
from monotape.platform.server.sendmany import (
    FLAG_BEHIND,
    FLAG_CLOSING,
    FLAG_NOT_OPEN,
    FLAG_QUEUED,
    NOT_ELIGIBLE,
    PySendTable,
    SendTable,
)
from tests.sanitized import load_sanitized

IN_CI = os.environ.get("CI", "").lower() == "true"
SANITIZED_BUILD = os.environ.get("SENDMANY_SANITIZED_BUILD", "")
FLAGS = [FLAG_CLOSING, FLAG_NOT_OPEN, FLAG_BEHIND, FLAG_QUEUED]


def _native_factory() -> Callable[[], SendTable] | None:
    if SANITIZED_BUILD:
        module = load_sanitized("sanitized._sendmany", SANITIZED_BUILD)
        return module.SendTable  # type: ignore[no-any-return]
    if not sendmany.NATIVE:
        return None
    from monotape.platform.server import _sendmany

    return _sendmany.SendTable


NATIVE_FACTORY = _native_factory()
FACTORIES: dict[str, Callable[[], SendTable]] = {"python": PySendTable}
if NATIVE_FACTORY is not None:
    FACTORIES["native"] = NATIVE_FACTORY


@pytest.fixture(params=["native", "python"])
def new_table(request: pytest.FixtureRequest) -> Callable[[], SendTable]:
    name: str = request.param
    if name not in FACTORIES:
        if IN_CI:  # CI must compare native with Python, never Python with Python
            pytest.fail(f"native extension not built: {sendmany.NATIVE_ERROR}")
        pytest.skip(f"native extension not built: {sendmany.NATIVE_ERROR}")
    return FACTORIES[name]


def _pair(stack: ExitStack, sndbuf: int = 0) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    stack.callback(a.close)
    stack.callback(b.close)
    a.setblocking(False)
    b.setblocking(False)
    if sndbuf:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    return a, b


def _drain(sock: socket.socket) -> bytes:
    out = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except BlockingIOError:
            return bytes(out)
        if not chunk:
            return bytes(out)
        out += chunk


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def _fds_open() -> int:
    return len(_open_fds())


def test_a_clear_entry_gets_the_payload_and_counts_it(new_table: Callable[[], SendTable]) -> None:
    with ExitStack() as stack:
        table = new_table()
        (a, b), (c, d) = _pair(stack), _pair(stack)
        h1, h2 = table.add(a.fileno(), 0), table.add(c.fileno(), FLAG_BEHIND)
        assert len(table) == 2 and h1 != h2
        assert table.send(b"hello", array("q", [h1, h2])) == [(1, 0, NOT_ELIGIBLE)]
        assert _drain(b) == b"hello" and _drain(d) == b""
        assert table.counts(h1) == (1, 5) and table.counts(h2) == (0, 0)
        assert table.set(h2, FLAG_BEHIND, False) is True
        assert table.send(b"again", array("q", [h2, h1])) is None
        assert _drain(b) == b"again" and _drain(d) == b"again"
        assert table.remove(h1) == (2, 10) and len(table) == 1
        assert table.flags(h2) == 0


def test_every_flag_alone_keeps_the_entry_off_the_native_path(
    new_table: Callable[[], SendTable],
) -> None:
    with ExitStack() as stack:
        table = new_table()
        a, b = _pair(stack)
        handle = table.add(a.fileno(), 0)
        for flag in FLAGS:
            table.set(handle, flag, True)
            assert table.flags(handle) == flag
            assert table.send(b"x", array("q", [handle])) == [(0, 0, NOT_ELIGIBLE)]
            table.set(handle, flag, False)
        assert _drain(b) == b"" and table.counts(handle) == (0, 0)


def test_a_removed_handle_is_never_the_next_terminal_in_its_slot(
    new_table: Callable[[], SendTable],
) -> None:
    with ExitStack() as stack:
        table = new_table()
        (a, b), (c, d) = _pair(stack), _pair(stack)
        old = table.add(a.fileno(), 0)
        group = array("q", [old])  # a payload group built while it was live
        table.remove(old)
        new = table.add(c.fileno(), 0)  # the same slot, the next generation
        assert new & 0xFFFFFFFF == old & 0xFFFFFFFF and new != old
        assert table.send(b"stale", group) == [(0, 0, NOT_ELIGIBLE)]
        assert _drain(b) == b"" and _drain(d) == b""
        assert table.set(old, FLAG_QUEUED, True) is False  # a removed one: nothing kept
        assert table.flags(new) == 0
        with pytest.raises(KeyError):
            table.counts(old)
        with pytest.raises(KeyError):
            table.remove(old)


def test_the_entry_keeps_its_socket_after_the_transport_closed_its_fd(
    new_table: Callable[[], SendTable],
) -> None:
    """A transport that closes its fd before the teardown drops the entry, and the kernel
    hands that number to a newer connection: the entry still reaches its own peer, never the
    newcomer."""
    with ExitStack() as stack:
        table = new_table()
        a, b = _pair(stack)
        handle = table.add(a.fileno(), 0)
        number = a.fileno()
        a.close()  # the transport's own close
        c, d = _pair(stack)
        if c.fileno() != number:  # the kernel gave it elsewhere: give the newcomer that number
            os.dup2(c.fileno(), number)
            stack.callback(os.close, number)
        assert table.send(b"mine", array("q", [handle])) is None
        assert _drain(b) == b"mine" and _drain(d) == b""
        before = _fds_open()
        table.remove(handle)  # the duplicate closes: the peer sees the end
        assert _fds_open() == before - 1
        assert b.recv(16) == b""


def test_partial_would_block_and_refused_sends_are_reported_and_counted(
    new_table: Callable[[], SendTable],
) -> None:
    with ExitStack() as stack:
        table = new_table()
        full, _full_peer = _pair(stack, sndbuf=4096)
        gone, gone_peer = _pair(stack)
        while True:  # fill the first one's buffers
            try:
                full.send(b"\0" * 65536)
            except BlockingIOError:
                break
        gone_peer.close()
        h_full, h_gone = table.add(full.fileno(), 0), table.add(gone.fileno(), 0)
        out = table.send(b"y" * 1000, array("q", [h_full, h_gone]))
        assert out is not None and len(out) == 2
        (i_full, sent_full, err_full), (i_gone, sent_gone, err_gone) = out
        assert (i_full, i_gone) == (0, 1)
        assert err_full in (0, errno.EAGAIN) and (err_full == 0) == (sent_full > 0)
        assert sent_gone == 0 and err_gone in (errno.EPIPE, errno.ECONNRESET)
        assert table.counts(h_full) == (1, 1000)  # its rest goes to its transport: counted
        assert table.counts(h_gone) == (0, 0)  # refused: not


def test_bad_arguments_are_refused_before_anything_is_sent(
    new_table: Callable[[], SendTable],
) -> None:
    with ExitStack() as stack:
        table = new_table()
        a, b = _pair(stack)
        with pytest.raises(ValueError):
            table.add(-1, 0)
        with pytest.raises(ValueError):
            table.add(a.fileno(), 16)
        r, w = os.pipe()
        os.close(r)
        os.close(w)
        with pytest.raises(OSError):
            table.add(r, 0)  # a closed descriptor cannot be duplicated
        handle = table.add(a.fileno(), 0)
        with pytest.raises(ValueError):
            table.set(handle, 32, True)
        with pytest.raises(TypeError):
            table.send(b"x", [handle])  # type: ignore[arg-type]  # a list, not array('q')
        with pytest.raises(TypeError):
            table.send(b"x", array("i", [1]))  # 4-byte items
        assert table.send(b"", array("q", [handle])) is None
        assert table.send(b"x", array("q")) is None
        assert _drain(b) == b"" and len(table) == 1


# -- any sequence of operations: the table against a model ---------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 5), st.sampled_from([0, *FLAGS])),
        st.tuples(st.just("remove"), st.integers(0, 20), st.just(0)),
        st.tuples(st.just("set"), st.integers(0, 20), st.sampled_from(FLAGS), st.booleans()),
        st.tuples(st.just("send"), st.lists(st.integers(0, 20), max_size=12), st.integers(1, 64)),
    ),
    max_size=60,
)


@pytest.fixture(scope="module")
def sockets() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    with ExitStack() as stack:
        yield [_pair(stack) for _ in range(6)]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=ops)
def test_any_sequence_of_operations_matches_the_model(
    new_table: Callable[[], SendTable],
    sockets: list[tuple[socket.socket, socket.socket]],
    script: list[tuple[Any, ...]],
) -> None:
    for _, peer in sockets:
        _drain(peer)
    table = new_table()
    issued: list[int] = []  # every handle ever returned, live or not
    live: dict[int, tuple[int, int]] = {}  # handle -> (socket index, flags)
    counts: dict[int, tuple[int, int]] = {}
    expected = [bytearray() for _ in sockets]
    for op in script:
        if op[0] == "add":
            k, flags = int(op[1]), int(op[2])
            handle = table.add(sockets[k][0].fileno(), flags)
            assert handle not in live and handle >= 0
            issued.append(handle)
            live[handle] = (k, flags)
            counts[handle] = (0, 0)
        elif op[0] == "remove" and issued:
            handle = issued[int(op[1]) % len(issued)]
            if handle in live:
                assert table.remove(handle) == counts.pop(handle)
                del live[handle]
            else:
                with pytest.raises(KeyError):
                    table.remove(handle)
        elif op[0] == "set" and issued:
            handle = issued[int(op[1]) % len(issued)]
            bit, on = int(op[2]), bool(op[3])
            assert table.set(handle, bit, on) is (handle in live)
            if handle in live:
                k, flags = live[handle]
                live[handle] = (k, flags | bit if on else flags & ~bit)
        elif op[0] == "send" and issued:
            picks = [issued[i % len(issued)] for i in op[1]]
            payload = bytes([len(picks) % 256]) * int(op[2])
            out = table.send(payload, array("q", picks))
            want = []
            for i, handle in enumerate(picks):
                if handle not in live or live[handle][1]:
                    want.append((i, 0, NOT_ELIGIBLE))
                    continue
                expected[live[handle][0]] += payload
                frames, sent = counts[handle]
                counts[handle] = (frames + 1, sent + len(payload))
            assert sorted(out or []) == want  # loopback pairs with room: every send is whole
    assert len(table) == len(live)
    for handle, (_, flags) in live.items():
        assert table.flags(handle) == flags and table.counts(handle) == counts[handle]
    for (_, peer), want_bytes in zip(sockets, expected, strict=True):
        assert _drain(peer) == bytes(want_bytes)
    for handle in live:
        table.remove(handle)
