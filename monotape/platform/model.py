"""The desk's nouns: instruments, versions and ticks.

Hot state is held in forms the garbage collector does not track (``gc=False`` Structs of ints
and strs), so a large book of symbols adds nothing to a gen-2 pause (measured: ~1.5M tracked
objects cost a ~220 ms pause).
"""

from __future__ import annotations

import re

import msgspec

__all__ = [
    "KEY_MAX_LENGTH",
    "KEY_PATTERN",
    "Instrument",
    "Tick",
    "Version",
    "key_problem",
    "version_of",
]

# One grammar for a symbol key, wherever a key enters: the replay loader checks every key at
# load and a terminal's subscribe checks each key it names (docs/wire.md, Keys). The simulator's
# universe is generated, not checked at build: its keys obey the grammar by construction, which
# tests/wire/test_keys.py proves for any venue count, size and seed. Venue: upper-case MIC-like
# code; symbol: the venue's own ticker. A key the replay accepts can always be subscribed.
KEY_PATTERN = r"^[A-Z0-9_.-]{1,16}:[A-Za-z0-9_./-]{1,40}$"
KEY_MAX_LENGTH = 57  # 16 + 1 + 40
_KEY_RE = re.compile(KEY_PATTERN)

# A version is ``(epoch, seq)`` compared lexicographically (docs/ordering.md). Plain tuples:
# cheapest to build and compare on the per-tick path.
Version = tuple[int, int]


class Instrument(msgspec.Struct, frozen=True, gc=False):
    """One tradable line on a screen. ``iid`` is its uint16 id in the wire dictionary."""

    iid: int
    key: str  # venue-qualified: "VENUE:SYMBOL"
    venue: str
    symbol: str
    price_decimals: int  # prices on the wire are int64 scaled by 10**price_decimals
    tick_size: int  # in scaled units: every price is a multiple of it


class Tick(msgspec.Struct, gc=False):
    """One normalized top-of-book update for one instrument, as a feed handler emits it.

    ``epoch`` and ``seq`` form the version. ``seq`` is the venue's own update id where the venue
    has one, otherwise its own per-symbol timestamp: both handlers of a pair derive the same
    version for the same update. Prices are scaled integers (see ``Instrument``).

    Timestamps for the stage histograms: ``venue_ts_ns`` is the venue's (wall) clock;
    ``decoded_ns`` and ``admitted_ns`` are this host's monotonic clock, stamped by the feed
    handler and the sequencer lane. ``admitted_ns`` is the only field written after decoding,
    by the lane that owns the symbol.
    """

    iid: int
    venue: str
    epoch: int
    seq: int
    venue_ts_ns: int
    bid: int
    ask: int
    last: int
    size: int
    handler: str = ""
    decoded_ns: int = 0
    admitted_ns: int = 0


def version_of(tick: Tick) -> Version:
    return (tick.epoch, tick.seq)


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid symbol key, or None when it is (the one key grammar)."""
    if _KEY_RE.fullmatch(key):  # not match(): "$" would let a trailing newline through
        return None
    if ":" not in key:
        return "a key is VENUE:SYMBOL (no ':' in it)"
    venue, _, symbol = key.partition(":")
    if not re.fullmatch(r"[A-Z0-9_.-]{1,16}", venue):
        return f"the venue is 1-16 of A-Z 0-9 _ . - (upper case), not {venue[:20]!r}"
    return f"the symbol is 1-40 of A-Z a-z 0-9 _ . / -, not {symbol[:44]!r}"
