"""The venue role: the simulated venues (or the replay) in a process of their own (issue 12).

Simulator: every millisecond (the one-process pump's step, ``PUMP_INTERVAL_S``) the simulator
says what its venues published since the last step; each venue's updates are encoded once
(``feeds/venue_wire.py``) and the same messages go to BOTH of its handlers
(``run_dir/feed-<venue>-<handler>.sock``), in the same order with the same venue timestamps and
update ids, as a venue's multicast feed does: both twins derive the same versions. Sending never
waits: a handler that is down, or too slow to keep its socket drained, misses those updates
(dropped, counted per handler and reason): a real feed's packet loss, which its twin and the
epoch/version rules cover as they cover a restart.

Replay (``cfg.feeds.replay``): the file's lines are ticks *as a handler delivered them* (epoch
and seq included), so there is nothing for a handler to normalize: this process publishes them
straight on the bus (the IPC bus, or NATS), as the one-process node does (replay -> bus). The
handler processes stay idle in replay mode. A restarted venue process replays from the start:
the sequencer's admit refuses what it already applied (versions never go back).
"""

from __future__ import annotations

import asyncio

from monotape.clock import Clock, SystemClock
from monotape.config import Config
from monotape.log import log_event
from monotape.platform.bus.ipc import IpcTickBus
from monotape.platform.bus.ipc_collector import LinkCollector
from monotape.platform.bus.link import (
    MAX_MESSAGE_BYTES,
    Drop,
    LinkCounters,
    LinkSender,
)
from monotape.platform.bus.memory import TickBus
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.bus.nats_collector import NatsBusCollector
from monotape.platform.feeds.epochs import MemoryEpochStore
from monotape.platform.feeds.handler import PUMP_INTERVAL_S
from monotape.platform.feeds.sources import build_sources, handler_plans
from monotape.platform.feeds.venue_wire import per_venue, venue_batch
from monotape.platform.host.buses import role_bus
from monotape.platform.host.handler import exit_now
from monotape.platform.host.handler_role import feed_path
from monotape.platform.host.lifeline import ROLE_STOP_S, run_role, stop_on_signals, watch_host
from monotape.platform.host.spec import RoleSpec
from monotape.platform.host.telemetry import serve_metrics
from monotape.platform.role.collectors import IngestCollector
from monotape.platform.role.failures import StageFailures
from monotape.platform.role.kit import RoleKit
from monotape.platform.wire.batch import batch_from_ticks, split

__all__ = ["VenueRole", "main"]


class VenueRole:
    """The venues' side of the host: ``step`` does one pump step (tests call it with a fake
    clock); ``run`` drives it every millisecond."""

    def __init__(
        self,
        spec: RoleSpec,
        cfg: Config,
        clock: Clock | None = None,
        *,
        bus: TickBus | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.spec = spec
        self.cfg = cfg
        self.name = spec.name or "venue"
        self.clock: Clock = clock or SystemClock()
        # The node's own builder: the same simulator (seed, rates, spikes) or replay adapter.
        # Its handlers are not ours (they run in their own processes): never started here.
        sources = build_sources(cfg, self.clock, MemoryEpochStore())
        self.gate = sources.gate
        self.simulator = sources.simulator
        self.replay = sources.replay
        self.bus = bus  # replay only
        self.failures = StageFailures(self.clock.now_ns)
        self.batches = 0  # venue batches sent (their batch_seq)
        self.max_message_bytes = max_message_bytes
        # Per venue, the senders to both of its handlers (A first: the order is not a promise).
        self.feeds: dict[str, list[LinkSender]] = {}
        self.links: list[LinkCounters] = []
        for plan in handler_plans(cfg, sources.universe) if self.simulator else []:
            counters = LinkCounters(f"feed-{plan.key}")
            sender = LinkSender(feed_path(spec.run_dir, plan.key), counters, self.clock.now_ns)
            self.feeds.setdefault(plan.venue, []).append(sender)
            self.links.append(counters)
        self.updates = 0  # what the venues published
        self.replayed = 0

    def step(self) -> int:
        """Everything due since the last step: to both handlers of its venue (simulator) or on
        the bus (replay). How many updates or ticks."""
        if self.simulator is not None:
            updates = self.simulator.step()
            if not updates:
                return 0
            self.updates += len(updates)
            for venue, batch in per_venue(updates).items():
                # Columns once per venue; the same bytes to both twins (multicast).
                columns = venue_batch(venue, batch, self.batches)
                try:
                    messages = split(columns, self.max_message_bytes)
                except ValueError:  # a message size that holds no update: none could go
                    messages = []
                    for sender in self.feeds.get(venue, ()):
                        sender.counters.drop(Drop.OVERSIZE, columns.count)
                self.batches += len(messages)
                for sender in self.feeds.get(venue, ()):
                    for message in messages:
                        sender.send(message.buffer, message.count)
            return len(updates)
        if self.replay is not None:
            ticks = self.replay.step()
            if ticks and self.bus is not None:
                self.replayed += len(ticks)
                for replayed in batch_from_ticks(ticks):
                    self.bus.publish(replayed)
            return len(ticks)
        return 0

    def close(self) -> None:
        for senders in self.feeds.values():
            for sender in senders:
                sender.close()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except Exception as exc:  # contained: the next millisecond steps as usual
                self.failures.record("pump", exc)
            await asyncio.sleep(PUMP_INTERVAL_S)


def _replay_bus(role: VenueRole, clock: Clock) -> IpcTickBus | NatsTickBus:
    universe = role.replay.universe if role.replay is not None else []
    return role_bus(role.cfg, role.spec.run_dir, role.name, universe, clock.now_ns)


async def _serve(spec: RoleSpec, cfg: Config) -> int:
    stop = asyncio.Event()
    stop_on_signals(stop)
    watcher = asyncio.create_task(watch_host(spec.host_pid, stop))
    # The role kit (role/kit.py): the clock, the registry with the process metrics. The
    # simulated venues stand in for the exchanges: no stage of the tick's is measured here.
    kit = RoleKit(cfg, spec.name or "venue")
    role = VenueRole(spec, cfg, kit.clock)
    bus = role.bus = _replay_bus(role, kit.clock) if role.replay is not None else None
    registry = kit.registry
    registry.register(IngestCollector(lambda: role.gate, role.failures))
    links = list(role.links)
    if isinstance(bus, NatsTickBus):
        servers = [u.strip() for u in cfg.nats.servers.split(",") if u.strip()]
        await bus.connect(servers, timeout_s=cfg.nats.connect_timeout_s)
        registry.register(NatsBusCollector(bus))
    elif isinstance(bus, IpcTickBus):
        links.append(bus.counters)
    registry.register(LinkCollector(lambda: links))
    serve_metrics(registry, spec.run_dir, role.name)
    log_event(
        "venue_started",
        source="replay" if role.replay else "simulator",
        venues=sorted(role.feeds),
        handlers=len(role.links),
    )
    try:
        await role.run(stop)
    finally:
        watcher.cancel()
        role.close()
        if isinstance(bus, NatsTickBus):
            await bus.close(timeout=ROLE_STOP_S / 2)
        elif isinstance(bus, IpcTickBus):
            bus.close()
    dropped = {c.link: sum(c.dropped_items.values()) for c in role.links}
    log_event(
        "role_stopped", role="venue", updates=role.updates, replayed=role.replayed, dropped=dropped
    )
    return 0


def main(spec: RoleSpec) -> int:
    return exit_now(run_role(spec, "venue", lambda cfg: _serve(spec, cfg)))
