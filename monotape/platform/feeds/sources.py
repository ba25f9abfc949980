"""Where the node's ticks come from: the venue simulator with two feed handlers per venue, or
a replay file; and the door (``TickGate``) they enter through.

The doors where ticks enter (handlers, NATS, the replay) share one gate: refused ticks are
counted per venue and reason, and logged with where they came from.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field

from monotape.clock import Clock
from monotape.config import Config
from monotape.log import log_event
from monotape.platform.feeds.epochs import EpochStore
from monotape.platform.feeds.handler import FeedHandler, pair_lags
from monotape.platform.feeds.replay import ReplayAdapter, load_replay
from monotape.platform.feeds.simulator import (
    VenueSimulator,
    build_universe,
    venues_with_update_ids,
)
from monotape.platform.feeds.validate import TickGate
from monotape.platform.model import Instrument

__all__ = [
    "HandlerPlan",
    "Sources",
    "build_handler",
    "build_sources",
    "handler_plans",
    "universe_of",
]


@dataclass(frozen=True)
class HandlerPlan:
    """One feed handler of the simulator's venues, as the node and the host's handler processes
    both build it: the same lag (drawn from the simulator's seed in venue order) and the same
    update-id rule, so a handler process behaves as its in-process twin would."""

    venue: str
    name: str  # "A" or "B": the ``handler`` label and the ticks' ``handler`` field
    lag_ns: int
    update_ids: bool

    @property
    def key(self) -> str:
        """Unique across venues: ``XNAS-A``. The handler process's ``RoleSpec.handler``."""
        return f"{self.venue}-{self.name}"


@dataclass
class Sources:
    universe: list[Instrument]
    gate: TickGate
    simulator: VenueSimulator | None = None
    replay: ReplayAdapter | None = None
    handlers: list[FeedHandler] = field(default_factory=list)


def build_sources(cfg: Config, clock: Clock, epochs: EpochStore) -> Sources:
    """A replay when ``feeds.replay`` names a file, else the simulator and its handlers."""
    if cfg.feeds.replay:
        replay = ReplayAdapter(
            cfg.feeds.replay,
            clock,
            speed=cfg.feeds.replay_speed,
            start_delay_ns=int(cfg.feeds.replay_start_delay_s * 1e9),
        )
        gate = _replay_gate(replay, clock, cfg.feeds.replay_speed)
        return Sources(list(replay.universe), gate, replay=replay)
    sim = cfg.simulator
    universe = build_universe(sim.venues, sim.instruments, sim.seed)
    gate = TickGate(universe, clock.now_ns)
    sources = Sources(universe, gate, simulator=VenueSimulator(universe, sim, clock))
    for plan in handler_plans(cfg, universe):
        sources.handlers.append(build_handler(plan, cfg, epochs, clock, gate))
    return sources


def universe_of(cfg: Config) -> list[Instrument]:
    """The instrument dictionary ``build_sources`` would build (the replay file's, or the
    simulator's), without the sources: a writer process greets terminals with it."""
    if cfg.feeds.replay:
        universe, _lines = load_replay(cfg.feeds.replay)
        return list(universe)
    sim = cfg.simulator
    return list(_simulated_universe(sim.venues, sim.instruments, sim.seed))


@functools.lru_cache(maxsize=4)
def _simulated_universe(venues: int, instruments: int, seed: int) -> tuple[Instrument, ...]:
    """Built once per process (frozen instruments, shared): a sequencer's warm standby builds
    it before its takeover, so the takeover does not (13-20 ms of a restart: docs/processes.md)."""
    return tuple(build_universe(venues, instruments, seed))


def handler_plans(cfg: Config, universe: list[Instrument] | None = None) -> list[HandlerPlan]:
    """The simulator's feed handlers, two per venue (A, then B), venues in sorted order; none
    for a replay (its lines are ticks as handlers delivered them: they go straight to the bus).
    ``universe``: the one ``build_universe`` makes from ``cfg.simulator`` (built if None)."""
    if cfg.feeds.replay:
        return []
    sim = cfg.simulator
    if universe is None:
        universe = build_universe(sim.venues, sim.instruments, sim.seed)
    with_ids = venues_with_update_ids(universe)
    rng = random.Random(sim.seed)
    plans: list[HandlerPlan] = []
    for venue in sorted({i.venue for i in universe}):
        lag_a, lag_b = pair_lags(rng, cfg.feeds.lag_min_ms, cfg.feeds.lag_max_ms)
        ids = venue in with_ids
        plans.append(HandlerPlan(venue, "A", lag_a, ids))
        plans.append(HandlerPlan(venue, "B", lag_b, ids))
    return plans


def build_handler(
    plan: HandlerPlan, cfg: Config, epochs: EpochStore, clock: Clock, gate: TickGate
) -> FeedHandler:
    """The handler ``plan`` describes (not started): same fence, gate and limits everywhere."""
    return FeedHandler(
        plan.venue,
        plan.name,
        plan.lag_ns,
        epochs,
        clock,
        update_ids=plan.update_ids,
        fence_ns=int(cfg.feeds.epoch_fence_ms * 1e6),
        gate=gate,
    )


def _replay_gate(replay: ReplayAdapter, clock: Clock, speed: float) -> TickGate:
    """The replay's door: lines refused at load are counted and logged with their line."""
    gate = TickGate(replay.universe, clock.now_ns)
    for r in replay.refused:
        gate.refuse(r.venue, r.reason, f"{replay.path} line {r.lineno}", r.detail)
    for lineno, gap_ms in replay.long_gaps[:3]:
        log_event(
            "replay_pause",
            level="warning",
            where=f"{replay.path} line {lineno}",
            pause_s=round(gap_ms / 1e3, 1),
            speed=speed,
            long_pauses=len(replay.long_gaps),
        )
    return gate
