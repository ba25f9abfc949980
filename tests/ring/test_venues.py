"""ring/venues.py and the entry's stale-venue word: the host sequencer's down venues reach its
writers in every FRAME entry, in what was padding (an entry without it reads "none down")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.ring.layout import ENTRY_HEAD, Entry, EntryKind, decode_entry, encode_entry
from monotape.platform.ring.venues import MAX_VENUE_BITS, VenueBits

VENUES = ["XNAS", "CME", "EBS", "LSE", "XETR", "CBOE"]


def test_both_sides_derive_the_same_bits_from_the_universe_in_any_order() -> None:
    a = VenueBits.of(VENUES)
    b = VenueBits.of([*reversed(VENUES), "CME"])
    assert a == b and a.venues == tuple(sorted(VENUES))
    assert a.names(a.mask({"EBS", "XNAS", "NOPE"})) == {"EBS", "XNAS"}
    assert a.mask(()) == 0 and a.names(1 << 31) == frozenset()


def test_past_32_venues_the_rest_are_named_as_left_out() -> None:
    many = VenueBits.of(f"V{i:02}" for i in range(40))
    assert len(many.venues) == MAX_VENUE_BITS and len(many.left_out) == 8
    assert many.mask({"V39"}) == 0


@given(st.frozensets(st.sampled_from(VENUES)))
def test_the_word_rides_an_entry_and_reads_back(down: frozenset[str]) -> None:
    bits = VenueBits.of(VENUES)
    entry = Entry(EntryKind.FRAME, 7, 1, 2, {3: b"abc"}, stale_venues=bits.mask(down))
    read = decode_entry(encode_entry(entry), 1)
    assert bits.names(read.stale_venues) == down
    assert read.records.as_dict() == {3: b"abc"}


def test_the_header_keeps_its_size_and_an_old_entry_reads_as_none_down() -> None:
    assert ENTRY_HEAD.size == 56
    assert decode_entry(encode_entry(Entry(EntryKind.FRAME, 1, 1, 1))).stale_venues == 0
