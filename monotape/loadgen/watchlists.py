"""Deterministic terminal watchlists with heavy, Zipf-like sharing (the load the fan-out serves).

design (The workload): watchlists are heavily shared; 4,200 connections collapse to about 260
distinct subscription sets. Traders on one desk run the desk's list; a popular few desk lists
cover most screens; a few traders personalise theirs.

The distribution (quoted by the benchmarks; ``describe_distribution`` renders it):

- The universe is cut into *sectors*: runs of ``sector_size`` consecutive keys in sorted order
  (so mostly one venue per sector, as a desk covers a market).
- ``templates`` desk lists. Template ``k`` has a home sector (drawn uniformly), a size drawn
  uniformly from ``size_range`` (10..40 by default), about 80% of its symbols from the home sector
  and the rest from anywhere in the universe (the cross-market names every desk watches).
- Each connection picks template ``k`` (rank 1..templates) with probability proportional to
  ``1 / k**s`` (Zipf; s = 1.1 by default: rank 1 is ~21% of screens, the top 10 ~57%).
- A fraction ``personal`` (1.5% by default) of connections personalise: they swap 1-3 of the
  template's symbols for others from the same sector, which makes their set (almost surely) unique.

With the defaults, 4,200 connections give about 260 distinct sets (236..275 over seeds 0..19):
~195 of the 200 templates are used (the rarest has ~2.6 expected users) plus ~63 personal sets.
Deterministic for a given ``seed`` (``random.Random``: ``sample`` and ``choices`` are stable
across CPython releases).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import accumulate

__all__ = ["describe_distribution", "zipf_watchlists"]

TEMPLATES = 200
ZIPF_S = 1.1
PERSONAL = 0.015
SECTOR_SIZE = 60
HOME_SHARE = 0.8


def zipf_watchlists(
    universe_keys: Sequence[str],
    connections: int,
    seed: int,
    *,
    templates: int = TEMPLATES,
    s: float = ZIPF_S,
    size_range: tuple[int, int] = (10, 40),
    personal: float = PERSONAL,
    sector_size: int = SECTOR_SIZE,
) -> list[list[str]]:
    """One watchlist (keys, in a stable order) per connection; see the module docstring."""
    lo, hi = size_range
    if not 1 <= lo <= hi:
        raise ValueError(f"size_range must be 1 <= lo <= hi, got {size_range}")
    keys = sorted(set(universe_keys))
    if len(keys) < hi:
        raise ValueError(f"universe of {len(keys)} keys is smaller than a {hi}-symbol watchlist")
    if templates < 1 or connections < 0:
        raise ValueError("templates must be >= 1 and connections >= 0")
    rng = random.Random(seed)
    n = len(keys)
    sector_size = max(sector_size, hi)
    sectors = [keys[i : i + sector_size] for i in range(0, n, sector_size)]
    if len(sectors) > 1 and len(sectors[-1]) < hi:
        sectors[-2].extend(sectors.pop())  # keep every sector able to fill a list on its own

    desk_lists: list[tuple[list[str], list[str]]] = []  # (list, its home sector)
    for _ in range(templates):
        home = sectors[rng.randrange(len(sectors))]
        size = rng.randint(lo, hi)
        n_home = min(len(home), max(1, round(size * HOME_SHARE)))
        chosen = set(rng.sample(home, n_home))
        while len(chosen) < size:
            chosen.add(keys[rng.randrange(n)])
        desk_lists.append((sorted(chosen), home))

    cum_weights = list(accumulate(1.0 / (k**s) for k in range(1, templates + 1)))
    picks = rng.choices(range(templates), cum_weights=cum_weights, k=connections)
    out: list[list[str]] = []
    for t in picks:
        base, home = desk_lists[t]
        if rng.random() >= personal:
            out.append(list(base))
            continue
        mine = set(base)
        for _ in range(rng.randint(1, 3)):
            candidates = [k for k in home if k not in mine] or [k for k in keys if k not in mine]
            mine.discard(rng.choice(sorted(mine)))
            mine.add(rng.choice(candidates))
        out.append(sorted(mine))
    return out


def describe_distribution(
    *,
    templates: int = TEMPLATES,
    s: float = ZIPF_S,
    size_range: tuple[int, int] = (10, 40),
    personal: float = PERSONAL,
    sector_size: int = SECTOR_SIZE,
) -> str:
    """One line naming the parameters, for benchmark output."""
    return (
        f"{templates} desk templates (sectors of {sector_size} keys, {HOME_SHARE:.0%} home sector),"
        f" Zipf s={s} over templates, sizes {size_range[0]}..{size_range[1]},"
        f" {personal:.1%} personalised (1-3 swaps)"
    )
