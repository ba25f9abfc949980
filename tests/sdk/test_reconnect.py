"""The reconnect policy, pure: the wait after each way an attempt ends (hypothesis over hints,
Retry-After, jitter and the random source), the attempt count, and the header parsers."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.sdk.reconnect import (
    MAX_HINT_S,
    ReconnectPolicy,
    Wait,
    WaitReason,
    hint_from_reason,
    next_delay,
    parse_retry_after,
)

# -- next_delay: the pure decision ------------------------------------------------------------

hints = st.none() | st.integers(0, 2_000_000)
retry_afters = st.none() | st.floats(0, 2_000, allow_nan=False)


@given(
    st.integers(0, 10_000),
    hints,
    retry_afters,
    st.floats(0, 10, allow_nan=False),
    st.floats(0, 120, allow_nan=False),
    st.integers(0, 2**32),
    st.booleans(),
)
def test_next_delay_is_bounded_and_honours_hints(
    attempt: int,
    hint_ms: int | None,
    retry_after: float | None,
    base: float,
    cap: float,
    seed: int,
    unauthorized: bool,
) -> None:
    d = next_delay(
        attempt, hint_ms, retry_after, base, cap, random.Random(seed), unauthorized=unauthorized
    )
    hint_s = min((hint_ms or 0) / 1000, MAX_HINT_S)
    ra_s = min(retry_after or 0.0, MAX_HINT_S)
    assert d >= 0
    assert d <= max(cap, hint_s, ra_s) + 1e-9
    assert d >= hint_s and d >= ra_s  # the server's word is a floor
    if unauthorized:
        assert d >= cap / 2  # a 401 never retries in a tight loop
    else:
        assert d <= max(min(cap, base * 2.0 ** min(attempt, 62)), hint_s, ra_s) + 1e-9


@given(st.integers(0, 30), st.integers(0, 2**32))
def test_next_delay_without_hints_is_full_jitter(attempt: int, seed: int) -> None:
    rng = random.Random(seed)
    ceiling = min(15.0, 0.25 * 2**attempt)
    samples = [next_delay(attempt, None, None, 0.25, 15.0, rng) for _ in range(400)]
    assert all(0 <= s <= ceiling for s in samples)
    # full jitter: the whole [0, ceiling] range is used, not a band near the top
    assert min(samples) < 0.1 * ceiling
    assert max(samples) > 0.9 * ceiling
    assert 0.4 * ceiling < sum(samples) / len(samples) < 0.6 * ceiling


def test_next_delay_grows_then_caps() -> None:
    rng = random.Random(7)
    means = [
        sum(next_delay(a, None, None, 0.25, 4.0, rng) for _ in range(2000)) / 2000 for a in range(8)
    ]
    assert means[0] < means[1] < means[2] < means[3] < means[4]  # 0.125, 0.25, 0.5, 1, 2 s
    assert all(abs(m - 2.0) < 0.15 for m in means[4:])  # capped at 4 s: mean 2 s
    # a hint above the cap wins; one below it is a floor under the jitter
    assert next_delay(9, 30_000, None, 0.25, 4.0, rng) == 30.0
    assert all(next_delay(0, 800, None, 0.25, 4.0, rng) >= 0.8 for _ in range(100))
    assert next_delay(0, None, 3.0, 0.25, 4.0, rng) >= 3.0
    assert next_delay(10**9, None, None, 0.25, 4.0, rng) <= 4.0  # no overflow


def test_retry_after_and_the_close_reason_s_hint() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:05 GMT", now=1445412480.0) == 5.0
    assert hint_from_reason("drain; reconnect_after_ms=1234") == 1234
    assert hint_from_reason("bye") is None
    assert hint_from_reason(None) is None


# -- ReconnectPolicy: the attempt count and why each wait ---------------------------------------


class Drawn:
    """A random source whose draws hypothesis chooses, the bounds themselves included."""

    def __init__(self, fractions: list[float]) -> None:
        self.fractions = fractions
        self.i = 0

    def uniform(self, a: float, b: float) -> float:
        f = self.fractions[self.i % len(self.fractions)]
        self.i += 1
        return a + (b - a) * f


statuses = st.sampled_from([503, 401, 429, 500, 403])
outcomes = st.one_of(
    st.tuples(st.just("refused"), statuses, retry_afters),
    st.tuples(st.just("failed"), st.none(), st.none()),
    st.tuples(st.just("ended"), st.none() | st.floats(0, 7_200), hints),
)


@given(
    st.lists(outcomes, min_size=1, max_size=40),
    st.floats(0, 10, allow_nan=False),
    st.floats(0, 120, allow_nan=False),
    st.floats(0, 5, allow_nan=False),
    st.lists(st.sampled_from([0.0, 1.0]) | st.floats(0, 1), min_size=1, max_size=20),
)
def test_every_wait_is_within_the_cap_and_never_below_the_server_s_word(
    seq: list[tuple[str, Any, Any]],
    base: float,
    cap: float,
    stable: float,
    fractions: list[float],
) -> None:
    policy = ReconnectPolicy(base_s=base, cap_s=cap, stable_after_s=stable, rng=Drawn(fractions))
    attempt = 0  # the model of the count
    for kind, a, b in seq:
        hint_s = ra_s = 0.0
        if kind == "refused":
            wait = policy.refused(a, b)
            ra_s = min(b or 0.0, MAX_HINT_S)
            why = {503: WaitReason.REFUSED, 401: WaitReason.UNAUTHORIZED}.get(a, WaitReason.ERROR)
        elif kind == "failed":
            wait, why = policy.failed(), WaitReason.ERROR
        else:
            wait = policy.ended(a, b)
            hint_s = min((b or 0) / 1000, MAX_HINT_S)
            why = WaitReason.ERROR if a is None else WaitReason.CLOSE
            if a is not None and a >= stable:
                attempt = 0  # a connection that stayed up: the count starts again
        assert wait.why is why and wait.attempt == attempt
        attempt += 1
        assert policy.attempt == attempt
        floor = max(hint_s, ra_s)
        assert 0.0 <= wait.delay_s <= max(cap, floor) + 1e-9  # within [0, cap] unless told more
        assert wait.delay_s >= floor  # the server's word is a floor, even above the cap
        if why is WaitReason.UNAUTHORIZED:
            assert wait.delay_s >= cap / 2  # a 401 never retries in a tight loop
        elif floor == 0:
            assert wait.delay_s <= min(cap, base * 2.0 ** min(wait.attempt, 62)) + 1e-9


def test_refusals_spread_out_and_a_stable_connection_resets_the_count() -> None:
    policy = ReconnectPolicy(base_s=0.25, cap_s=4.0, stable_after_s=1.0, rng=Drawn([1.0]))
    waits = [policy.refused(503, None) for _ in range(6)]
    assert [w.delay_s for w in waits] == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0]  # the top of each band
    assert policy.refused(503, 30.0) == Wait(6, 30.0, WaitReason.REFUSED)  # Retry-After wins
    assert policy.ended(0.5, None).attempt == 7  # up half a second: not stable, no reset
    assert policy.ended(3600.0, 2_000) == Wait(0, 2.0, WaitReason.CLOSE)  # drained after an hour
    assert policy.attempt == 1
    assert policy.ended(None, None).why is WaitReason.ERROR  # closed before its hello


def test_a_401_waits_at_the_cap_and_bad_settings_are_refused() -> None:
    low = ReconnectPolicy(base_s=0.25, cap_s=8.0, rng=Drawn([0.0]))
    assert low.refused(401, None) == Wait(0, 4.0, WaitReason.UNAUTHORIZED)
    with pytest.raises(ValueError):
        ReconnectPolicy(base_s=-1.0, rng=random.Random())
    with pytest.raises(ValueError):
        ReconnectPolicy(cap_s=-0.1, rng=random.Random())
