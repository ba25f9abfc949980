"""core/staleness.py: the writer's verdict on whether its prices stopped, fed values only."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.core.staleness import STALL_FRAMES, StaleState, StaleWatch

FRAME = 40_000_000


def test_a_writer_with_no_frame_yet_is_not_stalled() -> None:
    watch = StaleWatch(FRAME)
    assert watch.check(10 * FRAME) is None and not watch.state.stale


def test_two_frame_intervals_are_tolerated_more_is_a_stall_announced_once() -> None:
    watch = StaleWatch(FRAME)
    watch.framed(FRAME, 1_000)
    assert watch.check(FRAME + STALL_FRAMES * FRAME) is None  # exactly two: still live
    state = watch.check(FRAME + STALL_FRAMES * FRAME + 1)
    assert state == StaleState(1_000, ())  # since the last frame's wall time
    assert watch.check(100 * FRAME) is None  # announced once
    assert watch.grid_stalled and watch.stalls == 1


def test_the_next_frame_clears_the_stall_silently_and_keeps_the_venues() -> None:
    watch = StaleWatch(FRAME)
    watch.framed(FRAME, 1_000)
    assert watch.venues_down({"XNAS"}, 1_010) == StaleState(0, (("XNAS", 1_010),))
    assert watch.check(10 * FRAME) == StaleState(1_000, (("XNAS", 1_010),))
    # told once, ahead of the frame: a terminal whose symbols did not move gets no FRAME
    assert watch.framed(11 * FRAME, 1_400) == StaleState(0, (("XNAS", 1_010),))
    assert watch.framed(12 * FRAME, 1_440) is None


def test_venue_sets_are_announced_on_change_only_and_keep_their_since() -> None:
    watch = StaleWatch(FRAME)
    assert watch.venues_down(set(), 5) is None
    assert watch.venues_down({"B"}, 10) == StaleState(0, (("B", 10),))
    assert watch.venues_down(["B"], 20) is None
    assert watch.venues_down({"A", "B"}, 30) == StaleState(0, (("A", 30), ("B", 10)))
    assert watch.venues_down({"A"}, 40) == StaleState(0, (("A", 30),))
    assert watch.venues_down((), 50) == StaleState()
    assert watch.venue_episodes == 2


@given(st.lists(st.frozensets(st.sampled_from("ABCDEF")), max_size=30))
def test_the_state_always_names_exactly_the_last_set_given(sets: list[frozenset[str]]) -> None:
    watch = StaleWatch(FRAME)
    for i, venues in enumerate(sets):
        watch.venues_down(venues, i)
        assert watch.state.venue_names == venues
        assert [v for v, _ in watch.state.venues] == sorted(venues)
