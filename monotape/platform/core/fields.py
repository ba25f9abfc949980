"""One int field of many objects as int64s: the stage recorder's per-tick read (issue 12).

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
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from types import MemberDescriptorType
from typing import Any, TypeAlias

__all__ = ["NATIVE", "Int64Field", "int64_field", "python_int64_field"]

Int64Field: TypeAlias = Callable[[Iterable[Any], Any], bytes]
_INT64 = range(-(2**63), 2**63)


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


_native: Int64Field | None
try:
    from monotape.platform.core import _fields
except ImportError:  # no compiler at install time: the twin runs
    _native = None
else:
    _native = _fields.int64_field

NATIVE: bool = _native is not None
int64_field: Int64Field = _native if _native is not None else python_int64_field
