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
