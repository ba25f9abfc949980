"""The handler's one-pass drain (feeds/normalize.py): the native pass and its pure-Python twin
give the same bytes, counts and held versions for any venue batch; and a handler that takes it
delivers exactly what its numpy path delivers (the same batches byte for byte, the same
refusals, ``backwards`` and epochs), whatever the stream: foreign and unknown instruments,
negative stamps, missing update ids, its own stream going backwards, restarts behind a fence.
``make native-sanitize`` runs this module against the AddressSanitizer build named by
ADMIT_SANITIZED_BUILD."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.platform.feeds import handler as handler_module
from monotape.platform.feeds import normalize as normalize_module
from monotape.platform.feeds import validate
from monotape.platform.feeds.epochs import MemoryEpochStore
from monotape.platform.feeds.handler import FeedHandler
from monotape.platform.feeds.normalize import Normalize, python_normalize
from monotape.platform.feeds.validate import TickGate, python_gate_passes
from monotape.platform.model import Instrument
from monotape.platform.wire.batch import HAS_UPDATE_ID, batch_of, pack_header, read_batch
from tests.sanitized import load_sanitized

SANITIZED_BUILD = os.environ.get("ADMIT_SANITIZED_BUILD", "")
MS = 1_000_000


def _native() -> Normalize | None:
    if SANITIZED_BUILD:
        fn: Normalize = load_sanitized("sanitized._admit", SANITIZED_BUILD).normalize
        return fn
    return normalize_module.normalize if normalize_module.NATIVE else None


NATIVE = _native()
IMPLS: dict[str, Normalize] = {"python": python_normalize}
if NATIVE is not None:
    IMPLS["native"] = NATIVE

# wire ids 0-5: XNAS; 6-8: XNYS; 9 and up: no instrument
UNIVERSE = [
    Instrument(i, f"{v}:S{i}", v, f"S{i}", 2, 1)
    for i in range(9)
    for v in ["XNAS" if i < 6 else "XNYS"]
]
SPACE = 16


def _venue_batch(rows: list[tuple[int, int, int, int, bool]]) -> Any:
    """(iid, update_id, venue_ts, recv_ts, has_id) rows as a venue's batch of XNAS."""
    n = len(rows)
    cols = list(zip(*rows, strict=True)) if rows else [(), (), (), (), ()]
    iid, uid, vts, rts, has = cols
    return batch_of("XNAS", "", 0, 0, {
        "seq": np.array(uid, np.uint64), "update_id": np.array(uid, np.uint64),
        "bid": np.arange(n, dtype=np.int64), "ask": np.arange(n, dtype=np.int64) + 1,
        "last": np.arange(n, dtype=np.int64), "size": np.ones(n, np.uint64),
        "venue_ts": np.array(vts, np.int64), "recv_ts": np.array(rts, np.int64),
        "iid": np.array(iid, np.uint16),
        "flags": np.array([HAS_UPDATE_ID if h else 0 for h in has], np.uint8),
    })  # fmt: skip


def _mostly(good: list[Any], bad: list[Any]) -> st.SearchStrategy[Any]:
    """A good value nine times in ten: a batch passes whole often enough to take the one pass."""
    return st.sampled_from(good * (9 * max(1, len(bad)) // max(1, len(good)) + 1) + bad)


row = st.tuples(
    _mostly(list(range(6)), [6, 9, 11]),  # iid: now and then a foreign or an unknown one
    st.integers(0, 40),  # update id: the stream goes backwards often
    _mostly(list(range(0, 60, 3)), [-1]),  # venue_ts (ms); now and then negative
    _mostly([0], [-5]),  # the venue's recv_ts
    _mostly([True], [False]),  # has an update id
)


@pytest.mark.parametrize("impl", list(IMPLS))
@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(row, max_size=24),
    held=st.lists(
        st.tuples(st.integers(-1, 3), st.integers(0, 40)), min_size=SPACE, max_size=SPACE
    ),
    need_id=st.booleans(),
    fence=st.integers(-3, 30),
    epoch=st.integers(0, 3),
)
def test_native_and_twin_agree(
    impl: str,
    rows: list[tuple[int, int, int, int, bool]],
    held: list[tuple[int, int]],
    need_id: bool,
    fence: int,
    epoch: int,
) -> None:
    batch = _venue_batch(rows)
    gate = TickGate(UNIVERSE, lambda: 0)
    header = pack_header(batch.count, epoch, 7, "XNAS", "A")
    results = []
    for fn in (IMPLS[impl], python_normalize):
        he = np.array([e for e, _ in held], np.int64)
        hs = np.array([s for _, s in held], np.uint64)
        got = fn(batch.buffer, batch.count, gate.venue_code_of, gate.venue_code("XNAS"), need_id,
                 fence, epoch, header, 99, he, hs)  # fmt: skip
        results.append((got, he.tolist(), hs.tolist()))
    assert results[0] == results[1]
    got, he_after, hs_after = results[0]
    passes = all(
        i < 6 and v >= max(fence, 0) and r >= 0 and (h or not need_id) for i, _, v, r, h in rows
    )
    assert (got is not None) == passes
    if got is None:  # nothing changed
        assert he_after == [e for e, _ in held] and hs_after == [s for _, s in held]
        return
    out = read_batch(got[0])
    assert (out.venue, out.handler, out.epoch, out.batch_seq, out.count) == (
        "XNAS", "A", epoch, 7, len(rows))  # fmt: skip
    want_seq = [u if need_id else v for _, u, v, _, _ in rows]
    assert out.seq.tolist() == want_seq and out.recv_ts.tolist() == [99] * len(rows)
    assert out.bid.tolist() == batch.bid.tolist() and out.iid.tolist() == batch.iid.tolist()


def test_a_bad_argument_raises_and_changes_nothing() -> None:
    batch = _venue_batch([(1, 1, 1, 0, True)])
    gate = TickGate(UNIVERSE, lambda: 0)
    he, hs = np.full(SPACE, -1, np.int64), np.zeros(SPACE, np.uint64)
    for fn in IMPLS.values():
        with pytest.raises(ValueError):
            fn(batch.buffer[:-1], 1, gate.venue_code_of, 1, True, 0, 0, bytes(64), 0, he, hs)
        with pytest.raises(ValueError):
            fn(batch.buffer, 1, gate.venue_code_of, 1, True, 0, 0, bytes(63), 0, he, hs)
        with pytest.raises(OverflowError):
            fn(batch.buffer, 1, gate.venue_code_of, 1, True, 0, 1 << 63, bytes(64), 0, he, hs)
    assert (he == -1).all()
    empty = _venue_batch([])
    for fn in IMPLS.values():  # not one of our venues: refused, even with nothing in it
        assert fn(empty.buffer, 0, gate.venue_code_of, 0, True, 0, 0, bytes(64), 0, he, hs) is None


# -- the handler: the one pass delivers what the numpy path delivers ------------------------------

step = st.one_of(
    st.tuples(st.just("venue"), st.lists(row, min_size=1, max_size=12)),
    st.tuples(st.just("wait"), st.integers(0, 4)),
    st.tuples(st.just("restart"), st.just(0)),
)


def _run(steps: list[tuple[str, Any]], fn: Normalize | None, update_ids: bool) -> list[Any]:
    """What a gated handler delivers and counts over ``steps`` (``fn`` None: never the one
    pass). Venue timestamps are ms since the start, so a restart's 5 ms fence cuts through."""
    clock = FakeClock(wall_offset_ns=0)
    gate = TickGate(UNIVERSE, clock.now_ns, log=lambda *a, **k: None)
    h = FeedHandler("XNAS", "A", 2 * MS, MemoryEpochStore(), clock, update_ids=update_ids,
                    fence_ns=5 * MS, gate=gate)  # fmt: skip
    h.start(at_once=True)
    out: list[Any] = []
    saved = getattr(handler_module, "normalize")  # noqa: B009 (not exported: patched here)
    setattr(handler_module, "normalize", fn or (lambda *a: None))  # noqa: B010
    try:
        for kind, arg in steps:
            if kind == "venue":
                base = clock.wall_ns()
                rows = [(i, u, base + v * MS if v >= 0 else v, r, has) for i, u, v, r, has in arg]
                h.on_venue(_venue_batch(rows))
            elif kind == "wait":
                clock.advance(arg * MS)
            else:
                h.start()
            out += [(b.buffer, b.epoch, b.batch_seq) for b in h.drain_batches()]
        clock.advance(10 * MS)
        out += [(b.buffer, b.epoch, b.batch_seq) for b in h.drain_batches()]
    finally:
        setattr(handler_module, "normalize", saved)  # noqa: B010
    counts = (h.delivered, h.backwards, h.refused, h.malformed, sorted(gate.rejected.items()))
    return [out, counts]


@pytest.mark.parametrize("impl", list(IMPLS))
@settings(max_examples=150, deadline=None)
@given(steps=st.lists(step, max_size=30), update_ids=st.booleans())
def test_the_handler_delivers_what_its_numpy_path_delivers(
    impl: str, steps: list[tuple[str, Any]], update_ids: bool
) -> None:
    assert _run(steps, IMPLS[impl], update_ids) == _run(steps, None, update_ids)


GATES: dict[str, Any] = {"python": python_gate_passes}
if NATIVE is not None:
    GATES["native"] = (
        load_sanitized("sanitized._admit", SANITIZED_BUILD).gate_passes
        if SANITIZED_BUILD
        else validate.gate_passes
    )


@pytest.mark.parametrize("impl", list(GATES))
@settings(max_examples=300, deadline=None)
@given(rows=st.lists(row, max_size=16), code=st.integers(0, 3))
def test_the_gates_one_pass_is_its_rule(
    impl: str, rows: list[tuple[int, int, int, int, bool]], code: int
) -> None:
    """Every tick an instrument of venue ``code``, both stamps >= 0 (ids past the table: none)."""
    batch = _venue_batch(rows)
    gate = TickGate(UNIVERSE, lambda: 0)
    codes = gate.venue_code_of[:10]  # ids 10 and 11 lie past this table
    want = code != 0 and all(
        i < 10 and int(codes[i]) == code and v >= 0 and r >= 0 for i, _, v, r, _ in rows
    )
    assert GATES[impl](batch.buffer, batch.count, codes, code) is want
    with pytest.raises(ValueError):
        GATES[impl](batch.buffer + b"\0", batch.count, codes, code)
