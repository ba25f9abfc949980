"""Where the node's ticks come from: the venue simulator with two feed handlers per venue, or
a replay file; and the door (``TickGate``) they enter through.

The doors where ticks enter (handlers, NATS, the replay) share one gate: refused ticks are
counted per venue and reason, and logged with where they came from.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from monotape.clock import Clock
from monotape.config import Config
from monotape.log import log_event
from monotape.platform.feeds.epochs import FileEpochStore
from monotape.platform.feeds.handler import FeedHandler, make_handler_pair
from monotape.platform.feeds.replay import ReplayAdapter
from monotape.platform.feeds.simulator import (
    VenueSimulator,
    build_universe,
    venues_with_update_ids,
)
from monotape.platform.feeds.validate import TickGate
from monotape.platform.model import Instrument

__all__ = ["Sources", "build_sources"]


@dataclass
class Sources:
    universe: list[Instrument]
    gate: TickGate
    simulator: VenueSimulator | None = None
    replay: ReplayAdapter | None = None
    handlers: list[FeedHandler] = field(default_factory=list)


def build_sources(cfg: Config, clock: Clock, epochs: FileEpochStore) -> Sources:
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
    feeds = cfg.feeds
    universe = build_universe(sim.venues, sim.instruments, sim.seed)
    gate = TickGate(universe, clock.now_ns)
    sources = Sources(universe, gate, simulator=VenueSimulator(universe, sim, clock))
    with_ids = venues_with_update_ids(universe)
    rng = random.Random(sim.seed)
    for venue in sorted({i.venue for i in universe}):
        sources.handlers.extend(
            make_handler_pair(
                venue,
                epochs,
                clock,
                feeds.lag_min_ms,
                feeds.lag_max_ms,
                rng,
                update_ids=venue in with_ids,
                fence_ns=int(feeds.epoch_fence_ms * 1e6),
                gate=gate,
            )
        )
    return sources


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
