"""Admission on the upgrade path: a token bucket, and a 503 when it is empty — never a queue;
and a per-source-address cap on failed upgrades, so refusals stay cheap.

design (Connections): 1,200 upgrades/s sustained, bursts of 2,500 per host, split across writer
processes. At the open thousands of terminals reconnect inside 1-2 s; queueing them would turn
timeouts into retries into a larger second wave (the seed's metastable collapse). Refusing fast
with a jittered Retry-After spreads the wave instead. A pure state machine on an injected clock.

The bucket is charged only for verified terminals: a tokenless flood that spent it (measured:
~2,190 tokenless upgrades/s made 35% of real connects get 503) was a denial of service for the
price of a TCP connect. What fails is counted per source address instead (``FailedUpgrades``),
and an address past its allowance is refused (429) unless its token is one the verifier has
already verified (a cache hit costs nothing, so the cap has nothing to guard there).
An IPv6 source counts by its /64 (``source_key``): one host commonly holds a whole /64.
"""

from __future__ import annotations

import ipaddress
import math
import random
from collections import OrderedDict

__all__ = ["FailedUpgrades", "TokenBucket", "source_key"]


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


class FailedUpgrades:
    """Failed upgrades per source address: each address may fail ``burst`` times, regaining one
    failure every ``1 / per_s`` seconds; past that ``allowed`` says no until it has regained one.

    Bounded: at most ``max_addresses`` entries, the least recently failed evicted first; an
    address that has regained its whole allowance is forgotten on its next lookup. A flood from
    more addresses than the table holds evicts entries and gets through the cap, to 401s that
    cost no admission budget and no signature check (only a well-formed token reaches the
    verifier), so the cap is a cheapness measure, not the only line of defence."""

    __slots__ = ("_table", "burst", "max_addresses", "per_s", "throttled")

    def __init__(self, burst: int, per_s: float, max_addresses: int) -> None:
        if burst < 0 or per_s <= 0 or max_addresses < 1:
            raise ValueError(
                f"need burst >= 0, per_s > 0, max_addresses >= 1, got {burst}, {per_s}, "
                f"{max_addresses}"
            )
        self.burst = burst  # 0: the cap is off
        self.per_s = per_s
        self.max_addresses = max_addresses
        self._table: OrderedDict[str, tuple[float, int]] = OrderedDict()  # addr -> (left, ts)
        self.throttled = 0  # upgrades refused because their address was over its allowance

    def _left(self, address: str, now_ns: int) -> float:
        entry = self._table.get(address)
        if entry is None:
            return float(self.burst)
        left, ts = entry
        left = min(float(self.burst), left + max(0, now_ns - ts) * self.per_s / 1e9)
        if left >= self.burst:
            del self._table[address]  # back to a clean slate: nothing worth remembering
        return left

    def exhausted(self, address: str, now_ns: int) -> bool:
        """Has ``address`` used up its allowance? A question only: nothing is counted."""
        return self.burst != 0 and self._left(address, now_ns) < 1.0

    def allowed(self, address: str, now_ns: int) -> bool:
        """May an upgrade from ``address`` be looked at? False counts it as throttled."""
        if not self.exhausted(address, now_ns):
            return True
        self.throttled += 1
        return False

    def failed(self, address: str, now_ns: int) -> None:
        """An upgrade from ``address`` was refused (bad or missing token)."""
        if self.burst == 0:
            return
        left = max(0.0, self._left(address, now_ns) - 1.0)
        table = self._table
        table[address] = (left, now_ns)
        table.move_to_end(address)
        while len(table) > self.max_addresses:
            table.popitem(last=False)

    def retry_after_s(self, address: str, now_ns: int) -> int:
        """Whole seconds until ``address`` may fail once more (RFC 9110 §10.2.3), at least 1."""
        missing = 1.0 - self._left(address, now_ns)
        return max(1, math.ceil(missing / self.per_s))

    def __len__(self) -> int:
        return len(self._table)


def source_key(address: str) -> str:
    """What the failed-upgrade cap counts a peer address as: an IPv4 address as itself, an
    IPv6 one by its /64. A single host is routinely given a whole /64 (RFC 6177) and can pick
    any of its 2**64 addresses per connect, so counting full IPv6 addresses let one host fail
    without limit and flush the table. An IPv4-mapped IPv6 address (a dual-stack socket's view
    of an IPv4 peer) counts as the IPv4 address. Anything unparsable is its own key."""
    if ":" not in address:
        return address  # IPv4 (or "?"): the common case, no parsing
    try:
        ip = ipaddress.IPv6Address(address)
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
