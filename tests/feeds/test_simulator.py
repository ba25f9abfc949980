"""Venue simulator: determinism, rates, spikes, per-instrument monotonicity, price sanity."""

from __future__ import annotations

from collections import defaultdict

import pytest

from monotape.clock import FakeClock
from monotape.config import SimulatorConfig
from monotape.platform.feeds.simulator import (
    VenueSimulator,
    VenueUpdate,
    build_universe,
    venues_with_update_ids,
)

MS = 1_000_000


def run(
    sim: VenueSimulator, clock: FakeClock, seconds: float, step_ms: float = 10.0
) -> list[VenueUpdate]:
    out: list[VenueUpdate] = []
    for _ in range(round(seconds * 1000 / step_ms)):
        clock.advance_ms(step_ms)
        out.extend(sim.step())
    return out


def test_universe_shape() -> None:
    universe = build_universe()
    assert len(universe) == 2400
    assert [i.iid for i in universe] == list(range(2400))
    assert len({i.key for i in universe}) == 2400
    venues = {i.venue for i in universe}
    assert venues == {"XNAS", "XNYS", "ARCX", "BATS", "EDGX", "IEXG"}
    for inst in universe:
        assert inst.key == f"{inst.venue}:{inst.symbol}"
        assert inst.price_decimals in (2, 4)
        assert inst.tick_size >= 1
    assert {i.price_decimals for i in universe} == {2, 4}
    assert len({i.tick_size for i in universe}) > 1
    assert build_universe(seed=7) == universe
    assert len({i.venue for i in build_universe(venues=9, instruments=90)}) == 9
    with pytest.raises(ValueError, match="uint16"):
        build_universe(instruments=70_000)


def test_about_half_the_venues_have_update_ids() -> None:
    universe = build_universe()
    with_ids = venues_with_update_ids(universe)
    assert len(with_ids) == 3
    assert with_ids < {i.venue for i in universe}


def test_deterministic_for_a_seed() -> None:
    def sample(seed: int) -> list[VenueUpdate]:
        clock = FakeClock()
        sim = VenueSimulator(build_universe(), SimulatorConfig(seed=seed), clock)
        return run(sim, clock, 0.5)

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)


@pytest.mark.parametrize("step_ms", [1.0, 7.0, 40.0, 250.0])
def test_rate_within_5_percent_over_10s(step_ms: float) -> None:
    clock = FakeClock()
    sim = VenueSimulator(build_universe(), SimulatorConfig(rate=20_000), clock)
    n = len(run(sim, clock, 10.0, step_ms))
    assert abs(n - 200_000) <= 0.05 * 200_000


def test_spikes_reach_spike_rate() -> None:
    cfg = SimulatorConfig(rate=10_000, spike_rate=190_000, spike_every_s=2.0, spike_duration_s=0.5)
    clock = FakeClock()
    sim = VenueSimulator(build_universe(), cfg, clock)
    start = clock.now_ns()
    per_window: dict[int, int] = defaultdict(int)  # 100 ms windows
    rates: dict[int, float] = {}
    for _ in range(500):  # 5 s in 10 ms steps
        clock.advance_ms(10)
        window = (clock.now_ns() - start - 1) // (100 * MS)
        per_window[window] += len(sim.step())
        rates[window] = sim.rate_at(clock.now_ns() - 1)
    # 2.0-2.5 s is the first spike, 4.0-4.5 s the second; 0-2 s is quiet.
    for w in (20, 21, 22, 23, 24, 40, 44):
        assert rates[w] == 190_000
        assert abs(per_window[w] - 19_000) <= 0.05 * 19_000
    for w in (0, 5, 19, 25, 30, 39):
        assert rates[w] == 10_000
        assert abs(per_window[w] - 1_000) <= 0.05 * 1_000


def test_catch_up_is_bounded() -> None:
    clock = FakeClock()
    sim = VenueSimulator(build_universe(), SimulatorConfig(rate=20_000), clock)
    clock.advance(10 * 1_000 * MS)  # a 10 s stall
    assert len(sim.step()) == pytest.approx(5_000, abs=1)  # 0.25 s worth, not 10 s


def test_per_instrument_monotonic_and_prices_sane() -> None:
    universe = build_universe()
    with_ids = venues_with_update_ids(universe)
    clock = FakeClock()
    sim = VenueSimulator(universe, SimulatorConfig(rate=50_000), clock)
    last_ts: dict[int, int] = {}
    last_id: dict[int, int] = {}
    updates = run(sim, clock, 2.0, step_ms=3.0)
    # A stepped-back wall clock must not break monotonicity either.
    clock._wall_offset -= 5_000 * MS
    updates += run(sim, clock, 0.5, step_ms=3.0)
    assert len(updates) > 100_000
    for u in updates:
        inst = universe[u.iid]
        assert u.venue == inst.venue
        assert u.venue_ts_ns > last_ts.get(u.iid, 0)
        last_ts[u.iid] = u.venue_ts_ns
        if u.venue in with_ids:
            assert u.update_id is not None
            assert u.update_id > last_id.get(u.iid, 0)
            last_id[u.iid] = u.update_id
        else:
            assert u.update_id is None
        assert 0 < u.bid < u.ask
        assert u.bid <= u.last <= u.ask
        for price in (u.bid, u.ask, u.last):
            assert price % inst.tick_size == 0
        assert u.size > 0


def test_venue_ts_is_wall_time_of_the_step() -> None:
    clock = FakeClock()
    sim = VenueSimulator(build_universe(), SimulatorConfig(), clock)
    before = clock.wall_ns()
    clock.advance_ms(50)
    updates = sim.step()
    assert updates
    assert all(before < u.venue_ts_ns <= clock.wall_ns() for u in updates)
    assert [u.venue_ts_ns for u in updates] == sorted(u.venue_ts_ns for u in updates)


def test_every_instrument_ticks_within_20s_at_default_rate() -> None:
    universe = build_universe()
    clock = FakeClock()
    sim = VenueSimulator(universe, SimulatorConfig(), clock)
    seen = {u.iid for u in run(sim, clock, 20.0, step_ms=40.0)}
    assert seen == set(range(len(universe)))


def test_activity_is_skewed() -> None:
    clock = FakeClock()
    sim = VenueSimulator(build_universe(), SimulatorConfig(), clock)
    counts: dict[int, int] = defaultdict(int)
    for u in run(sim, clock, 5.0, step_ms=40.0):
        counts[u.iid] += 1
    ranked = sorted(counts.values(), reverse=True)
    # The hottest 1% of names carry far more than 1% of the flow.
    assert sum(ranked[:24]) > 0.15 * sum(ranked)


def test_a_restarted_venue_never_reissues_update_ids() -> None:
    # Same seed, started again 2 s later on the same wall clock: every instrument's ids carry on
    # above the ones the first run issued (they count on from the venue's clock in µs).
    universe = build_universe()
    clock = FakeClock()
    first = VenueSimulator(universe, SimulatorConfig(rate=50_000), clock)
    issued: dict[int, int] = {}
    for u in run(first, clock, 2.0, step_ms=3.0):
        if u.update_id is not None:
            issued[u.iid] = u.update_id
    again = VenueSimulator(universe, SimulatorConfig(rate=50_000), clock)
    fresh = run(again, clock, 0.5, step_ms=3.0)
    reissued = [
        u for u in fresh if u.update_id is not None and u.update_id <= issued.get(u.iid, -1)
    ]
    assert len(issued) > 500 and not reissued
    assert all(u.update_id is None or u.update_id < 2**56 for u in fresh)  # still a wire varint
