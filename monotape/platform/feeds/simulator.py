"""The venue simulator: what the feed handlers hear from the venues in the embedded default.

Figures (design: Workload): 6 venues, ~2,400 instruments, ``SimulatorConfig.rate`` ticks/s across
all venues, scheduled spikes at ``spike_rate`` (a macro print). Every step is vectorized with
numpy (instrument choice, price moves, timestamps, update ids); ``VenueUpdate`` objects are built
only at the end, so one core generates several hundred thousand updates per second.

Guarantees the ordering contract relies on: per instrument, ``venue_ts_ns`` strictly increases
(it is the ``seq`` of venues without update ids) and ``update_id`` strictly increases on venues
that have them, across restarts of the node too (ids count on from the wall clock).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np

from monotape.clock import Clock
from monotape.config import SimulatorConfig
from monotape.platform.model import Instrument

__all__ = ["VenueSimulator", "VenueUpdate", "build_universe", "venues_with_update_ids"]

# Real market identifier codes first; synthetic ones past them.
_VENUE_CODES = (
    "XNAS", "XNYS", "ARCX", "BATS", "EDGX", "IEXG",
    "BATY", "EDGA", "XASE", "XPHL", "XBOS", "XCHI", "MEMX", "LTSE", "XCIS", "EPRL",
)  # fmt: skip
_WELL_KNOWN = (
    "AAPL", "MSFT", "NVDA", "AMZN", "GOOGL", "META", "TSLA", "AVGO", "JPM", "V", "XOM", "UNH",
    "SPY", "QQQ", "IWM", "TLT", "GLD", "AMD", "NFLX", "COST", "WMT", "BAC", "KO", "PEP",
)  # fmt: skip
_MAX_CATCH_UP_NS = 250_000_000  # one step produces at most 0.25 s worth: bounded catch-up
_UNIFORM_SHARE = 0.2  # of the flow spread evenly, so every name ticks (>=1.6/s at 20k/s)
_BURST_P = 0.01  # chance that a move is a burst of several ticks
_MIN_TICKS = 20  # a price never walks below 20 ticks
_BLOCK = 2_048  # updates drawn per numpy pass (VenueSimulator._take says why)


class VenueUpdate(msgspec.Struct, gc=False):
    """One top-of-book change as the venue publishes it (prices scaled, see ``Instrument``)."""

    iid: int
    venue: str
    update_id: int | None
    venue_ts_ns: int
    bid: int
    ask: int
    last: int
    size: int


def _venue_code(i: int) -> str:
    return _VENUE_CODES[i] if i < len(_VENUE_CODES) else f"V{i:03d}"


def _symbols(count: int, rng: np.random.Generator) -> list[str]:
    seen = set(_WELL_KNOWN[:count])
    out = list(_WELL_KNOWN[:count])
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    while len(out) < count:
        sym = "".join(rng.choice(letters, size=int(rng.integers(2, 5))).tolist())
        if sym not in seen:
            seen.add(sym)
            out.append(sym)
    return out


def build_universe(venues: int = 6, instruments: int = 2400, seed: int = 7) -> list[Instrument]:
    """``instruments`` lines: each symbol is listed on every venue (like US equities), ``iid`` =
    index (fits the wire's uint16), keys ``VENUE:SYMBOL``."""
    if not 1 <= venues <= 999:
        raise ValueError(f"venues must be 1..999, got {venues}")
    if not 1 <= instruments <= 65_536:
        raise ValueError(f"instruments must be 1..65536 (uint16 ids), got {instruments}")
    rng = np.random.default_rng(seed)
    n_symbols = math.ceil(instruments / venues)
    symbols = _symbols(n_symbols, rng)
    # Per symbol: 80% quoted in cents, 20% in 1/10000 (sub-penny, FX-like); tick sizes on the grid.
    decimals = np.where(rng.random(n_symbols) < 0.8, 2, 4)
    tick_2 = rng.choice([1, 5], size=n_symbols, p=[0.9, 0.1])
    tick_4 = rng.choice([1, 5, 25, 100], size=n_symbols, p=[0.4, 0.3, 0.2, 0.1])
    ticks = np.where(decimals == 2, tick_2, tick_4)
    universe = []
    for iid in range(instruments):
        s, v = divmod(iid, venues)
        venue = _venue_code(v)
        universe.append(
            Instrument(
                iid=iid,
                key=f"{venue}:{symbols[s]}",
                venue=venue,
                symbol=symbols[s],
                price_decimals=int(decimals[s]),
                tick_size=int(ticks[s]),
            )
        )
    return universe


def venues_with_update_ids(universe: Sequence[Instrument]) -> frozenset[str]:
    """Every other venue (in order of first appearance) publishes per-symbol update ids; the
    rest only timestamps, so both ``seq`` sources are exercised."""
    order = list(dict.fromkeys(inst.venue for inst in universe))
    return frozenset(order[::2])


class VenueSimulator:
    """All venues' updates, paced by ``clock``; ``step()`` returns what fell due since last call."""

    def __init__(self, universe: Sequence[Instrument], cfg: SimulatorConfig, clock: Clock) -> None:
        if not universe:
            raise ValueError("empty universe")
        self._cfg = cfg
        self._clock = clock
        self._rng = np.random.default_rng(cfg.seed)
        n = len(universe)
        rng = self._rng
        self._venue_of = [inst.venue for inst in universe]
        ids = venues_with_update_ids(universe)
        self._has_ids = np.array([inst.venue in ids for inst in universe], dtype=bool)
        self._tick = np.array([inst.tick_size for inst in universe], dtype=np.int64)
        scale = np.array([10**inst.price_decimals for inst in universe], dtype=np.float64)
        # Skewed activity (hot names, Zipf-like) plus a uniform floor so nothing goes quiet.
        ranks = rng.permutation(n) + 1.0
        zipf = 1.0 / ranks
        weights = _UNIFORM_SHARE / n + (1 - _UNIFORM_SHARE) * zipf / zipf.sum()
        self._cdf = np.cumsum(weights)
        self._cdf[-1] = 1.0
        dollars = np.exp(rng.uniform(math.log(5), math.log(500), n))
        self._bid = np.maximum((dollars * scale) // self._tick, _MIN_TICKS).astype(np.int64)
        self._spread = rng.choice(np.array([1, 1, 1, 2, 3], dtype=np.int64), size=n)
        # A venue's update ids never restart when a node does (issue 10: a restarted node drew
        # the same ids from the same seed, and screens held them back as older than what they
        # showed). Ids count on from the venue's clock in µs at start, ~1.8e15 (< 2**56: a full
        # record still carries it as a varint): above every id a previous run issued unless one
        # instrument ticked faster than 1,000,000/s (the busiest name at 190k/s: ~18k/s).
        offsets = rng.integers(1_000, 1_000_000, size=n, dtype=np.int64)
        self._next_id = offsets + clock.wall_ns() // 1_000
        self._start_ns = clock.now_ns()
        self._last_ns = self._start_ns
        self._last_wall = clock.wall_ns()
        self._carry = 0.0
        self._queue: list[tuple[int, int | None, int, int, int, int]] = []  # drawn ahead
        self._pos = 0  # the next undelivered update in _queue

    def rate_at(self, now_ns: int) -> float:
        """Configured updates/s at monotonic ``now_ns`` (spike windows included)."""
        cfg = self._cfg
        if cfg.spike_every_s > 0:
            t = (now_ns - self._start_ns) / 1e9
            k = math.floor(t / cfg.spike_every_s)
            if k >= 1 and t - k * cfg.spike_every_s < cfg.spike_duration_s:
                return cfg.spike_rate
        return cfg.rate

    def _expected(self, t0_ns: int, t1_ns: int) -> float:
        """Integral of ``rate_at`` over [t0, t1]: exact, so counts match the rate at any step."""
        cfg = self._cfg
        total = cfg.rate * (t1_ns - t0_ns) / 1e9
        if cfg.spike_every_s > 0 and cfg.spike_duration_s > 0:
            a = (t0_ns - self._start_ns) / 1e9
            b = (t1_ns - self._start_ns) / 1e9
            period = cfg.spike_every_s
            for k in range(max(1, math.floor(a / period)), math.floor(b / period) + 1):
                lo = k * period
                hi = lo + min(cfg.spike_duration_s, period)
                overlap = min(b, hi) - max(a, lo)
                if overlap > 0:
                    total += (cfg.spike_rate - cfg.rate) * overlap
        return total

    def step(self) -> list[VenueUpdate]:
        now = self._clock.now_ns()
        if now <= self._last_ns:
            return []
        t0 = max(self._last_ns, now - _MAX_CATCH_UP_NS)  # drop what a stall made us miss
        self._last_ns = now
        self._carry += self._expected(t0, now)
        count = int(self._carry)
        self._carry -= count
        if count == 0:
            return []
        # Venue timestamps spread evenly over (last wall, wall now]: globally strictly increasing
        # within the step and above every earlier step, even if the wall clock steps back.
        wall0 = self._last_wall
        wall1 = max(self._clock.wall_ns(), wall0 + count)
        wall0 = max(wall0, wall1 - (now - t0))
        self._last_wall = wall1
        span = wall1 - wall0
        ts = wall0 + (np.arange(1, count + 1, dtype=np.int64) * span) // count
        return self._take(count, ts.tolist())

    def _take(self, count: int, ts: list[int]) -> list[VenueUpdate]:
        """The next ``count`` drawn updates, stamped with ``ts``. Updates are drawn ahead in
        blocks of at least ``_BLOCK``: a 1 ms step at 20k/s needs ~20, and the ~30 numpy calls
        of a draw cost about the same for 20 as for 2,000 (measured with 1 ms steps: 0.146 ->
        0.115 CPU seconds per simulated second at 20k/s, 0.210 -> 0.145 at 120k/s)."""
        q = self._queue
        if self._pos + count > len(q):
            q = q[self._pos :] + self._draw(max(_BLOCK, count))
            self._queue, self._pos = q, 0
        pos = self._pos
        self._pos = pos + count
        venue_of = self._venue_of
        return [
            VenueUpdate(i, venue_of[i], u, t, b, a, la, sz)
            for (i, u, b, a, la, sz), t in zip(q[pos : pos + count], ts, strict=True)
        ]

    def _draw(self, count: int) -> list[tuple[int, int | None, int, int, int, int]]:
        """``count`` updates in time order: (iid, update id or None, bid, ask, last, size)."""
        rng = self._rng
        iids = np.searchsorted(self._cdf, rng.random(count), side="right").astype(np.int64)
        np.minimum(iids, len(self._cdf) - 1, out=iids)
        moves = rng.integers(-1, 2, size=count, dtype=np.int64)
        burst = rng.random(count) < _BURST_P
        moves[burst] *= rng.integers(2, 9, size=int(burst.sum()), dtype=np.int64)
        # Group by instrument (stable: time order kept within a group) so a name hit several
        # times in one step walks cumulatively and its update ids count up in time order.
        order = np.argsort(iids, kind="stable")
        g_iid = iids[order]
        first = np.ones(count, dtype=bool)
        first[1:] = g_iid[1:] != g_iid[:-1]
        starts = np.flatnonzero(first)
        pos = np.arange(count, dtype=np.int64)
        base = np.maximum.accumulate(np.where(first, pos, 0))  # index of the group's start
        rank = pos - base
        g_moves = moves[order]
        csum = np.cumsum(g_moves)
        g_path = csum - (csum[base] - g_moves[base])  # cumulative move within the group
        g_bid = np.maximum(self._bid[g_iid] + g_path, _MIN_TICKS)
        last_in_group = np.append(starts[1:] - 1, count - 1)
        touched = g_iid[starts]
        self._bid[touched] = g_bid[last_in_group]
        g_uid = self._next_id[g_iid] + rank
        self._next_id[touched] = g_uid[last_in_group] + 1
        bid_t = np.empty(count, dtype=np.int64)
        bid_t[order] = g_bid
        uid = np.empty(count, dtype=np.int64)
        uid[order] = g_uid
        spread = self._spread[iids] + (rng.random(count) < 0.15)
        tick = self._tick[iids]
        bid = bid_t * tick
        ask = (bid_t + spread) * tick
        last = (bid_t + rng.integers(0, spread + 1)) * tick
        size = rng.integers(1, 40, size=count, dtype=np.int64) * 100
        uids: list[int | None] = list(uid.tolist())
        for j in np.flatnonzero(~self._has_ids[iids]).tolist():
            uids[j] = None
        return list(
            zip(
                iids.tolist(),
                uids,
                bid.tolist(),
                ask.tolist(),
                last.tolist(),
                size.tolist(),
                strict=True,
            )
        )
