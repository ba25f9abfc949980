"""FeedLiveness: a venue is down once every handler of it has been silent for the limit; a
quiet venue whose handlers beat is not; a venue never heard is not judged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.core.feed_liveness import FeedLiveness

MS = 1_000_000


def test_a_venue_is_down_only_when_both_twins_are_silent() -> None:
    live = FeedLiveness(0, limit_ns=500 * MS)
    live.seen("XNAS", "A", 600 * MS)
    live.seen("XNAS", "B", 600 * MS)
    live.seen("XLON", "A", 600 * MS)
    assert live.down(1_000 * MS) == frozenset()
    live.seen("XNAS", "B", 1_050 * MS)  # A died at 600; B still beats
    assert live.down(1_200 * MS) == frozenset({"XLON"})
    assert live.down(1_549 * MS) == frozenset({"XLON"})
    assert live.down(1_551 * MS) == frozenset({"XLON", "XNAS"})
    live.seen("XLON", "B", 1_600 * MS)  # a twin back: cleared at once
    assert live.down(1_600 * MS) == frozenset({"XNAS"})


def test_nothing_is_judged_for_one_limit_after_a_start() -> None:
    live = FeedLiveness(10_000 * MS, limit_ns=500 * MS)
    live.seen("XNAS", "A", 1 * MS)  # heard long ago (a stale stamp): not judged yet
    assert live.down(10_400 * MS) == frozenset()
    assert live.down(10_500 * MS) == frozenset({"XNAS"})


def test_a_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FeedLiveness(0, limit_ns=0)


@given(st.lists(st.tuples(st.sampled_from("AB"), st.integers(0, 5_000)), max_size=30),
       st.integers(0, 6_000))  # fmt: skip
def test_down_is_exactly_every_twin_silent_for_the_limit(
    beats: list[tuple[str, int]], now: int
) -> None:
    live = FeedLiveness(0, limit_ns=500)
    for handler, at in sorted(beats, key=lambda b: b[1]):
        if at <= now:
            live.seen("V", handler, at)
    heard = [at for _, at in beats if at <= now]
    expected = bool(heard) and now >= 500 and max(heard) < now - 500
    assert live.down(now) == (frozenset({"V"}) if expected else frozenset())
