"""Int fields of many objects in one native pass: the per-tick reads of the host's hot loops
(issue 12).

``int64_field(items, member)`` returns ``member.__get__(item)`` for every item, packed as
native-endian int64s in a ``bytes`` (``np.frombuffer(..., np.int64)`` reads it without a copy).
``member`` is a member descriptor, e.g. ``Tick.__dict__["venue_ts_ns"]``. Every value must be an
``int`` in the int64 range: anything else is ``TypeError``, out of range ``OverflowError``, an
item the descriptor does not apply to the descriptor's own ``TypeError`` (an empty slot its
``AttributeError``).

Native (``_fields.c``) when it was built, because the read is per tick: callgrind over
bench_recording put the list comprehension and its conversion to int64 at ~110M of the 262M
instructions recording cost (docs/benchmarks.md, "Recording on vs off"). ``python_int64_field``
is the pure-Python twin with the same results, run when the extension is missing and by the
tests beside it.

``in_range_prefix(items, table, key, value, signed, unsigned)`` counts the leading items whose
``signed`` fields are ints in 0 .. 2**63-1, ``unsigned`` ones ints in 0 .. 2**64-1, and whose
``value`` is the str ``table[key]``: the tick gate's fast test (``feeds.validate.carried``) over
a whole batch. The sequencer gates every tick it takes off the bus, and that Python loop was
~13% of its CPU at 120k ticks/s (py-spy, docs/benchmarks.md). It stops at the first item it
cannot vouch for, also one whose type it cannot read as the descriptors' own type does (a
subclass with a property or its own attribute lookup in front of a field), a bool or an unset
field: the caller's own test goes on from there, so a shorter count is never a wrong answer.
``python_in_range_prefix`` is its twin, with the same counts.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from types import MemberDescriptorType
from typing import Any, TypeAlias

__all__ = [
    "NATIVE",
    "InRangePrefix",
    "Int64Field",
    "in_range_prefix",
    "int64_field",
    "python_in_range_prefix",
    "python_int64_field",
]

Int64Field: TypeAlias = Callable[[Iterable[Any], Any], bytes]
InRangePrefix: TypeAlias = Callable[
    [Sequence[Any], tuple[object, ...], Any, Any, tuple[Any, ...], tuple[Any, ...]], int
]
_INT64 = range(-(2**63), 2**63)
_INT63 = range(2**63)  # 0 .. 2**63-1
_UINT64 = range(2**64)


def python_int64_field(items: Iterable[Any], member: Any) -> bytes:
    """The pure-Python ``int64_field``: same arguments, same results, same exceptions."""
    if type(member) is not MemberDescriptorType:
        raise TypeError(
            f"int64_field: member must be a member descriptor, not {type(member).__name__}"
        )
    values = [member.__get__(item, type(item)) for item in tuple(items)]
    for v in values:
        if not isinstance(v, int):
            raise TypeError(f"int64_field: expected an int, got {type(v).__name__}")
        if v not in _INT64:
            raise OverflowError("int64_field: value out of the int64 range")
    return array("q", values).tobytes()  # native-endian, as the C one writes


def _lookup(cls: type, name: str) -> object:
    """What attribute lookup finds for ``name`` on ``cls``: the first class of its MRO that has
    it (CPython's ``_PyType_Lookup``, which the native scan calls)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _reads_like(cls: type, owner: type, descrs: Sequence[Any]) -> bool:
    """``cls`` reads every field as ``owner`` does: the same attribute lookup (no
    ``__getattribute__`` or ``__getattr__`` of its own) and every name still the owner's
    member descriptor."""
    if cls is not owner and not (
        issubclass(cls, owner)
        and _lookup(cls, "__getattribute__") is _lookup(owner, "__getattribute__")
        and _lookup(cls, "__getattr__") is _lookup(owner, "__getattr__")
    ):
        return False
    return all(_lookup(cls, d.__name__) is d for d in descrs)


def _descriptors(
    table: Any, key: Any, value: Any, signed: Any, unsigned: Any
) -> tuple[type, tuple[Any, ...]]:
    """The arguments' checks, in the native scan's order, with its messages."""
    if type(table) is not tuple or type(signed) is not tuple or type(unsigned) is not tuple:
        raise TypeError("in_range_prefix: table and the field lists are tuples")
    descrs = (key, value, *signed, *unsigned)
    if len(descrs) > 16:
        raise TypeError("in_range_prefix: too many fields")
    if type(key) is not MemberDescriptorType:
        raise TypeError("in_range_prefix: every field must be a member descriptor of one type")
    owner: type = key.__objclass__
    for d in descrs:
        if type(d) is not MemberDescriptorType or d.__objclass__ is not owner:
            raise TypeError("in_range_prefix: every field must be a member descriptor of one type")
    return owner, descrs


def python_in_range_prefix(
    items: Sequence[Any],
    table: tuple[object, ...],
    key: Any,
    value: Any,
    signed: tuple[Any, ...],
    unsigned: tuple[Any, ...],
) -> int:
    """The pure-Python ``in_range_prefix``: same arguments, same counts."""
    owner, descrs = _descriptors(table, key, value, signed, unsigned)
    vouched: type | None = None
    for i, item in enumerate(items):
        cls = type(item)
        if cls is not vouched:
            if not _reads_like(cls, owner, descrs):
                return i
            vouched = cls
        try:
            k = key.__get__(item, cls)
            v = value.__get__(item, cls)
            if type(k) is not int or k not in range(len(table)):
                return i
            expected = table[k]
            if type(v) is not str or type(expected) is not str or v != expected:
                return i
            for d in signed:
                x = d.__get__(item, cls)
                if type(x) is not int or x not in _INT63:
                    return i
            for d in unsigned:
                x = d.__get__(item, cls)
                if type(x) is not int or x not in _UINT64:
                    return i
        except AttributeError:  # an unset field
            return i
    return len(items)


_native: Int64Field | None
_native_prefix: InRangePrefix | None
try:
    from monotape.platform.core import _fields
except ImportError:  # no compiler at install time: the twins run
    _native = _native_prefix = None
else:
    _native = _fields.int64_field
    _native_prefix = _fields.in_range_prefix

NATIVE: bool = _native is not None
int64_field: Int64Field = _native if _native is not None else python_int64_field
in_range_prefix: InRangePrefix = (
    _native_prefix if _native_prefix is not None else python_in_range_prefix
)
