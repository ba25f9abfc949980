"""NATS tick batches on the wire: subjects and the batch codec, no I/O (docs/nats.md).

One NATS message per tick cannot carry the 190,000 ticks/s spike (measured: one nats-py
subscriber receives ~234k msgs/s end to end, with Python overhead per message), so a message
carries a *batch*: the ticks one ``publish()`` call handed over, split by venue, msgpack-encoded
as a list of ticks.

Subjects (``SubjectScheme``):

- ``BATCH`` (the default, the high-rate path): ``md.<venue>.batch``, one message per
  (venue, batch). A sequencer subscribes ``md.*.batch`` (or ``md.<venue>.batch`` per venue).
- ``SYMBOL``: ``md.<venue>.<symbol>``, the per-symbol contract of design, one message per
  (venue, symbol) within a batch. Meant for low-rate deployments and for tools that want one
  instrument without decoding a venue's stream; it needs the iid -> symbol map.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import msgspec
from msgspec.structs import astuple

from monotape.platform.model import Tick

__all__ = [
    "BATCH_TOKEN",
    "SUBJECT_PREFIX",
    "SubjectScheme",
    "TickCodec",
    "WireTick",
    "subject_token",
]

SUBJECT_PREFIX = "md"
BATCH_TOKEN = "batch"


class SubjectScheme(enum.StrEnum):
    BATCH = "batch"  # md.<venue>.batch: one message per (venue, batch)
    SYMBOL = "symbol"  # md.<venue>.<symbol>: one message per (venue, symbol) within a batch


class WireTick(Tick, array_like=True, gc=False):
    """A ``Tick`` that msgpack encodes as an array (no field names: ~45 B instead of ~125 B per
    tick). Decoding yields these; they *are* Ticks (a subclass, same fields, same order)."""


def subject_token(text: str) -> str:
    """A NATS subject token for a venue or symbol: no dots, spaces or wildcards."""
    token = text.translate(_TOKEN_TABLE)
    return token or "_"


_TOKEN_TABLE = str.maketrans({".": "_", " ": "_", "*": "_", ">": "_", "\t": "_"})


class TickCodec:
    """A batch of ticks <-> one NATS payload: a msgpack array of ticks.

    ``array_like=True`` (the default) writes each tick as an array in field order;
    ``False`` writes maps with field names (self-describing, ~2.8x larger). The decoder reads
    either, whichever the publisher chose (it peeks at the first tick's msgpack type)."""

    def __init__(self, *, array_like: bool = True) -> None:
        self.array_like = array_like
        self._encoder = msgspec.msgpack.Encoder()
        self._as_arrays = msgspec.msgpack.Decoder(list[WireTick])
        self._as_maps = msgspec.msgpack.Decoder(list[Tick])
        self._items = msgspec.msgpack.Decoder(list[msgspec.Raw])
        self._one_array = msgspec.msgpack.Decoder(WireTick)
        self._one_map = msgspec.msgpack.Decoder(Tick)

    def encode(self, ticks: Sequence[Tick]) -> bytes:
        if self.array_like:
            return self._encoder.encode([astuple(t) for t in ticks])
        return self._encoder.encode(ticks)

    def decode(self, data: bytes) -> list[Tick]:
        """Raises ``msgspec.DecodeError`` (a ValidationError is one) on a malformed payload."""
        if _first_item_is_map(data):
            return self._as_maps.decode(data)
        return list(self._as_arrays.decode(data))

    def decode_each(self, data: bytes) -> list[Tick | msgspec.DecodeError]:
        """Item by item, for a batch ``decode`` refused: each item is a tick or the error that
        says why it is not one, so one malformed tick does not cost its batch. Raises
        ``msgspec.DecodeError`` if ``data`` is not a msgpack array at all."""
        out: list[Tick | msgspec.DecodeError] = []
        for raw in self._items.decode(data):
            item = bytes(raw)
            try:
                if item and (0x80 <= item[0] <= 0x8F or item[0] in (0xDE, 0xDF)):
                    out.append(self._one_map.decode(item))
                else:
                    out.append(self._one_array.decode(item))
            except msgspec.DecodeError as exc:
                out.append(exc)
        return out


def _first_item_is_map(data: bytes) -> bool:
    if not data:
        return False
    head = data[0]
    if 0x90 <= head <= 0x9F:
        skip = 1
    elif head == 0xDC:
        skip = 3
    elif head == 0xDD:
        skip = 5
    else:
        return False  # not an array at all: the array decoder reports the error
    if len(data) <= skip:
        return False
    first = data[skip]
    return 0x80 <= first <= 0x8F or first in (0xDE, 0xDF)
