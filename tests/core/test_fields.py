"""int64_field: the native read and its pure-Python twin give the same bytes and raise the same
exceptions (core/fields.py). ``make native-sanitize`` runs this module against an
AddressSanitizer + UndefinedBehaviorSanitizer build named by FIELDS_SANITIZED_BUILD (a test-tool
hook, not a setting of the node)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.core import fields
from monotape.platform.core.fields import python_int64_field
from monotape.platform.model import Tick
from tests.sanitized import load_sanitized

SANITIZED_BUILD = os.environ.get("FIELDS_SANITIZED_BUILD", "")
VENUE_TS = Tick.__dict__["venue_ts_ns"]
INT64 = st.integers(-(2**63), 2**63 - 1)


def _native() -> Callable[[Any, Any], bytes] | None:
    if SANITIZED_BUILD:
        module = load_sanitized("sanitized._fields", SANITIZED_BUILD)
        fn: Callable[[Any, Any], bytes] = module.int64_field
        return fn
    return fields.int64_field if fields.NATIVE else None


NATIVE = _native()
IMPLS: dict[str, Callable[[Any, Any], bytes]] = {"python": python_int64_field}
if NATIVE is not None:
    IMPLS["native"] = NATIVE


def test_the_native_read_is_built() -> None:
    if NATIVE is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("monotape.platform.core._fields was not built")
        pytest.skip("monotape.platform.core._fields not built (no C compiler at install)")
    assert fields.int64_field is not python_int64_field


def tick(ts: object, iid: int = 1) -> Tick:
    return Tick(iid, "XNAS", 1, 2, ts, 10, 11, 10, 1)  # type: ignore[arg-type]


class Slots:
    __slots__ = ("a", "b")

    def __init__(self, a: object) -> None:
        self.a = a


class SubTick(Tick):
    extra: int = 0


@pytest.mark.parametrize("impl", IMPLS)
@given(values=st.lists(INT64, max_size=300), as_tuple=st.booleans())
def test_every_value_in_order_as_int64s(impl: str, values: list[int], as_tuple: bool) -> None:
    ticks = [tick(v) for v in values]
    got = IMPLS[impl](tuple(ticks) if as_tuple else ticks, VENUE_TS)
    assert np.frombuffer(got, np.int64).tolist() == values
    slots = [Slots(v) for v in values]
    assert IMPLS[impl](iter(slots), Slots.__dict__["a"]) == got  # any iterable, any slot


@pytest.mark.parametrize("impl", IMPLS)
def test_subclasses_and_bools_read_as_python_reads_them(impl: str) -> None:
    items = [tick(5), SubTick(1, "X", 1, 2, 7, 1, 1, 1, 1, extra=3), tick(True)]
    assert np.frombuffer(IMPLS[impl](items, VENUE_TS), np.int64).tolist() == [5, 7, 1]


BAD: list[tuple[str, list[Any], Any, type[BaseException]]] = [
    ("above int64", [tick(2**63)], VENUE_TS, OverflowError),
    ("below int64", [tick(-(2**63) - 1)], VENUE_TS, OverflowError),
    ("a float", [tick(1), tick(1.5)], VENUE_TS, TypeError),
    ("None", [tick(None)], VENUE_TS, TypeError),
    ("not a Tick", [tick(1), Slots(2)], VENUE_TS, TypeError),
    ("an empty slot", [Slots.__new__(Slots)], Slots.__dict__["b"], AttributeError),
    ("not a descriptor", [tick(1)], "venue_ts_ns", TypeError),
    ("a property", [tick(1)], property(lambda t: 1), TypeError),
    ("not iterable", 5, VENUE_TS, TypeError),  # type: ignore[list-item]
]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("items", "member", "error"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_input_raises_the_same_exception(
    impl: str, items: Any, member: Any, error: type[BaseException]
) -> None:
    with pytest.raises(error):
        IMPLS[impl](items, member)


def test_a_tick_from_the_wire_reads_the_same() -> None:
    """msgspec builds the Ticks the sequencer reads: their slots, read natively, match."""
    ticks = msgspec.msgpack.decode(
        msgspec.msgpack.encode([tick(10**18 + i) for i in range(50)]), type=list[Tick]
    )
    expected = [t.venue_ts_ns for t in ticks]
    for impl in IMPLS.values():
        assert np.frombuffer(impl(ticks, VENUE_TS), np.int64).tolist() == expected


# -- in_range_prefix: the tick gate's fast test over a batch ---------------------------------
PrefixFn = Callable[..., int]
PREFIX_IMPLS: dict[str, PrefixFn] = {"python": fields.python_in_range_prefix}
if NATIVE is not None:
    PREFIX_IMPLS["native"] = (
        load_sanitized("sanitized._fields", SANITIZED_BUILD).in_range_prefix
        if SANITIZED_BUILD
        else fields.in_range_prefix
    )
D = Tick.__dict__
SIGNED = tuple(D[n] for n in ("bid", "ask", "last", "venue_ts_ns", "decoded_ns", "admitted_ns"))
UNSIGNED = tuple(D[n] for n in ("epoch", "seq", "size"))
TABLE: tuple[str | None, ...] = ("XNAS", "XNAS", None, "XNYS")
GATE = (TABLE, D["iid"], D["venue"], SIGNED, UNSIGNED)


def carried_count(items: list[Any]) -> int:
    """The reference: where the gate's own Python test (``validate.carried``) first fails."""
    from monotape.platform.feeds.validate import carried

    for i, t in enumerate(items):
        signed = t.bid | t.ask | t.last | t.venue_ts_ns | t.decoded_ns | t.admitted_ns
        if not carried(t.iid, t.venue, signed, t.epoch | t.seq | t.size, TABLE):
            return i
    return len(items)


def test_the_native_prefix_is_built() -> None:
    if NATIVE is None:
        pytest.skip("monotape.platform.core._fields not built (no C compiler at install)")
    assert PREFIX_IMPLS["native"] is not fields.python_in_range_prefix
    assert fields.in_range_prefix is not fields.python_in_range_prefix


EDGES = st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), 10**18])
FIELD = st.one_of(EDGES, st.integers(0, 2**40))
gate_ticks = st.builds(
    Tick,
    iid=st.sampled_from([-1, 0, 1, 2, 3, 4, 2**63]),
    venue=st.sampled_from(["XNAS", "XNYS", "EVIL"]),
    epoch=FIELD,
    seq=FIELD,
    venue_ts_ns=FIELD,
    bid=FIELD,
    ask=FIELD,
    last=FIELD,
    size=FIELD,
    handler=st.just("A"),
    decoded_ns=FIELD,
    admitted_ns=FIELD,
)
# mostly clean ticks, so the prefixes get long before the edge that ends them
clean_ticks = st.builds(
    Tick,
    iid=st.sampled_from([0, 1]),
    venue=st.just("XNAS"),
    epoch=st.integers(0, 9),
    seq=st.integers(0, 2**40),
    venue_ts_ns=st.integers(0, 2**62),
    bid=st.integers(0, 10**6),
    ask=st.integers(0, 10**6),
    last=st.integers(0, 10**6),
    size=st.integers(0, 10**4),
    handler=st.just("A"),
)


@pytest.mark.parametrize("impl", PREFIX_IMPLS)
@given(batch=st.lists(st.one_of(clean_ticks, clean_ticks, gate_ticks), max_size=40))
def test_the_prefix_is_where_the_gate_test_first_fails(impl: str, batch: list[Tick]) -> None:
    assert PREFIX_IMPLS[impl](batch, *GATE) == carried_count(batch)
    assert PREFIX_IMPLS[impl](tuple(batch), *GATE) == carried_count(batch)


@pytest.mark.parametrize("impl", PREFIX_IMPLS)
def test_ticks_from_the_wire_are_read_natively_too(impl: str) -> None:
    """The ticks the batch path builds as objects (a batch read back from the bus's bytes, the
    sequencer's frame records) are plain Ticks: read in full, values as sent."""
    from monotape.platform.core.sequencer import Sequencer
    from monotape.platform.wire.batch import batch_from_ticks, read_batch

    sent = [Tick(i % 2, "XNAS", 1, 10 + i, 10**18, 5, 6, 5, 1, "A", 7) for i in range(64)]
    (batch,) = batch_from_ticks(sent)
    got = read_batch(batch.buffer).ticks()
    assert got == sent and type(got[0]) is Tick
    assert PREFIX_IMPLS[impl](got, *GATE) == 64
    seq = Sequencer(lanes=2)
    seq.on_batch(read_batch(batch.buffer), 9)
    framed = [r.new for r in seq.take_frame(40_000_000).records]
    assert [t.iid for t in framed] == [0, 1] and all(type(t) is Tick for t in framed)
    assert PREFIX_IMPLS[impl](framed, *GATE) == 2
    got[40] = Tick(0, "XNYS", 1, 1, 1, 1, 1, 1, 1)  # listed on XNAS
    assert PREFIX_IMPLS[impl](got, *GATE) == 40


class Plain(Tick):
    """A subclass that reads every field as Tick does."""


class Shadowed(Tick):
    """A property in front of the ``bid`` slot: a slot read would not be what Python reads."""


Shadowed.bid = property(lambda self: 2**63)  # type: ignore[assignment]


class OwnLookup(Tick):
    def __getattribute__(self, name: str) -> Any:
        return super().__getattribute__(name)


class Fallback(Tick):
    def __getattr__(self, name: str) -> Any:
        return 0


def fields_of(cls: type[Tick], **over: Any) -> Tick:
    values: dict[str, Any] = {
        "iid": 0, "venue": "XNAS", "epoch": 1, "seq": 2, "venue_ts_ns": 3, "bid": 4, "ask": 5,
        "last": 4, "size": 1,
    }  # fmt: skip
    values.update(over)
    return cls(**values)


@pytest.mark.parametrize("impl", PREFIX_IMPLS)
@pytest.mark.parametrize(
    ("stopper", "why"),
    [
        (fields_of(Shadowed), "a property in front of a field"),
        (fields_of(OwnLookup), "its own __getattribute__"),
        (fields_of(Fallback), "its own __getattr__"),
        (fields_of(Tick, bid=True), "a bool: carried() takes it, the scan leaves it to carried()"),
        (fields_of(Tick, venue=None), "not a str"),
        (fields_of(Tick, iid=2, venue=None), "not in the table (None == None is no venue)"),
        (Slots(1), "not a Tick at all"),
    ],
)
def test_the_scan_stops_where_it_cannot_vouch(impl: str, stopper: Any, why: str) -> None:
    batch = [fields_of(Tick), fields_of(Plain), stopper, fields_of(Tick)]
    assert PREFIX_IMPLS[impl](batch, *GATE) == 2, why


@pytest.mark.parametrize("impl", PREFIX_IMPLS)
def test_a_type_changed_after_a_scan_is_looked_at_again(impl: str) -> None:
    class Later(Tick):
        pass

    batch = [fields_of(Later) for _ in range(3)]
    assert PREFIX_IMPLS[impl](batch, *GATE) == 3
    Later.ask = property(lambda self: -1)  # type: ignore[assignment]
    assert PREFIX_IMPLS[impl](batch, *GATE) == 0


PREFIX_BAD: list[tuple[str, tuple[Any, ...]]] = [
    ("a list for the table", ([], list(TABLE), D["iid"], D["venue"], SIGNED, UNSIGNED)),
    ("a list of fields", ([], TABLE, D["iid"], D["venue"], list(SIGNED), UNSIGNED)),
    ("a name, not a descriptor", ([], TABLE, "iid", D["venue"], SIGNED, UNSIGNED)),
    ("another type's field", ([], TABLE, D["iid"], Slots.__dict__["a"], SIGNED, UNSIGNED)),
    ("too many fields", ([], TABLE, D["iid"], D["venue"], SIGNED * 3, UNSIGNED)),
    ("not a sequence", (5, TABLE, D["iid"], D["venue"], SIGNED, UNSIGNED)),
]


@pytest.mark.parametrize("impl", PREFIX_IMPLS)
@pytest.mark.parametrize("args", [b[1] for b in PREFIX_BAD], ids=[b[0] for b in PREFIX_BAD])
def test_wrong_arguments_are_a_type_error(impl: str, args: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError):
        PREFIX_IMPLS[impl](*args)
