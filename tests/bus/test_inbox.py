"""bus/inbox.py: the receiving steps both buses share (decode → salvage → gate → deliver),
without sockets."""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.bus.inbox import Inbox
from monotape.platform.bus.nats_codec import TickCodec
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.feeds.validate import TickGate
from monotape.platform.model import Tick

UNIVERSE = build_universe(6, 60, 7)
CODEC = TickCodec()


def _tick(seq: int, iid: int = 0) -> Tick:
    venue = UNIVERSE[iid].venue if iid < len(UNIVERSE) else "XNAS"
    return Tick(
        iid=iid, venue=venue, handler="A", epoch=3, seq=seq,
        venue_ts_ns=1_700_000_000_000_000_000 + seq, bid=10_000, ask=10_002, last=10_001,
        size=100, decoded_ns=5_000_000_000 + seq,
    )  # fmt: skip


def _inbox(*, refuse_unreadable: bool) -> tuple[Inbox, list[list[Tick]], list[str], TickGate]:
    gate = TickGate(UNIVERSE, time.monotonic_ns, log=lambda *a, **k: None)
    got: list[list[Tick]] = []
    errors: list[str] = []
    inbox = Inbox(CODEC, gate, errors.append, refuse_unreadable=refuse_unreadable)
    inbox.sinks.append(lambda ticks: got.append(list(ticks)))
    return inbox, got, errors, gate


def test_a_whole_batch_passes_the_gate_and_reaches_every_sink() -> None:
    inbox, got, errors, gate = _inbox(refuse_unreadable=False)
    seen: list[int] = []
    inbox.sinks.append(lambda ticks: seen.extend(t.seq for t in ticks))
    r = inbox.receive(CODEC.encode([_tick(1, iid=5), _tick(2, iid=9999)]), "ipc bus.sock")
    assert r.ticks == 2 and r.whole and not r.malformed  # counted before the gate
    assert [[t.seq for t in b] for b in got] == [[1]] and seen == [1]
    assert gate.rejected_total == 1 and not errors  # iid 9999: not in the universe


def test_one_bad_item_costs_only_itself() -> None:
    inbox, got, errors, gate = _inbox(refuse_unreadable=True)
    good = msgspec.msgpack.encode(_tick(7, iid=3))
    data = b"\x92" + good + msgspec.msgpack.encode("not a tick")
    r = inbox.receive(data, "nats md.XNAS.batch", "XNAS")
    assert r.ticks == 1 and not r.whole and r.malformed
    assert [t.seq for t in got[0]] == [7]
    assert gate.rejected == {("XNAS", "undecodable"): 1}
    assert errors and errors[0].startswith("nats md.XNAS.batch: ")


def test_not_a_batch_is_a_refusal_on_nats_and_only_malformed_on_ipc() -> None:
    for refuse, refused in ((True, 1), (False, 0)):
        inbox, got, _, gate = _inbox(refuse_unreadable=refuse)
        r = inbox.receive(b"\xc1 not msgpack", "x")
        assert (r.ticks, r.whole, r.malformed) == (0, False, True)
        assert not got and gate.rejected_total == refused


def test_a_sink_that_raises_is_counted_and_the_others_still_get_the_batch() -> None:
    inbox, got, errors, _ = _inbox(refuse_unreadable=False)

    def broken(_ticks: Sequence[Tick]) -> None:
        raise RuntimeError("sink bug")

    inbox.sinks.insert(0, broken)
    inbox.receive(CODEC.encode([_tick(1, iid=2)]), "ipc bus.sock")
    assert inbox.sink_errors == 1 and len(got) == 1 and "sink bug" in errors[-1]


@given(data=st.binary(max_size=256))
def test_any_bytes_are_received_never_raised(data: bytes) -> None:
    for refuse in (True, False):
        inbox, got, _, gate = _inbox(refuse_unreadable=refuse)
        r = inbox.receive(data, "fuzz", "XNAS")
        delivered = sum(len(b) for b in got)
        assert delivered <= r.ticks
        assert not (r.whole and r.malformed)
        if r.whole:  # every decoded tick is either delivered or refused at the gate
            assert delivered + gate.rejected_total == r.ticks
        else:  # what was salvaged, less what the gate refused, and never a non-tick
            assert delivered + gate.rejected_total >= r.ticks
