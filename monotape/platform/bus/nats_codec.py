"""NATS tick batches on the wire: the subjects, no I/O (docs/nats.md).

One NATS message per tick cannot carry the 190,000 ticks/s spike (measured: one nats-py
subscriber receives ~234k msgs/s end to end, with Python overhead per message), so a message
carries a *batch*: one handler's tick batch of one venue, its own buffer (``wire/batch.py``,
the bytes the host's IPC bus carries too).

Subjects (``SubjectScheme``):

- ``BATCH`` (the default, the high-rate path): ``md.<venue>.batch``, one message per
  (venue, batch). A sequencer subscribes ``md.*.batch`` (or ``md.<venue>.batch`` per venue).
- ``SYMBOL``: ``md.<venue>.<symbol>``, the per-symbol contract of design, one message per
  (venue, symbol) within a batch. Meant for low-rate deployments and for tools that want one
  instrument without decoding a venue's stream; it needs the iid -> symbol map.
"""

from __future__ import annotations

import enum

__all__ = [
    "BATCH_TOKEN",
    "SUBJECT_PREFIX",
    "SubjectScheme",
    "subject_token",
]

SUBJECT_PREFIX = "md"
BATCH_TOKEN = "batch"


class SubjectScheme(enum.StrEnum):
    BATCH = "batch"  # md.<venue>.batch: one message per (venue, batch)
    SYMBOL = "symbol"  # md.<venue>.<symbol>: one message per (venue, symbol) within a batch


def subject_token(text: str) -> str:
    """A NATS subject token for a venue or symbol: no dots, spaces or wildcards."""
    token = text.translate(_TOKEN_TABLE)
    return token or "_"


_TOKEN_TABLE = str.maketrans({".": "_", " ": "_", "*": "_", ">": "_", "\t": "_"})
