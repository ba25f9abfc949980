"""The native record encoders (wire/_records.c) against their pure-Python twins: the same bytes
for every tick, the same ValueError for every invalid one, whatever the tick is made of.
``make native-sanitize`` runs this module against an AddressSanitizer + UndefinedBehaviorSanitizer
build named by RECORDS_SANITIZED_BUILD (a test-tool hook, not a setting of the node)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.core.sequencer import Sequencer
from monotape.platform.model import Tick
from monotape.platform.wire import records
from monotape.platform.wire.batch import batch_from_ticks, read_batch
from monotape.platform.wire.records import python_encode_delta_record, python_encode_full_record
from tests.sanitized import load_sanitized
from tests.wire.strategies import I64, U64, base_and_new, tick, ticks

SANITIZED_BUILD = os.environ.get("RECORDS_SANITIZED_BUILD", "")


def _native() -> ModuleType | None:
    if SANITIZED_BUILD:
        module = load_sanitized("sanitized._records", SANITIZED_BUILD)
        module.bind(Tick, records._encode_full_checked, records._encode_delta_checked)
        return module
    return records.native_module()


NATIVE = _native()
needs_native = pytest.mark.skipif(NATIVE is None, reason="wire/_records.c not built")


def test_the_native_encoders_are_built_and_in_use() -> None:
    if NATIVE is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("monotape.platform.wire._records was not built")
        pytest.skip("monotape.platform.wire._records not built (no C compiler at install)")
    if not SANITIZED_BUILD:
        assert records.encode_delta_record is NATIVE.encode_delta_record
        assert records.encode_full_record is NATIVE.encode_full_record


def outcome(fn: Any, *args: Any) -> bytes | str:
    """The bytes, or the error's type and message: both twins must give the same one."""
    try:
        out = fn(*args)
    except (ValueError, TypeError, AttributeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    assert type(out) is bytes
    return out


@needs_native
@given(ticks)
def test_full_records_are_the_twins_bytes(t: Tick) -> None:
    assert NATIVE is not None
    assert outcome(NATIVE.encode_full_record, t) == outcome(python_encode_full_record, t)
    assert outcome(NATIVE.encode_delta_record, None, t) == outcome(python_encode_full_record, t)


@needs_native
@given(base_and_new())
def test_delta_records_are_the_twins_bytes(pair: tuple[Tick, Tick]) -> None:
    assert NATIVE is not None
    base, new = pair
    assert outcome(NATIVE.encode_delta_record, base, new) == outcome(
        python_encode_delta_record, base, new
    )


ANY_INT = st.one_of(I64, U64, st.integers(-(2**70), 2**70), st.integers(-3, 3))
ANY_TICK = st.builds(tick, ANY_INT, ANY_INT, ANY_INT, ANY_INT, ANY_INT, ANY_INT, ANY_INT)


@needs_native
@given(ANY_TICK, ANY_TICK)
def test_valid_or_not_both_twins_agree(base: Tick, new: Tick) -> None:
    """Values outside every range, mismatched iids, seqs going back: the same bytes or error."""
    assert NATIVE is not None
    new = Tick(base.iid if new.iid % 2 else new.iid, "XNAS", new.epoch, new.seq, 0, new.bid,
               new.ask, new.last, new.size)  # fmt: skip
    assert outcome(NATIVE.encode_full_record, new) == outcome(python_encode_full_record, new)
    assert outcome(NATIVE.encode_delta_record, base, new) == outcome(
        python_encode_delta_record, base, new
    )


class Subtick(Tick):
    """A subclass that adds a field: the C reads its Tick fields where Tick's are (kin)."""

    note: str = ""


class Looked(Tick):
    """A subclass whose attribute lookup is its own: what it reads is not the slots, so the C
    hands it to the reference."""

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        return value + 1 if name == "bid" else value


class Spy:
    """A reference encoder that counts its calls."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.calls = 0

    def __call__(self, *args: Any) -> bytes:
        self.calls += 1
        out: bytes = self.fn(*args)
        return out


@needs_native
def test_subclasses_that_read_like_tick_are_encoded_natively() -> None:
    """The ticks the sequencer encodes (its frame records, built from a batch's columns: every
    tick a writer's frame carries) and a subclass that adds a field are read in C; a subclass
    with its own attribute lookup, or one whose type changed since it was admitted, goes to the
    reference, which reads what Python reads."""
    assert NATIVE is not None
    full, delta = Spy(records._encode_full_checked), Spy(records._encode_delta_checked)
    NATIVE.bind(Tick, full, delta)
    try:
        plain = tick(7, 1, 1_000, 100, 101, 100, 5)
        seq = Sequencer(lanes=1)
        for n, sent in enumerate((plain, tick(7, 1, 1_003, 99, 102, 101, 3)), start=1):
            (batch,) = batch_from_ticks([sent])
            seq.on_batch(read_batch(batch.buffer), n)  # as the bus hands it over
            (record,) = seq.take_frame(n * 40_000_000).records
        assert record.base is not None and type(record.new) is Tick
        wire = (record.base, record.new)
        assert [t.seq for t in wire] == [1_000, 1_003]
        sub = Subtick(**{f: getattr(plain, f) for f in Tick.__struct_fields__}, note="x")
        for t in (*wire, sub):
            assert NATIVE.encode_full_record(t) == python_encode_full_record(t)
        assert NATIVE.encode_delta_record(*wire) == python_encode_delta_record(*wire)
        assert (full.calls, delta.calls) == (0, 0)  # all in C
        looked = Looked(**{f: getattr(plain, f) for f in Tick.__struct_fields__})
        assert NATIVE.encode_full_record(looked) == python_encode_full_record(looked)
        assert NATIVE.encode_full_record(looked) != NATIVE.encode_full_record(plain)  # bid + 1
        assert full.calls == 2
        # a type changed after it was admitted is looked at again: a property now shadows bid
        Shifted = type("Shifted", (Tick,), {})
        shifted = Shifted(**{f: getattr(plain, f) for f in Tick.__struct_fields__})
        assert NATIVE.encode_full_record(shifted) == python_encode_full_record(plain)
        calls = full.calls
        setattr(Shifted, "bid", property(lambda self: 12345))  # noqa: B010
        assert NATIVE.encode_full_record(shifted) == python_encode_full_record(shifted)
        assert full.calls == calls + 1 and shifted.bid == 12345
    finally:
        NATIVE.bind(Tick, records._encode_full_checked, records._encode_delta_checked)


def _likes(t: Tick) -> list[Any]:
    fields = {f: getattr(t, f) for f in Tick.__struct_fields__}
    return [
        Subtick(**fields),
        SimpleNamespace(**fields),  # duck-typed: the reference reads attributes
        Tick(**{**fields, "seq": bool(t.seq % 2)}),  # a bool is an int, not an exact one
        Tick(**{**fields, "size": 2**63 + t.size}),  # a uint64 that int64 cannot hold
        Tick(**{**fields, "bid": 1.5}),  # a float: the reference's error
        Tick(**{**fields, "epoch": "1"}),
    ]


@needs_native
@pytest.mark.parametrize("k", range(6))
def test_ticks_off_the_common_case_take_the_reference(k: int) -> None:
    assert NATIVE is not None
    base = tick(7, 1, 1_000, 100, 101, 100, 5)
    new = tick(7, 1, 1_003, 99, 102, 101, 3)
    for b, n in ((base, _likes(new)[k]), (_likes(base)[k], new)):
        assert outcome(NATIVE.encode_delta_record, b, n) == outcome(
            python_encode_delta_record, b, n
        )
    odd = _likes(new)[k]
    assert outcome(NATIVE.encode_full_record, odd) == outcome(python_encode_full_record, odd)


@needs_native
def test_wrong_calls_are_type_errors() -> None:
    assert NATIVE is not None
    t = tick(1, 1, 1, 1, 1, 1, 1)
    with pytest.raises(TypeError):
        NATIVE.encode_delta_record(t)
    with pytest.raises(TypeError):
        NATIVE.encode_delta_record(t, t, t)
    with pytest.raises(TypeError):
        NATIVE.bind(Tick, records._encode_full_checked)
    with pytest.raises(TypeError, match="not a slot"):
        NATIVE.bind(SimpleNamespace, records._encode_full_checked, records._encode_delta_checked)
    with pytest.raises(TypeError, match="not a slot"):  # the fields live on Tick, not here
        NATIVE.bind(Subtick, records._encode_full_checked, records._encode_delta_checked)
    # a refused bind leaves the binding as it was
    assert NATIVE.encode_full_record(t) == python_encode_full_record(t)


def test_without_the_extension_the_exported_encoders_are_the_twins() -> None:
    """A build without a compiler: the import of _records fails and records.py exports the
    pure-Python twins by name (checked in a fresh interpreter with the import blocked)."""
    probe = (
        "import sys; sys.modules['monotape.platform.wire._records'] = None\n"
        "from monotape.platform.wire import records as r\n"
        "assert not r.NATIVE and r.native_module() is None\n"
        "assert r.encode_full_record is r.python_encode_full_record\n"
        "assert r.encode_delta_record is r.python_encode_delta_record\n"
        "print('twins')"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "twins", out.stderr


# -- encode_rows: a frame's records from the sequencer's state arrays -----------------------------

ROWS = 6
_ROW_DTYPES = ("int64", "uint64", "int64", "int64", "int64", "uint64")
versions = st.tuples(st.integers(0, 3), st.one_of(st.integers(0, 50), U64))
row_values = st.tuples(versions, I64, I64, I64, U64)


def _arrays(rows: list[Any]) -> tuple[Any, ...]:
    import numpy as np

    cols = list(zip(*[(e, q, b, a, la, sz) for (e, q), b, a, la, sz in rows], strict=True))
    return tuple(np.array(c, dtype=d) for c, d in zip(cols, _ROW_DTYPES, strict=True))


@given(
    new=st.lists(row_values, min_size=ROWS, max_size=ROWS),
    base=st.lists(st.one_of(row_values, st.none()), min_size=ROWS, max_size=ROWS),
    picked=st.sets(st.integers(0, ROWS - 1)),
)
def test_encode_rows_gives_the_record_encoders_bytes(
    new: list[Any], base: list[Any], picked: set[int]
) -> None:
    """Each row's delta and full record are the per-tick encoders' (the reference's, over the
    whole uint64 range of seq and size); a row whose delta the reference refuses is refused."""
    import numpy as np

    none = ((-1, 0), 0, 0, 0, 0)
    new_cols = _arrays(new)
    base_cols = _arrays([b if b is not None else none for b in base])
    iids = np.array(sorted(picked), dtype=np.int64)
    want_deltas: dict[int, bytes] = {}
    want_puts = []
    want_refused = []
    for r in sorted(picked):
        (e, q), b, a, la, sz = new[r]
        tick_now = Tick(r, "", e, q, 0, b, a, la, sz, "")
        full = python_encode_full_record(tick_now)
        prev = None
        if base[r] is not None:
            (pe, pq), pb, pa, pl, ps = base[r]
            prev = Tick(r, "", pe, pq, 0, pb, pa, pl, ps, "")
        try:
            want_deltas[r] = python_encode_delta_record(prev, tick_now)
        except ValueError:
            want_refused.append(r)
            continue
        want_puts.append((r, e, q, full))
    impls = [records.python_encode_rows] + ([NATIVE.encode_rows] if NATIVE is not None else [])
    for impl in impls:
        deltas, puts, refused = impl(iids, new_cols, base_cols)
        assert list(deltas.items()) == list(want_deltas.items())
        assert puts == want_puts and refused == want_refused


def test_encode_rows_refuses_bad_arguments() -> None:
    import numpy as np

    cols = tuple(np.zeros(4, dtype=d) for d in _ROW_DTYPES)
    impls = [records.python_encode_rows] + ([NATIVE.encode_rows] if NATIVE is not None else [])
    for impl in impls:
        with pytest.raises(IndexError):
            impl(np.array([4], np.int64), cols, cols)
        with pytest.raises(TypeError):
            impl(np.array([0], np.int64), cols[:5], cols)
        with pytest.raises(ValueError):
            impl(np.array([0], np.int64), (*cols[:5], np.zeros(3, np.uint64)), cols)
