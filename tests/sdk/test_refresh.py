"""The token refresh schedule with a fake clock and a scripted random source (no sleeps): due at a
jittered 60-85% of the remaining lifetime, one retry 10 s after a failure, nothing after a stop."""

from __future__ import annotations

import random

import jwt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.platform.sdk.refresh import (
    EARLIEST,
    LATEST,
    RETRY_AFTER_NS,
    RefreshPlan,
    token_expiry,
)

SECRET = "a test secret of thirty-two bytes"  # the SDK never verifies: any key will do
S = 1_000_000_000


def token(exp: object, **claims: object) -> str:
    """A signed token whose ``exp`` is whatever the test needs, a number or not (None: none)."""
    payload: dict[str, object] = {"sub": "desk-7", **claims}
    if exp is not None:
        payload["exp"] = exp
    return jwt.encode(payload, SECRET, algorithm="HS256")


class Scripted:
    """A random source that answers the same point of every interval it is asked for."""

    def __init__(self, at: float) -> None:
        self.at = at

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.at


def wall_s(clock: FakeClock) -> float:
    return clock.wall_ns() / S


def test_the_expiry_is_read_without_verifying() -> None:
    clock = FakeClock()
    exp = int(wall_s(clock)) + 900
    assert token_expiry(token(exp)) == exp
    # audience, issuer and an expiry long past: nothing is checked, only read
    assert token_expiry(token(1.0, aud="other", iss="x")) == 1.0
    assert token_expiry(token(None)) is None
    assert token_expiry(token("soon")) is None
    assert token_expiry(token(True)) is None
    assert token_expiry("not a jwt") is None
    assert token_expiry("") is None


@pytest.mark.parametrize(("at", "share"), [(0.0, EARLIEST), (1.0, LATEST), (0.5, 0.725)])
def test_due_at_a_jittered_point_of_the_remaining_lifetime(at: float, share: float) -> None:
    clock = FakeClock()
    plan = RefreshPlan(clock, Scripted(at))
    exp = int(wall_s(clock)) + 900  # a 15-minute token, minted now
    left_ns = exp * S - clock.wall_ns()
    due = plan.start(token(exp))
    assert due == plan.due_ns == clock.now_ns() + int(left_ns * share)


@given(
    left_s=st.integers(min_value=1, max_value=86_400),
    elapsed_s=st.integers(min_value=0, max_value=86_400),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_the_deadline_stays_inside_the_window(left_s: int, elapsed_s: int, seed: int) -> None:
    clock = FakeClock()
    clock.advance(elapsed_s * S)
    exp = int(wall_s(clock)) + left_s
    left_ns = exp * S - clock.wall_ns()
    due = RefreshPlan(clock, random.Random(seed)).start(token(exp))
    assert due is not None
    assert clock.now_ns() + int(left_ns * EARLIEST) <= due <= clock.now_ns() + int(left_ns * LATEST)


def test_tokens_minted_together_refresh_apart() -> None:
    """The point of the jitter: a desk's tokens minted at the open do not come back together."""
    clock = FakeClock()
    exp = int(wall_s(clock)) + 900
    rng = random.Random(7)
    dues = [RefreshPlan(clock, rng).start(token(exp)) for _ in range(200)]
    spread_s = (max(d for d in dues if d) - min(d for d in dues if d)) / S
    window_s = (LATEST - EARLIEST) * 900
    assert spread_s > 0.8 * window_s
    assert len(set(dues)) == len(dues)


def test_nothing_to_schedule_without_an_expiry_or_once_past_it() -> None:
    clock = FakeClock()
    plan = RefreshPlan(clock, Scripted(0.5))
    assert plan.start("opaque") is None and plan.due_ns is None
    assert plan.start(token(int(wall_s(clock)) - 1)) is None and plan.due_ns is None
    assert plan.start(token(int(wall_s(clock)))) is None


def test_an_accepted_refresh_schedules_the_next_from_the_new_token() -> None:
    clock = FakeClock()
    plan = RefreshPlan(clock, Scripted(0.0))
    first = plan.start(token(int(wall_s(clock)) + 100))
    assert first == clock.now_ns() + 60 * S
    clock.advance(60 * S)
    plan.begin()
    assert plan.due_ns is None  # in flight: nothing else is due
    new_exp = int(wall_s(clock)) + 100
    assert plan.accepted(token(new_exp)) == clock.now_ns() + 60 * S


def test_a_failure_is_retried_once_ten_seconds_on_then_the_token_is_let_expire() -> None:
    clock = FakeClock()
    plan = RefreshPlan(clock, Scripted(0.0))
    plan.start(token(int(wall_s(clock)) + 900))
    clock.advance(540 * S)
    plan.begin()
    assert plan.failed() == clock.now_ns() + RETRY_AFTER_NS == clock.now_ns() + 10 * S
    clock.advance(10 * S)
    plan.begin()
    assert plan.failed() is None and plan.due_ns is None  # let it expire


def test_a_success_after_a_retry_earns_a_retry_again() -> None:
    clock = FakeClock()
    plan = RefreshPlan(clock, Scripted(0.0))
    plan.start(token(int(wall_s(clock)) + 900))
    plan.begin()
    assert plan.failed() is not None
    plan.begin()
    plan.accepted(token(int(wall_s(clock)) + 900))
    plan.begin()
    assert plan.failed() == clock.now_ns() + RETRY_AFTER_NS


def test_a_stop_cancels_what_was_due_and_a_late_answer_schedules_nothing() -> None:
    clock = FakeClock()
    plan = RefreshPlan(clock, Scripted(0.5))
    plan.start(token(int(wall_s(clock)) + 900))
    assert plan.due_ns is not None
    plan.stop()  # the connection ended (or the terminal closed)
    assert plan.due_ns is None
    assert plan.accepted(token(int(wall_s(clock)) + 900)) is None and plan.due_ns is None
    assert plan.failed() is None and plan.due_ns is None
    # the next connection starts its own plan
    assert plan.start(token(int(wall_s(clock)) + 900)) is not None
