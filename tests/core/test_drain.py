"""The staggered drain as a state machine: 2% per 250 ms, jittered hints, nobody twice."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.core.drain import Drain

MS = 1_000_000


def run(drain: Drain, step_ns: int = 250 * MS) -> list[list[tuple[int, int]]]:
    batches = []
    now = drain.started_ns
    while not drain.done:
        batches.append(drain.step(now))
        now += step_ns
    return batches


def test_two_percent_every_quarter_second() -> None:
    drain = Drain(range(1000), started_ns=0, rng=random.Random(1))
    batches = run(drain)
    assert [len(b) for b in batches] == [20] * 50  # N / (2% per 250 ms) = 50 steps = 12.5 s
    assert drain.expected_duration_ns() == 49 * 250 * MS
    closed = [cid for b in batches for cid, _ in b]
    assert sorted(closed) == list(range(1000))  # everyone, once
    hints = [h for b in batches for _, h in b]
    assert min(hints) >= 0 and max(hints) <= 5000
    assert len(set(hints)) > 500  # staggered, not one number for everybody


def test_a_late_step_catches_up_without_bursting_everything() -> None:
    drain = Drain(range(100), started_ns=0, rng=random.Random(2))
    assert len(drain.step(0)) == 2
    assert len(drain.step(1000 * MS)) == 8  # four intervals were due: 4 batches of 2
    drain.forget(99)
    drain.forget(99)  # harmless twice
    assert drain.remaining == 89


@given(st.integers(0, 3000), st.floats(0.001, 1.0))
def test_every_connection_is_closed_exactly_once(n: int, fraction: float) -> None:
    drain = Drain(range(n), started_ns=0, fraction=fraction, rng=random.Random(0))
    closed = [cid for b in run(drain) for cid, _ in b]
    assert sorted(closed) == list(range(n))
    assert drain.closed == n
