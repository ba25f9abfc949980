"""Hypothesis strategies and helpers shared by the wire tests (ticks, a base and its successor)."""

from __future__ import annotations

from hypothesis import strategies as st

from monotape.platform.model import Tick
from monotape.platform.wire.records import Record
from monotape.platform.wire.varints import wrap_int64

__all__ = ["I64", "SEQ", "T0", "U64", "assert_full", "base_and_new", "tick", "ticks"]

I64 = st.integers(-(2**63), 2**63 - 1)
U64 = st.integers(0, 2**64 - 1)
SEQ = st.one_of(st.integers(0, 2**20), st.integers(2**55, 2**57), U64)
T0 = 1_760_000_000_123_456_789


def tick(iid: int, epoch: int, seq: int, bid: int, ask: int, last: int, size: int) -> Tick:
    return Tick(iid, "XNAS", epoch, seq, 0, bid, ask, last, size)


ticks = st.builds(
    tick, st.integers(0, 0xFFFF), st.one_of(st.integers(0, 200), U64), SEQ, I64, I64, I64, U64
)


@st.composite
def base_and_new(draw: st.DrawFn) -> tuple[Tick, Tick]:
    base = draw(ticks)
    if draw(st.booleans()):  # same epoch, seq moves forward (possibly by 0: a duplicate)
        epoch, seq = base.epoch, draw(st.integers(base.seq, 2**64 - 1))
    else:
        epoch = draw(U64.filter(lambda e: e != base.epoch))
        seq = draw(SEQ)
    moves = st.one_of(st.integers(-50, 50), I64)
    new = tick(
        base.iid,
        epoch,
        seq,
        wrap_int64(base.bid + draw(moves)),
        wrap_int64(base.ask + draw(moves)),
        draw(I64),
        draw(U64),
    )
    return base, new


def assert_full(rec: Record, t: Tick) -> None:
    assert not rec.has_base
    assert (rec.iid, rec.epoch, rec.seq, rec.bid, rec.ask, rec.last, rec.size) == (
        t.iid,
        t.epoch,
        t.seq,
        t.bid,
        t.ask,
        t.last,
        t.size,
    )
