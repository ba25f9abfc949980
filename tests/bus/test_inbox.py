"""bus/inbox.py: the receiving steps both buses share (read the batch → gate it → deliver it),
without sockets."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.platform.bus.inbox import Inbox, Received
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.feeds.validate import UNKNOWN_VENUE, TickGate
from monotape.platform.model import Tick
from monotape.platform.wire.batch import HEADER, BatchRefusal, TickBatch, batch_from_ticks

UNIVERSE = build_universe(6, 60, 7)
VENUE = UNIVERSE[0].venue
OURS = [i.iid for i in UNIVERSE if i.venue == VENUE]  # 0, 6, 12, ...


def _tick(seq: int, iid: int = 0, venue: str = VENUE) -> Tick:
    return Tick(
        iid=iid, venue=venue, handler="A", epoch=3, seq=seq,
        venue_ts_ns=1_700_000_000_000_000_000 + seq, bid=10_000, ask=10_002, last=10_001,
        size=100, decoded_ns=5_000_000_000 + seq,
    )  # fmt: skip


def _buffer(*ticks: Tick) -> bytes:
    (batch,) = batch_from_ticks(list(ticks))
    return batch.buffer


class Logged:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        self.events.append((event, fields))


def _inbox(
    clock: FakeClock | None = None,
) -> tuple[Inbox, list[TickBatch], list[str], TickGate, Logged]:
    log = Logged()
    gate = TickGate(UNIVERSE, (clock or FakeClock()).now_ns, log=log)
    got: list[TickBatch] = []
    errors: list[str] = []
    inbox = Inbox(gate, errors.append)
    inbox.sinks.append(got.append)
    return inbox, got, errors, gate, log


def _refused(gate: TickGate) -> dict[str, int]:
    return {reason: n for reason, n in gate.batches_refused.items() if n}


def test_a_batch_passes_the_gate_and_reaches_every_sink() -> None:
    inbox, got, errors, gate, _ = _inbox()
    seen: list[int] = []
    inbox.sinks.append(lambda batch: seen.extend(batch.seq.tolist()))
    r = inbox.receive(_buffer(_tick(1, iid=OURS[1]), _tick(2, iid=9999)), "ipc bus.sock")
    assert r == Received(2, malformed=False)  # counted before the gate
    assert [b.seq.tolist() for b in got] == [[1]] and seen == [1]
    assert got[0].ticks() == [_tick(1, iid=OURS[1])]  # values intact, read in place
    assert gate.rejected == {(VENUE, "unknown_iid"): 1} and not errors  # 9999: not listed
    assert inbox.refused == {} and _refused(gate) == {}


def test_a_clean_batch_is_delivered_as_it_was_read() -> None:
    inbox, got, _, gate, _ = _inbox()
    data = _buffer(*(_tick(s, iid=OURS[s % len(OURS)]) for s in range(1, 40)))
    assert inbox.receive(data, "ipc bus.sock") == Received(39, malformed=False)
    (batch,) = got
    assert batch.buffer == data and batch.count == 39 and gate.rejected_total == 0


def _with_header(data: bytes, **over: Any) -> bytes:
    fields = dict(
        zip(
            ("magic", "version", "header_len", "flags", "count", "r1", "epoch", "batch_seq",
             "venue", "handler", "r2"),
            HEADER.unpack_from(data),
            strict=True,
        )
    )  # fmt: skip
    fields.update(over)
    return HEADER.pack(*fields.values()) + data[HEADER.size :]


GOOD = _buffer(*(_tick(s, iid=OURS[s % 5]) for s in range(1, 6)))
BAD_BUFFERS = {
    "empty": (b"", BatchRefusal.SHORT),
    "short": (GOOD[: HEADER.size - 1], BatchRefusal.SHORT),
    "msgpack": (b"\x92\x01\x02" + bytes(80), BatchRefusal.MAGIC),
    "not a batch": (_with_header(GOOD, magic=b"XYZ"), BatchRefusal.MAGIC),
    "unknown version": (_with_header(GOOD, version=2), BatchRefusal.VERSION),
    "header length": (_with_header(GOOD, header_len=72), BatchRefusal.HEADER),
    "unknown flag": (_with_header(GOOD, flags=4), BatchRefusal.HEADER),
    "torn": (GOOD[:-1], BatchRefusal.LENGTH),
    "torn at a column": (GOOD[: HEADER.size + 8 * 5], BatchRefusal.LENGTH),
    "padded": (GOOD + b"\0", BatchRefusal.LENGTH),
    "count too high": (_with_header(GOOD, count=6), BatchRefusal.LENGTH),
    "count too low": (_with_header(GOOD, count=4), BatchRefusal.LENGTH),
    "venue not ascii": (_with_header(GOOD, venue=b"\xff" * 16), BatchRefusal.HEADER),
}


@pytest.mark.parametrize("case", BAD_BUFFERS)
def test_a_buffer_that_is_not_a_batch_is_refused_whole_and_the_next_delivered(case: str) -> None:
    data, reason = BAD_BUFFERS[case]
    inbox, got, errors, gate, _ = _inbox()
    r = inbox.receive(data, "nats md.XNAS.batch")
    assert r == Received(0, malformed=True)
    assert not got  # refused whole: never half-read
    assert inbox.refused == {str(reason): 1} and _refused(gate) == {str(reason): 1}
    assert gate.rejected_total == 0  # not a tick refusal: no tick was read
    assert len(errors) == 1 and errors[0].startswith("nats md.XNAS.batch: ")
    # nothing else is lost: the next buffer is read as usual
    assert inbox.receive(GOOD, "nats md.XNAS.batch") == Received(5, malformed=False)
    assert [b.buffer for b in got] == [GOOD]


def test_refused_buffers_are_counted_each_and_logged_at_most_once_a_second() -> None:
    clock = FakeClock()
    inbox, _, _, gate, log = _inbox(clock)
    for _ in range(5):
        inbox.receive(GOOD[:-3], "ipc bus.sock")
    inbox.receive(b"", "ipc bus.sock")
    assert inbox.refused == {"length_mismatch": 5, "short": 1}
    assert _refused(gate) == {"length_mismatch": 5, "short": 1}
    said = [f for event, f in log.events if event == "batch_refused"]
    assert [f["reason"] for f in said] == ["length_mismatch", "short"]  # one a reason
    assert said[0]["where"] == "ipc bus.sock"
    clock.advance(999_000_000)
    inbox.receive(GOOD[:-3], "ipc bus.sock")
    assert len([e for e, _ in log.events if e == "batch_refused"]) == 2  # still within 1 s
    clock.advance(1_000_000)
    inbox.receive(GOOD[:-3], "ipc bus.sock")
    said = [f for event, f in log.events if event == "batch_refused"]
    assert len(said) == 3 and said[-1]["not_logged_since"] == 5
    assert inbox.refused["length_mismatch"] == 7


def test_a_sink_that_raises_is_counted_and_the_others_still_get_the_batch() -> None:
    inbox, got, errors, _, _ = _inbox()

    def broken(_batch: TickBatch) -> None:
        raise RuntimeError("sink bug")

    inbox.sinks.insert(0, broken)
    inbox.receive(_buffer(_tick(1, iid=OURS[2])), "ipc bus.sock")
    assert inbox.sink_errors == 1 and len(got) == 1 and "sink bug" in errors[-1]


def test_a_batch_the_gate_empties_reaches_no_sink() -> None:
    inbox, got, _, gate, _ = _inbox()
    r = inbox.receive(_buffer(_tick(1, iid=9_000), _tick(2, iid=9_001)), "ipc bus.sock")
    assert r == Received(2, malformed=False) and not got and gate.rejected_total == 2
    r = inbox.receive(_buffer(_tick(1, venue="NOPE"), _tick(2, venue="NOPE")), "ipc bus.sock")
    assert r.ticks == 2 and not got
    assert gate.rejected == {(VENUE, "unknown_iid"): 2, (UNKNOWN_VENUE, "wrong_venue"): 2}


@given(data=st.binary(max_size=256))
def test_any_bytes_are_received_never_raised(data: bytes) -> None:
    inbox, got, _, gate, _ = _inbox()
    r = inbox.receive(data, "fuzz")
    delivered = sum(b.count for b in got)
    if r.malformed:  # refused whole, one reason
        assert r.ticks == 0 and not got and sum(inbox.refused.values()) == 1
    else:  # every tick read is delivered or refused at the gate
        assert delivered + gate.rejected_total == r.ticks


_iids = st.sampled_from([*OURS, 1, 2, 59, 60, 9_999])  # ours, another venue's, not listed


@given(
    iids=st.lists(_iids, min_size=1, max_size=30),
    cut=st.integers(0, 2_000),
    flip=st.none() | st.tuples(st.integers(0, HEADER.size - 1), st.integers(1, 255)),
)
def test_a_torn_or_damaged_batch_is_refused_whole_or_read_whole(
    iids: list[int], cut: int, flip: tuple[int, int] | None
) -> None:
    """Whatever is cut off the end or changed in the header: the buffer is either refused
    whole (one reason counted, nothing delivered) or read, each of its ticks delivered or
    refused at the gate; a buffer cut short is never read."""
    data = bytearray(_buffer(*(_tick(s + 1, iid=i) for s, i in enumerate(iids))))
    if flip is not None:
        at, xor = flip
        data[at] ^= xor
    torn = bytes(data[: len(data) - min(cut, len(data))])
    inbox, got, _, gate, _ = _inbox()
    r = inbox.receive(torn, "fuzz")
    if r.malformed:
        assert r.ticks == 0 and not got
        assert sum(inbox.refused.values()) == 1 == sum(gate.batches_refused.values())
    else:
        assert cut == 0, f"a buffer cut by {cut} bytes was read"
        n = struct.unpack_from("<I", torn, 8)[0]
        assert r.ticks == n and sum(b.count for b in got) + gate.rejected_total == n
    if flip is None:
        assert r.malformed == (cut > 0)
