"""Watchlists: deterministic, shared like the design workload (4,200 -> about 260 sets)."""

from __future__ import annotations

import pytest

from monotape.loadgen.watchlists import describe_distribution, zipf_watchlists

UNIVERSE = [f"V{v}:S{i:04d}" for v in range(6) for i in range(400)]  # design: ~2,400 instruments


def test_4200_connections_collapse_to_about_260_sets() -> None:
    lists = zipf_watchlists(UNIVERSE, 4200, seed=1)
    assert len(lists) == 4200
    assert 200 <= len({frozenset(w) for w in lists}) <= 330


def test_deterministic_and_well_formed() -> None:
    a = zipf_watchlists(UNIVERSE, 500, seed=3)
    assert a == zipf_watchlists(UNIVERSE, 500, seed=3)
    assert a != zipf_watchlists(UNIVERSE, 500, seed=4)
    known = set(UNIVERSE)
    for w in a:
        assert 10 <= len(w) <= 40
        assert len(set(w)) == len(w) and set(w) <= known


def test_size_range_and_validation() -> None:
    lists = zipf_watchlists(UNIVERSE, 100, seed=0, size_range=(5, 5))
    assert {len(w) for w in lists} == {5}
    with pytest.raises(ValueError):
        zipf_watchlists(UNIVERSE[:3], 10, seed=0)
    with pytest.raises(ValueError):
        zipf_watchlists(UNIVERSE, 10, seed=0, size_range=(9, 2))
    assert "Zipf s=1.1" in describe_distribution()
