"""send_group: the writer's frame path in C (eligibility test, sends, counters) and its pure-Python
twin (``group_via``) give the same report, the same bytes and the same counters, on real sockets,
for any mix of terminal states, and a group where everyone took the bytes reports nothing.

``make native-sanitize`` runs this module too, against the instrumented build named by
SENDMANY_SANITIZED_BUILD (see tests/server/test_sendmany.py).
"""

from __future__ import annotations

import errno
import gc
import random
import sys
import weakref
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monotape.platform.server import sendmany
from monotape.platform.server.sendmany import NOT_ELIGIBLE, SendGroup, group_via, python_send_many
from tests.sanitized import load_sanitized
from tests.server.test_sendmany import (
    IN_CI,
    SANITIZED_BUILD,
    STATES,
    Pair,
    Pairs,
    _scenario,
    read_available,
)

OPEN = object()  # stands for websockets' State.OPEN: compared by identity, as the writer does
CLOSED = object()
# Why a terminal is not eligible for a send behind its transport's back. The protocol's state is
# read from the connection's mirror (``protocol_state``); a connection without one (None) has
# its protocol asked: "mirror_not_open" is a mirror that says closed over a protocol that says
# open (the mirror is what is read), "unmirrored_not_open" a closed protocol with no mirror.
INELIGIBLE = (
    "closing",
    "not_open",
    "mirror_not_open",
    "unmirrored_not_open",
    "behind",
    "no_fd",
    "queued",
    "transport_closing",
)
UNMIRRORED = "unmirrored"  # an open socket whose connection keeps no mirror: eligible


def _native_group() -> SendGroup | None:
    if SANITIZED_BUILD:
        fn: SendGroup = load_sanitized("sanitized_g._sendmany", SANITIZED_BUILD).send_group
        return fn
    if not sendmany.NATIVE:
        return None
    return group_via(sendmany.choose(True))


NATIVE_GROUP = _native_group()
GROUPS: dict[str, SendGroup] = {"python": group_via(python_send_many)}
if NATIVE_GROUP is not None:
    GROUPS["native"] = NATIVE_GROUP


def _need_native() -> None:
    if NATIVE_GROUP is None:
        if IN_CI:  # CI must compare native with Python, never Python with Python
            pytest.fail(f"native extension not built: {sendmany.NATIVE_ERROR}")
        pytest.skip(f"native extension not built: {sendmany.NATIVE_ERROR}")


class Transport:
    def __init__(self, queued: int, closing: bool) -> None:
        self.queued = queued
        self.closing = closing

    def get_write_buffer_size(self) -> int:
        return self.queued

    def is_closing(self) -> bool:
        return self.closing


@dataclass
class Protocol:
    state: object


class Conn:
    """What send_group reads and writes of a server Connection."""

    __slots__ = (
        "bytes_sent",
        "closing",
        "conn_id",
        "fd",
        "frames_sent",
        "protocol",
        "protocol_state",
        "transport",
    )

    def __init__(self, conn_id: int, pair: Pair, why: str) -> None:
        self.conn_id = conn_id
        self.fd = -1 if why == "no_fd" else pair.fd
        self.closing = why == "closing"
        closed = why in ("not_open", "unmirrored_not_open")
        self.protocol = Protocol(CLOSED if closed else OPEN)
        unmirrored = why in (UNMIRRORED, "unmirrored_not_open")
        self.protocol_state = (
            None if unmirrored else CLOSED if closed or why == "mirror_not_open" else OPEN
        )
        self.transport = Transport(7 if why == "queued" else 0, why == "transport_closing")
        self.frames_sent = 3  # not zero: counted on top of what was there
        self.bytes_sent = 100


def _run(
    group: SendGroup, payload: bytes, states: list[str]
) -> tuple[list[tuple[int, int, int]] | None, list[bytes], list[tuple[int, int]]]:
    """One call over terminals in ``states`` (a socket state of test_sendmany's, or a reason
    not to be eligible on an open socket): the report, what each terminal received, and each
    one's (frames_sent, bytes_sent) after."""
    with ExitStack() as stack:
        pairs = Pairs(stack)
        sockets = _scenario(
            pairs, ["open" if s in INELIGIBLE or s == UNMIRRORED else s for s in states]
        )
        conns = [Conn(i + 1, p, s) for i, (p, s) in enumerate(zip(sockets, states, strict=True))]
        behind = {c.conn_id for c, s in zip(conns, states, strict=True) if s == "behind"}
        result = group(payload, conns, behind, OPEN)
        received = []
        for p, state in zip(sockets, states, strict=True):
            data = b"" if state in ("closed", "peer_shut") else read_available(p.recv)
            received.append(data[p.filler :])
        return result, received, [(c.frames_sent, c.bytes_sent) for c in conns]


@pytest.mark.parametrize("name", ["native", "python"])
def test_a_group_that_took_everything_reports_nothing_and_counts_each(name: str) -> None:
    if name == "native":
        _need_native()
    payload = b"\x82\x05frame"
    result, received, counts = _run(GROUPS[name], payload, ["open", UNMIRRORED] * 25)
    assert result is None
    assert received == [payload] * 50
    assert counts == [(4, 100 + len(payload))] * 50


@pytest.mark.parametrize("name", ["native", "python"])
def test_every_reason_not_to_send_is_reported_and_nothing_is_sent_or_counted(name: str) -> None:
    if name == "native":
        _need_native()
    payload = b"x" * 300
    states = ["open", *INELIGIBLE, "open"]
    result, received, counts = _run(GROUPS[name], payload, states)
    assert result == [(i, 0, NOT_ELIGIBLE) for i in range(1, len(INELIGIBLE) + 1)]
    assert received == [payload, *([b""] * len(INELIGIBLE)), payload]
    assert counts == [(4, 400), *([(3, 100)] * len(INELIGIBLE)), (4, 400)]


@pytest.mark.parametrize("name", ["native", "python"])
def test_a_refused_send_counts_nothing_and_a_blocked_one_is_counted_for_its_hand_off(
    name: str,
) -> None:
    if name == "native":
        _need_native()
    payload = b"y" * 1000
    result, _, counts = _run(GROUPS[name], payload, ["closed", "full", "open"])
    assert result == [(0, 0, errno.EPIPE), (1, 0, errno.EAGAIN)]
    assert counts == [(3, 100), (4, 1100), (4, 1100)]


def test_bad_arguments_are_refused_before_any_send() -> None:
    _need_native()
    group = GROUPS["native"]
    with ExitStack() as stack:
        p = Pairs(stack).unix()
        conn = Conn(1, p, "open")
        with pytest.raises(TypeError):
            group(b"x", [conn], [], OPEN)  # type: ignore[arg-type]  # behind must be a set
        with pytest.raises(TypeError):
            group(b"x", 5, set(), OPEN)  # type: ignore[arg-type]
        with pytest.raises(AttributeError):
            group(b"x", [conn, object()], set(), OPEN)  # the second has no attributes
        assert read_available(p.recv) == b"" and conn.frames_sent == 3
        assert group(b"", [conn], set(), OPEN) is None and read_available(p.recv) == b""


class Hooked(Conn):
    """A Conn whose counters run Python when set: ``on_set(conn, name, old, new)`` first."""

    __slots__ = ("__weakref__", "_bytes", "_frames", "on_set")

    def __init__(self, conn_id: int, pair: Pair, why: str) -> None:
        self.on_set: Any = None
        self._frames = 0
        self._bytes = 0
        super().__init__(conn_id, pair, why)

    def _set(self, name: str, slot: str, value: int) -> None:
        hook = self.on_set
        if hook is not None:
            hook(self, name, getattr(self, slot), value)
        object.__setattr__(self, slot, value)

    @property
    def frames_sent(self) -> int:
        return self._frames

    @frames_sent.setter
    def frames_sent(self, value: int) -> None:
        self._set("frames_sent", "_frames", value)

    @property
    def bytes_sent(self) -> int:
        return self._bytes

    @bytes_sent.setter
    def bytes_sent(self, value: int) -> None:
        self._set("bytes_sent", "_bytes", value)


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[BaseException | None]:
    """The exceptions reported as unraisable during the test."""
    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))
    return seen


@pytest.mark.parametrize("name", ["native", "python"])
def test_a_list_emptied_by_a_counter_setter_after_the_sends_still_reports_every_shortfall(
    name: str,
) -> None:
    """Counting back a refused send runs the connection's own Python, which here empties the
    caller's list (the only holder of the connections): no crash, no use of a freed object
    (the sanitizer run sees it), and the partial send's rest is still reported."""
    if name == "native":
        _need_native()
    payload = random.Random(7).randbytes(200_000)  # more than a tiny socket takes at once
    with ExitStack() as stack:
        pairs = Pairs(stack)
        sockets = _scenario(pairs, ["tiny", "closed", "open"])
        conns: list[Any] = [Hooked(i + 1, p, "open") for i, p in enumerate(sockets)]
        alive = [weakref.ref(c) for c in conns]

        def empty_the_list(_conn: Any, _name: str, old: int | None, new: int) -> None:
            if old is not None and new < old:  # a take-back
                conns.clear()
                gc.collect()

        conns[1].on_set = empty_the_list
        result = GROUPS[name](payload, conns, set(), OPEN)
        assert result is not None
        report = {i: (sent, err) for i, sent, err in result}
        sent, err = report[0]
        assert err == 0 and 0 < sent < len(payload)
        assert read_available(sockets[0].recv) == payload[:sent]  # the rest is the caller's
        assert report[1] == (0, errno.EPIPE)
        assert 2 not in report and read_available(sockets[2].recv) == payload
        del conns[:]
        gc.collect()
        assert [r() for r in alive] == [None, None, None]  # every reference given back


@pytest.mark.parametrize("name", ["native", "python"])
def test_an_error_counting_after_the_sends_is_unraisable_and_every_shortfall_returns(
    name: str, unraisable: list[BaseException | None]
) -> None:
    """A counter that raises once bytes are on the wire must not swallow the report: the
    partial's rest and the blocked one's whole payload must still reach their transports."""
    if name == "native":
        _need_native()
    payload = random.Random(8).randbytes(200_000)
    with ExitStack() as stack:
        pairs = Pairs(stack)
        sockets = _scenario(pairs, ["tiny", "closed", "full", "open"])
        conns = [Hooked(i + 1, p, "open") for i, p in enumerate(sockets)]

        def refuse(_conn: Any, _name: str, old: int | None, new: int) -> None:
            if old is not None and new < old:
                raise ValueError("counter refuses to go down")

        conns[1].on_set = refuse
        result = GROUPS[name](payload, conns, set(), OPEN)
        assert result is not None
        report = {i: (sent, err) for i, sent, err in result}
        assert report[0][1] == 0 and 0 < report[0][0] < len(payload)
        assert report[1] == (0, errno.EPIPE)
        assert report[2] == (0, errno.EAGAIN)
        assert 3 not in report
        assert [(c.frames_sent, c.bytes_sent) for c in (conns[0], conns[2], conns[3])] == [
            (4, 100 + len(payload))
        ] * 3
        if name == "native":  # counted before the sends: the take-back is what raised
            assert len(unraisable) == 1 and isinstance(unraisable[0], ValueError)
            assert conns[1].frames_sent == 4  # off by one, said so; never half counted
        else:  # the twin counts after the sends, a refused one never
            assert unraisable == [] and conns[1].frames_sent == 3


def test_a_counter_that_fails_half_way_before_the_sends_is_taken_back_whole() -> None:
    """frames_sent counted, bytes_sent raising: that connection's frame is taken back too, and
    the earlier ones', and nothing is sent to anybody."""
    _need_native()
    with ExitStack() as stack:
        pairs = Pairs(stack)
        sockets = _scenario(pairs, ["open", "open", "open"])
        conns = [Hooked(i + 1, p, "open") for i, p in enumerate(sockets)]

        def refuse_bytes(_conn: Any, name: str, old: int | None, new: int) -> None:
            if name == "bytes_sent" and old is not None and new > old:
                raise ValueError("no bytes today")

        conns[1].on_set = refuse_bytes
        with pytest.raises(ValueError, match="no bytes today"):
            GROUPS["native"](b"z" * 500, conns, set(), OPEN)
        assert [(c.frames_sent, c.bytes_sent) for c in conns] == [(3, 100)] * 3
        assert [read_available(p.recv) for p in sockets] == [b""] * 3


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.integers(1, 120_000),
    states=st.lists(st.sampled_from((*STATES, *INELIGIBLE, UNMIRRORED)), min_size=1, max_size=8),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_native_and_python_groups_agree_and_every_socket_gets_a_prefix(
    size: int, states: list[str], seed: int
) -> None:
    payload = random.Random(seed).randbytes(size)
    outcomes: dict[str, Any] = {}
    for name, group in GROUPS.items():
        result, received, counts = _run(group, payload, states)
        outcomes[name] = (result, received, counts)
        report = {i: (sent, err) for i, sent, err in result or []}
        for i, state in enumerate(states):
            got, (frames, nbytes) = received[i], counts[i]
            if state in INELIGIBLE:
                assert report[i] == (0, NOT_ELIGIBLE) and got == b"" and frames == 3
            elif state in ("closed", "shut", "peer_shut"):
                assert report[i] == (0, errno.EPIPE) and got == b"" and frames == 3
            elif state == "full":
                assert report[i] == (0, errno.EAGAIN) and got == b"" and frames == 4
            elif i in report:  # open or tiny: a partial send, never nothing
                sent, err = report[i]
                assert err == 0 and 0 < sent < size and got == payload[:sent] and frames == 4
            else:
                assert got == payload and (frames, nbytes) == (4, 100 + size)
    if len(outcomes) == 2:
        assert outcomes["native"] == outcomes["python"]


# -- the slot map: a slotted connection's attributes read at their offsets -----------------------


class _Flipping(Transport):
    """A transport whose buffer check runs ``hook`` (the connection's own Python, mid-group)."""

    def __init__(self, hook: Any) -> None:
        super().__init__(0, False)
        self.hook = hook

    def get_write_buffer_size(self) -> int:
        self.hook()
        return 0


@pytest.mark.parametrize("name", ["native", "python"])
def test_a_class_changed_mid_group_is_read_as_changed(name: str) -> None:
    """The native pass reads a slotted class's attributes at their offsets, keyed by the class's
    version: a property put on the class by the group's own Python (here while the second
    terminal's transport is asked) hides the slot from the next terminal on, as it does for
    ``conn.closing`` in Python."""
    if name == "native":
        _need_native()

    class Shifting(Conn):
        __slots__ = ()

    def hide_the_slot() -> None:
        setattr(Shifting, "closing", property(lambda _self: True))  # noqa: B010

    payload = b"\x82\x03abc"
    with ExitStack() as stack:
        pairs = Pairs(stack)
        sockets = _scenario(pairs, ["open"] * 4)
        conns = [Shifting(i + 1, p, "open") for i, p in enumerate(sockets)]
        conns[1].transport = _Flipping(hide_the_slot)
        result = GROUPS[name](payload, conns, set(), OPEN)
        assert result == [(2, 0, NOT_ELIGIBLE), (3, 0, NOT_ELIGIBLE)]
        assert [read_available(p.recv) for p in sockets] == [payload, payload, b"", b""]
        assert [c.frames_sent for c in conns] == [4, 4, 3, 3]


@pytest.mark.parametrize("name", ["native", "python"])
def test_an_empty_slot_raises_and_nothing_is_sent_or_counted(name: str) -> None:
    """A slot never set is an AttributeError, in C as in Python; the native pass has counted
    the earlier terminals already and takes them back, and sends to nobody."""
    if name == "native":
        _need_native()
    with ExitStack() as stack:
        pairs = Pairs(stack)
        sockets = _scenario(pairs, ["open"] * 3)
        conns = [Conn(i + 1, p, "open") for i, p in enumerate(sockets)]
        del conns[2].fd
        with pytest.raises(AttributeError):
            GROUPS[name](b"q" * 64, conns, set(), OPEN)
        assert [read_available(p.recv) for p in sockets] == [b""] * 3
        assert [(c.frames_sent, c.bytes_sent) for c in conns] == [(3, 100)] * 3


class _Wide:
    """A class with many slots: its ``fd`` lies far past the end of a Conn."""

    __slots__ = (*(f"s{i}" for i in range(32)), "fd")


@pytest.mark.parametrize("name", ["native", "python"])
def test_a_slot_borrowed_from_another_class_is_refused_as_python_refuses_it(name: str) -> None:
    """A class may bind another class's member descriptor under its own name; Python refuses to
    use it ("doesn't apply to a ... object") and so must the native pass, which would otherwise
    read past the end of the object at the other class's offset. Nothing is sent or counted."""
    if name == "native":
        _need_native()

    class Borrower(Conn):
        __slots__ = ()
        fd = _Wide.__dict__["fd"]

    with ExitStack() as stack:
        pairs = Pairs(stack)
        sockets = _scenario(pairs, ["open"] * 3)
        conns = [Conn(i + 1, p, "open") for i, p in enumerate(sockets)]
        borrower = Borrower.__new__(Borrower)
        for attr in Conn.__slots__:
            if attr != "fd":
                setattr(borrower, attr, getattr(conns[1], attr))
        conns[1] = borrower
        with pytest.raises(TypeError):
            GROUPS[name](b"z" * 64, conns, set(), OPEN)
        assert [read_available(p.recv) for p in sockets] == [b""] * 3
        assert [c.frames_sent for c in conns] == [3, 3, 3]


def test_counters_of_other_types_keep_their_own_arithmetic() -> None:
    """Counters read from the slots still add through the number protocol: a float counter
    stays a float, as ``+=`` in Python leaves it."""
    _need_native()
    with ExitStack() as stack:
        pairs = Pairs(stack)
        sockets = _scenario(pairs, ["open"] * 2)
        conns = [Conn(i + 1, p, "open") for i, p in enumerate(sockets)]
        conns[0].bytes_sent = 0.5  # type: ignore[assignment]
        assert GROUPS["native"](b"r" * 10, conns, set(), OPEN) is None
        assert conns[0].bytes_sent == 10.5 and isinstance(conns[0].bytes_sent, float)
        assert (conns[1].frames_sent, conns[1].bytes_sent) == (4, 110)
