"""Arrival traces: what a load run replays, second by second (docs/load.md).

A trace is JSON: per-second ``connects`` and ``disconnects`` counts (the same length, one entry
per second of ``duration_s``), a subscription-cardinality distribution (watchlist sizes with
weights) and the share of disconnects that are abrupt (an RST). ``storm_trace`` builds the
correlated shape the issue is about (a quiet baseline, a disconnect wave, then thousands of
reconnects inside 1-2 s at the open and again at scheduled data releases); ``poisson_like``
builds its contrast: a Poisson process with the same number of connects over the same duration,
hence the same mean rate, and no spike. ``plan_sessions`` turns a trace into one schedule per
terminal, deterministically for a seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec
from msgspec import Meta

from monotape.platform.wire.requests import MAX_KEYS

__all__ = [
    "DEFAULT_CARDINALITY",
    "SessionPlan",
    "SizeWeight",
    "Trace",
    "TraceError",
    "load_trace",
    "plan_sessions",
    "poisson_like",
    "storm_trace",
]

Count = Annotated[int, Meta(ge=0, le=1_000_000)]
Share = Annotated[float, Meta(ge=0, le=1)]

_WAVE_MIN: Final = 20  # a wave second has at least this many connects...
_WAVE_FACTOR: Final = 4.0  # ...and at least this multiple of the trace's median second


class TraceError(ValueError):
    """A trace file that is not a valid trace; the message names the field (``$.connects[3]``)."""


class SizeWeight(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One point of the cardinality distribution: ``weight`` of the terminals watch ``size``."""

    size: Annotated[int, Meta(ge=1, le=MAX_KEYS)]
    weight: Annotated[float, Meta(gt=0)]


# Roughly the workload (docs/design.md): desk lists of 10-40 symbols, a few scalpers on a handful.
DEFAULT_CARDINALITY: Final = (
    SizeWeight(3, 0.1),
    SizeWeight(10, 0.3),
    SizeWeight(20, 0.35),
    SizeWeight(40, 0.25),
)


class Trace(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One arrival trace (docs/load.md). Second ``i`` of the run has ``connects[i]`` terminals
    connecting (spread uniformly inside the second) and ``disconnects[i]`` leaving."""

    version: Literal[1] = 1
    name: str = "trace"
    connects: Annotated[list[Count], Meta(min_length=1, max_length=86_400)]
    disconnects: list[Count]
    cardinality: Annotated[list[SizeWeight], Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: list(DEFAULT_CARDINALITY)
    )
    abrupt_fraction: Share = 0.06  # about 6% of disconnects are abrupt (RST)

    def __post_init__(self) -> None:
        if len(self.disconnects) != len(self.connects):
            raise ValueError(
                f"`disconnects` has {len(self.disconnects)} entries, `connects`"
                f" {len(self.connects)} (one of each per second) - at `$.disconnects`"
            )
        alive = 0
        for i, (c, d) in enumerate(zip(self.connects, self.disconnects, strict=True)):
            if d > alive:
                raise ValueError(
                    f"{d} disconnects but only {alive} terminals connected before second {i}"
                    f" - at `$.disconnects[{i}]`"
                )
            alive += c - d

    @property
    def duration_s(self) -> int:
        return len(self.connects)

    @property
    def total_connects(self) -> int:
        return sum(self.connects)

    @property
    def total_disconnects(self) -> int:
        return sum(self.disconnects)

    @property
    def mean_connects_per_s(self) -> float:
        return self.total_connects / self.duration_s

    def waves(self) -> list[tuple[int, int, int]]:
        """Arrival waves as (first second, last second, connects): maximal runs of seconds with
        at least max(20, 4 x the median second) connects. A Poisson trace has none."""
        median = sorted(self.connects)[len(self.connects) // 2]
        threshold = max(_WAVE_MIN, _WAVE_FACTOR * median)
        out: list[tuple[int, int, int]] = []
        for i, c in enumerate(self.connects):
            if c < threshold:
                continue
            if out and out[-1][1] == i - 1:
                first, _, n = out[-1]
                out[-1] = (first, i, n + c)
            else:
                out.append((i, i, c))
        return out

    def last_wave_s(self) -> int:
        """The first second of the last arrival wave (0 without waves)."""
        waves = self.waves()
        return waves[-1][0] if waves else 0


_DECODER: Final = msgspec.json.Decoder(Trace)


def parse_trace(data: bytes | str) -> Trace:
    """A trace from JSON text; TraceError naming the field on anything invalid."""
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(f"invalid trace: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(f"trace is not JSON: {exc}") from exc


def load_trace(path: str | Path) -> Trace:
    """Read a trace file (docs/load.md); TraceError names the file and the bad field."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TraceError(f"{p}: {exc.strerror or exc}") from exc
    try:
        return parse_trace(data)
    except TraceError as exc:
        raise TraceError(f"{p}: {exc}") from exc


def dump_trace(trace: Trace) -> bytes:
    return msgspec.json.format(msgspec.json.encode(trace), indent=0)


def _poisson(rng: random.Random, lam: float) -> int:
    """A Poisson variate (Knuth for small means, a rounded normal past 30: fine for traces)."""
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def storm_trace(
    *,
    terminals: int = 2_000,
    duration_s: int = 30,
    open_at_s: int = 5,
    open_spread_s: int = 1,
    releases: Sequence[int] = (20,),
    release_share: float = 0.5,
    release_spread_s: int = 1,
    baseline_per_s: float = 2.0,
    cardinality: Sequence[SizeWeight] = DEFAULT_CARDINALITY,
    abrupt_fraction: float = 0.06,
    name: str = "open-storm",
    seed: int = 1,
) -> Trace:
    """A correlated open + data-release storm.

    - a quiet baseline: about ``baseline_per_s`` connects and disconnects a second (Poisson);
    - the open: one second before ``open_at_s`` every connected terminal drops (the disconnect
      wave), then ``terminals`` connect inside ``open_spread_s`` seconds (1-2);
    - each data release at second ``r``: ``release_share`` of the connected terminals drop in
      second ``r - 1`` and reconnect inside ``release_spread_s`` seconds from ``r``.
    """
    if not 1 <= open_spread_s <= 2 or not 1 <= release_spread_s <= 2:
        raise ValueError("a storm lands inside 1-2 s: spreads must be 1 or 2")
    if not 1 <= open_at_s < duration_s - open_spread_s:
        raise ValueError(f"open_at_s must be in [1, {duration_s - open_spread_s - 1}]")
    if any(not open_at_s + open_spread_s < r < duration_s - release_spread_s for r in releases):
        raise ValueError(f"releases must fall after the open and before {duration_s}")
    if not 0 <= release_share <= 1:
        raise ValueError("release_share must be in [0, 1]")
    rng = random.Random(seed)
    connects = [0] * duration_s
    disconnects = [0] * duration_s
    release_set = set(releases)
    alive = 0
    s = 0
    while s < duration_s:
        if s == open_at_s - 1:
            disconnects[s] = alive  # the disconnect wave before the open: no arrivals in it
            alive = 0
            s += 1
            continue
        elif s + 1 in release_set:
            disconnects[s] = round(alive * release_share)
            alive -= disconnects[s]
        else:
            disconnects[s] = min(alive, _poisson(rng, baseline_per_s))
            alive -= disconnects[s]
        if s == open_at_s:
            for k in range(open_spread_s):
                connects[s + k] = terminals // open_spread_s + (
                    1 if k < terminals % open_spread_s else 0
                )
            alive += terminals
            s += open_spread_s
            continue
        if s in release_set:
            back = disconnects[s - 1]
            for k in range(release_spread_s):
                connects[s + k] = back // release_spread_s + (
                    1 if k < back % release_spread_s else 0
                )
            alive += back
            s += release_spread_s
            continue
        connects[s] = _poisson(rng, baseline_per_s)
        alive += connects[s]
        s += 1
    return Trace(
        name=name,
        connects=connects,
        disconnects=disconnects,
        cardinality=list(cardinality),
        abrupt_fraction=abrupt_fraction,
    )


def poisson_like(trace: Trace, seed: int = 1) -> Trace:
    """The contrast: the same number of connects over the same duration (so the same mean
    rate), placed as a Poisson process (uniform arrival times, given the count), and the same
    number of disconnects placed likewise (pushed later where nobody is connected yet)."""
    rng = random.Random(seed)
    n = trace.duration_s
    connects = [0] * n
    for _ in range(trace.total_connects):
        connects[rng.randrange(n)] += 1
    wanted = [0] * n
    for _ in range(trace.total_disconnects):
        wanted[rng.randrange(n)] += 1
    disconnects = [0] * n
    alive = carry = 0
    for i in range(n):
        want = wanted[i] + carry
        disconnects[i] = min(want, alive)
        carry = want - disconnects[i]
        alive += connects[i] - disconnects[i]
    return Trace(
        name=f"poisson-like({trace.name})",
        connects=connects,
        disconnects=disconnects,
        cardinality=list(trace.cardinality),
        abrupt_fraction=trace.abrupt_fraction,
    )


class SessionPlan(msgspec.Struct, array_like=True, frozen=True):
    """One terminal's schedule, in seconds from the start of the run."""

    sid: int
    connect_at: float
    disconnect_at: float | None  # None: stays to the end of the trace, then closes gracefully
    abrupt: bool
    size: int  # watchlist size


def plan_sessions(trace: Trace, seed: int = 1) -> list[SessionPlan]:
    """One schedule per connect of the trace. A disconnect in second ``t`` ends a random terminal
    among those that connected before ``t`` and have no end yet; times are uniform inside their
    second. Deterministic for a seed."""
    rng = random.Random(seed)
    sizes = [c.size for c in trace.cardinality]
    weights = [c.weight for c in trace.cardinality]
    connect_at: list[float] = []
    ends: dict[int, tuple[float, bool]] = {}
    alive: list[int] = []  # connected in an earlier second, no end yet
    for t in range(trace.duration_s):
        for _ in range(trace.disconnects[t]):
            j = rng.randrange(len(alive))
            alive[j], alive[-1] = alive[-1], alive[j]
            sid = alive.pop()
            ends[sid] = (t + rng.random(), rng.random() < trace.abrupt_fraction)
        fresh = [len(connect_at) + k for k in range(trace.connects[t])]
        connect_at.extend(t + rng.random() for _ in fresh)
        alive.extend(fresh)
    drawn = rng.choices(sizes, weights=weights, k=len(connect_at))
    plans: list[SessionPlan] = []
    for sid, at in enumerate(connect_at):
        end = ends.get(sid)
        plans.append(
            SessionPlan(
                sid,
                at,
                max(end[0], at) if end else None,
                end[1] if end else False,
                drawn[sid],
            )
        )
    return plans
