"""Admission on the upgrade path: a token bucket, and a 503 when it is empty — never a queue.

DESIGN (Connections): 1,200 upgrades/s sustained, bursts of 2,500 per host, split across writer
processes. At the open thousands of terminals reconnect inside 1-2 s; queueing them would turn
timeouts into retries into a larger second wave (the seed's metastable collapse). Refusing fast
with a jittered Retry-After spreads the wave instead. A pure state machine on an injected clock.
"""

from __future__ import annotations

import random

__all__ = ["TokenBucket"]


class TokenBucket:
    def __init__(
        self, rate_per_s: float, burst: int, now_ns: int, *, rng: random.Random | None = None
    ) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError(f"need rate > 0 and burst >= 1, got {rate_per_s}, {burst}")
        self.rate = rate_per_s
        self.burst = burst
        self._tokens = float(burst)
        self._ts = now_ns
        self._rng = rng or random.Random()
        self.admitted = 0
        self.rejected = 0

    def _refill(self, now_ns: int) -> None:
        if now_ns > self._ts:
            self._tokens = min(self.burst, self._tokens + (now_ns - self._ts) * self.rate / 1e9)
            self._ts = now_ns

    def take(self, now_ns: int) -> bool:
        """Admit one upgrade if a token is there."""
        self._refill(now_ns)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self.admitted += 1
            return True
        self.rejected += 1
        return False

    def retry_after_s(self) -> int:
        """A jittered Retry-After (whole seconds, RFC 9110 §10.2.3): 1 to 2× the time the bucket
        needs to admit a full burst again, so refused terminals do not return together."""
        refill_s = self.burst / self.rate
        return max(1, round(self._rng.uniform(1.0, 2.0) * refill_s))

    @property
    def tokens(self) -> float:
        return self._tokens
