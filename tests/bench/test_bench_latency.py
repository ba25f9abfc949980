"""The latency bench's load client and a tiny run of the bench itself.

The byte-counting client (bench/wsclient.py) produces the record's frames-per-terminal and
priority figures, so its frame walking is property-tested: any split of a server stream into
reads gives the same counts, and every ping is answered with its own payload."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import wsclient
from bench.e2e import bench_latency
from monotape.platform.role.process_metrics import main_thread_schedstat
from tests.conftest import NO_LAG_SHEDDING


def _no_abort() -> None:
    raise AssertionError("the client aborted a good stream")


class _Transport(asyncio.Transport):
    """Records what the client writes; ``on_abort`` is what an abort does."""

    def __init__(self, on_abort: Callable[[], None] = _no_abort) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.on_abort = on_abort

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        self.written.append(bytes(data))

    def abort(self) -> None:
        self.on_abort()


def _server_frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, n))
    elif n < 0x10000:
        head = bytes((0x80 | opcode, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 127)) + n.to_bytes(8, "big")
    return head + payload


_messages = st.lists(
    st.one_of(
        st.tuples(
            st.just(2),
            st.integers(1, 8).flatmap(
                lambda k: st.binary(max_size=70_000).map(lambda b: bytes([k]) + b)
            ),
        ),
        st.tuples(st.just(9), st.binary(max_size=125)),  # ping
    ),
    max_size=30,
)


def _feed(
    messages: list[tuple[int, bytes]], data: st.DataObject, numbers: bool
) -> tuple[wsclient.Counts, wsclient.CountingClient, _Transport, int]:
    """The server stream of ``messages`` through a client, cut into reads where ``data``
    draws; the counts, the client, what it wrote and the stream's length."""
    stream = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n" + b"".join(
        _server_frame(op, p) for op, p in messages
    )
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=40)))
    loop = asyncio.new_event_loop()
    try:
        counts = wsclient.Counts()
        done: asyncio.Future[bool] = loop.create_future()
        client = wsclient.CountingClient(counts, "h", b"REQ", done, numbers=numbers)
        transport = _Transport()
        client.transport = transport
        prev = 0
        for cut in [*cuts, len(stream)]:
            if cut > prev:
                client.data_received(stream[prev:cut])
                prev = cut
    finally:
        loop.close()
    return counts, client, transport, len(stream)


@settings(max_examples=150, deadline=None)
@given(_messages, st.data(), st.booleans())
def test_any_split_of_the_stream_gives_the_same_counts(
    messages: list[tuple[int, bytes]], data: st.DataObject, numbers: bool
) -> None:
    counts, _, transport, size = _feed(messages, data, numbers)
    data_msgs = [p for op, p in messages if op == 2]
    want = [0] * wsclient.KINDS
    for p in data_msgs:
        want[p[0]] += 1
    assert counts.msgs == len(data_msgs)
    assert counts.kinds == want
    assert counts.bytes == size
    assert transport.written[0] == b"REQ"  # the requests go first, once the upgrade is answered
    assert transport.written[1:] == [wsclient.client_frame(0xA, p) for op, p in messages if op == 9]


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


# FRAME and SNAPSHOT messages with their frame numbers (any size of number), among other kinds
# and pings; a number may repeat or go back (the client must say so, not count it)
_numbered = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from([wsclient.FRAME, wsclient.SNAPSHOT]),
            st.integers(0, 2**63),
            st.binary(max_size=300),
        ),
        st.tuples(st.sampled_from([1, 4, 5, 6]), st.just(-1), st.binary(max_size=200)),
        st.tuples(st.just(-9), st.just(-1), st.binary(max_size=125)),  # a ping
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(_numbered, st.data())
def test_frame_numbers_read_the_same_from_any_split(
    msgs: list[tuple[int, int, bytes]], data: st.DataObject
) -> None:
    messages = [
        (9, body) if kind == -9 else (2, bytes([kind]) + (_uvarint(no) if no >= 0 else b"") + body)
        for kind, no, body in msgs
    ]
    _, client, _, _ = _feed(messages, data, numbers=True)
    # what a reader of whole messages sees: a number above the last one is a new boundary
    last, boundaries, repeats = -1, 0, 0
    for kind, no, _ in msgs:
        if no < 0:
            continue
        if no > last:
            last, boundaries = no, boundaries + 1
        elif kind == wsclient.FRAME:
            repeats += 1
    assert (client.frame_no, client.boundaries, client.repeats) == (last, boundaries, repeats)


def test_marks_count_only_terminals_open_at_both_samples() -> None:
    loop = asyncio.new_event_loop()
    try:
        clients = [
            wsclient.CountingClient(wsclient.Counts(), "h", b"", loop.create_future())
            for _ in range(3)
        ]
    finally:
        loop.close()
    for c, (no, shown) in zip(clients, [(100, 5), (100, 5), (-1, 0)], strict=True):
        c.is_open, c.frame_no, c.boundaries = True, no, shown
    marks = wsclient._Marks()
    assert marks.since(clients, 10.0)["held"] == 0  # the first sample only marks
    clients[0].frame_no, clients[0].boundaries = 125, 28  # 23 shown of 25 boundaries
    clients[1].is_open = False  # gone: not averaged in
    clients[2].frame_no, clients[2].boundaries = 130, 1  # numbered only now: from the next one
    assert marks.since(clients, 11.0) == {
        "held": 1,
        "boundaries": 23,
        "slots": 25,
        "repeats": 0,
        "terminal_s": 1.0,  # one terminal over this process's own second
    }


def test_a_refused_upgrade_is_not_counted_open() -> None:
    loop = asyncio.new_event_loop()
    try:
        counts = wsclient.Counts()
        client = wsclient.CountingClient(counts, "h", b"", loop.create_future())
        aborted: list[bool] = []
        client.transport = _Transport(on_abort=lambda: aborted.append(True))
        client.data_received(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\r\n")
    finally:
        loop.close()
    assert aborted == [True] and counts.open == 0
    assert client.status == b"HTTP/1.1 503 Service Unavailable"


def test_terminal_requests_subscribe_and_some_open_an_order_ticket() -> None:
    from monotape.platform.wire.requests import SetPriority, Subscribe, decode_request

    reqs = bench_latency.terminal_requests(bench_latency.PRIORITY_EVERY + 1)
    kinds = []
    for frames in reqs:
        msgs = []
        while frames:
            n = frames[1] & 0x7F  # requests are small: 7-bit or 16-bit lengths
            hl = 2
            if n == 126:
                n, hl = int.from_bytes(frames[2:4], "big"), 4
            msgs.append(decode_request(frames[hl + 4 : hl + 4 + n]))
            frames = frames[hl + 4 + n :]
        kinds.append([type(m) for m in msgs])
        sub = msgs[0]
        assert isinstance(sub, Subscribe) and len(sub.keys) == bench_latency.WATCHLIST
        if len(msgs) > 1:
            assert isinstance(msgs[1], SetPriority) and msgs[1].keys[0] in sub.keys
    assert kinds.count([Subscribe, SetPriority]) == 2  # terminals 0 and PRIORITY_EVERY
    assert kinds.count([Subscribe]) == bench_latency.PRIORITY_EVERY - 1


@pytest.mark.slow
def test_latency_bench_holds_a_tiny_population(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ``monotape run`` and the real client processes: the population is held, frames
    and the order ticket's updates arrive, nobody is refused. Shapes only, never timings."""
    # the node inherits the environment: no designed 503s because the machine is busy
    for name, value in NO_LAG_SHEDDING.items():
        monkeypatch.setenv(name, value)
    size = bench_latency.Size(rate=20_000, terminals=20, ramp_s=1, window_s=3, processes=1)
    log: list[str] = []
    o = bench_latency.measure(size, size.terminals, "smoke", log.append)
    assert o.connections == 20, log
    assert o.frames_per_terminal_s > 0, log
    assert o.priority_per_s > 0, log  # terminal 0 holds an order ticket
    assert o.errors_received == 0 and not o.errors, (o.errors, log)
    assert o.server_cpu > 0 and o.client_cpu > 0
    assert o.box_ms > 0 and "box gauge" in log[-1]  # the box's speed before the run, logged
    if main_thread_schedstat().exists():  # the node's own run-queue wait, from its /metrics
        assert set(o.wait_by_process) == {"node"} and o.wait_by_process["node"] >= 0
        assert "waiting for a core (s/s) node" in log[-1]
    rows = bench_latency._rows([o], None, size)
    assert {r.benchmark for r in rows} >= {
        "latency: priority p99",
        "latency: frames per terminal",
        "latency: load client CPU",
        "latency: GC-tracked allocations (net)",
    }


# -- the host beside the node (issue 12) ---------------------------------------------------------
_BOUNDS = (0.0001, 0.001, 0.005, 0.025, 0.1, 1.0, float("inf"))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=len(_BOUNDS), max_size=len(_BOUNDS)),
    st.lists(st.integers(0, 5), min_size=len(_BOUNDS), max_size=len(_BOUNDS)),
)
def test_gc_window_gives_the_window_count_and_the_longest_pause_bucket(
    before: list[int], added: list[int]
) -> None:
    """Cumulative buckets before and after a window: the window's collections are the +Inf
    delta and the longest pause is the bound of the highest bucket that gained one."""

    def cumulative(counts: list[int]) -> dict[float, float]:
        out, total = {}, 0
        for le, n in zip(_BOUNDS, counts, strict=True):
            total += n
            out[le] = float(total)
        return out

    after = [b + a for b, a in zip(before, added, strict=True)]
    got = bench_latency.gc_window(
        {("writer-0", "2"): cumulative(before)},
        {("writer-0", "2"): cumulative(after), ("writer-0", "0"): cumulative(after)},
        "2",
    )
    highest = max((le for le, n in zip(_BOUNDS, added, strict=True) if n), default=0.0)
    assert got == {"writer-0": (sum(added), highest * 1000)}


def test_gc_window_counts_a_process_that_appeared_inside_the_window() -> None:
    after = {("writer-1", "2"): {0.001: 0.0, 0.005: 2.0, float("inf"): 2.0}}
    assert bench_latency.gc_window({}, after, "2") == {"writer-1": (2, 5.0)}


@pytest.mark.slow
def test_latency_bench_measures_a_host_beside_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--writers 2`` on a tiny population: the host's terminals are split over its writers,
    every role's CPU is read, the capacity rows come out. Shapes only, never timings."""
    for name, value in NO_LAG_SHEDDING.items():
        monkeypatch.setenv(name, value)
    size = bench_latency.Size(rate=20_000, terminals=20, ramp_s=1, window_s=3, processes=1)
    log: list[str] = []
    o = bench_latency.measure(size, size.terminals, "smoke host", log.append, writers=2)
    assert o.connections == 20, log
    assert sum(o.split.values()) == 20 and set(o.split) == {"writer-0", "writer-1"}, log
    assert o.frames_per_terminal_s > 0 and o.frames_per_s > 0, log
    assert o.errors_received == 0 and not o.errors, (o.errors, log)
    roles = o.cpu_by_role()
    assert {"host", "sequencer", "writer", "handler", "venue"} <= set(roles), roles
    assert roles["handler"] > 0 and roles["sequencer"] > 0
    assert {"sequencer", "writer-0", "writer-1"} <= set(o.gen2_by_process), o.gen2_by_process
    rows = bench_latency._host_rows([o], "smoke", "")
    names = {r.benchmark for r in rows}
    assert {
        "host: ingest CPU per 1,000 ticks",
        "host: writer CPU per 1,000 delivered frames",
        "host: longest gen-2 pause of any process",
        "host: CPU of the writer role",
    } <= names


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--ingest-only"], "--ingest-only needs --writers N"),
        (["--writers", "0", "--ingest-only"], "each count must be 1-16"),
    ],
)
def test_ingest_only_is_refused_without_a_host_to_measure(
    argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_latency", *argv])
    with pytest.raises(SystemExit) as exc:
        bench_latency.main()
    assert exc.value.code == 2
    assert said in capsys.readouterr().err
