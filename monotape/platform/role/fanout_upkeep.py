"""A fan-out server's upkeep, the one-process node's and a writer process's alike: what runs
beside its frames.

The heartbeat to every terminal, the invariant checks over the server's indexes (design:
Observability, every 30 s), the GC policy for its connections (``GcUpkeep``:
core/gc_policy.py says why) and the server's own timed loops: STALE when no frame came
(server/stale.py), the glass cohort, keepalive. One place decides which of them a config runs,
so a writer keeps its terminals exactly as the node does.
"""

from __future__ import annotations

import asyncio
import time

from prometheus_client.registry import Collector

from monotape.clock import Clock
from monotape.config import ServerConfig
from monotape.histograms.gc import GcMonitor
from monotape.invariants import (
    InvariantMonitor,
    NativeEntries,
    NoDanglingEntries,
    SubscriptionCardinality,
)
from monotape.log import log_event
from monotape.platform.core.gc_policy import FreezeAction, FreezePolicy
from monotape.platform.role.collectors import FanoutCollector, InvariantCollector
from monotape.platform.role.failures import StageFailures
from monotape.platform.role.supervisor import LoopFactory
from monotape.platform.server.endpoint import FanoutServer

__all__ = ["FanoutUpkeep", "GcUpkeep"]


class FanoutUpkeep:
    """The server's companions, built from its ``server.*`` config; ``loops`` are what the
    config runs, ``restartable`` every loop a supervisor may start again."""

    def __init__(
        self,
        srv: ServerConfig,
        server: FanoutServer,
        gc_monitor: GcMonitor,
        clock: Clock,
        failures: StageFailures,
    ) -> None:
        self.srv = srv
        self.server = server
        self.clock = clock
        index = server.index
        self.invariants = InvariantMonitor(
            [
                SubscriptionCardinality(index, clock=clock),
                NoDanglingEntries(index, lambda: server.connections, clock=clock),
                NativeEntries(server.writer.audit, clock=clock),
            ],
            interval_s=srv.invariant_interval_s,
            clock=clock,
            on_failure=lambda name, exc: failures.record("invariants", exc, invariant=name),
        )
        self.gc = GcUpkeep.for_server(srv, gc_monitor, server, clock)

    def collectors(self) -> list[Collector]:
        """The fan-out counters and the invariants' verdicts."""
        return [FanoutCollector(self.server), InvariantCollector(self.invariants)]

    def start(self) -> None:
        """After the warm-up freeze (``RoleKit.freeze``): the GC policy counts from here."""
        if self.srv.gc_freeze:
            self.gc.start()

    async def heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.srv.heartbeat_s)
            self.server.publish_heartbeat(self.clock.wall_ns() // 1_000_000)

    def loops(self) -> list[LoopFactory]:
        srv, server = self.srv, self.server
        loops: list[LoopFactory] = [
            self.heartbeat_loop,
            self.invariants.run_forever,
            server.stale.run,  # STALE when no frame came for two frame intervals
        ]
        if srv.glass_share > 0:
            loops.append(server.glass_loop)
        if srv.keepalive_interval_s > 0:
            loops.append(server.keepalive_loop)
        if srv.gc_freeze and srv.gc_refreeze:
            loops.append(self.gc.run)
        return loops

    def restartable(self) -> list[LoopFactory]:
        """Every loop of ``loops``, whatever the config runs."""
        server = self.server
        return [
            self.heartbeat_loop,
            self.invariants.run_forever,
            server.stale.run,
            server.glass_loop,
            server.keepalive_loop,
            self.gc.run,
        ]


class GcUpkeep:
    """Freeze new connections once they settle; reclaim closed ones' cycles now and then
    (monotape/platform/core/gc_policy.py says why)."""

    def __init__(
        self, policy: FreezePolicy, monitor: GcMonitor, server: FanoutServer, clock: Clock
    ) -> None:
        self.policy = policy
        self.monitor = monitor
        self._server = server
        self._clock = clock

    @classmethod
    def for_server(
        cls, srv: ServerConfig, monitor: GcMonitor, server: FanoutServer, clock: Clock
    ) -> GcUpkeep:
        """The policy as ``server.gc_*`` configures it (node and writer alike)."""
        policy = FreezePolicy(
            settle_s=srv.gc_refreeze_settle_s,
            reclaim_closed=srv.gc_reclaim_closed,
            refreeze_opened=srv.gc_refreeze_opened,
            refreeze_every_s=srv.gc_refreeze_every_s,
            pause_budget_ms=srv.gc_pause_budget_ms,
            min_lifetime_s=srv.gc_min_lifetime_s,
            reclaim_forced_closed=srv.gc_reclaim_forced_closed,
        )
        return cls(policy, monitor, server, clock)

    def start(self) -> None:
        """After the warm-up freeze: the counts so far are frozen."""
        self.monitor.take_gen2_peak_ms()  # the warm-up collection is no steady-state pause
        self.policy.start(*self.opened_closed(), now_s=self._clock.now_ns() / 1e9)

    def opened_closed(self) -> tuple[int, int]:
        stats = self._server.stats
        return stats.connections_total, sum(stats.disconnects.values())

    async def run(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.step()

    def step(self) -> FreezeAction:
        """One decision, acted on."""
        opened, closed = self.opened_closed()
        peak_ms = self.monitor.take_gen2_peak_ms()
        action = self.policy.decide(self._clock.now_ns() / 1e9, opened, closed, peak_ms)
        if action is FreezeAction.FREEZE:
            t0 = time.perf_counter()
            frozen = self.monitor.refreeze()
            log_event(
                "gc_refrozen",
                level="debug",
                frozen_objects=frozen,
                pause_ms=round((time.perf_counter() - t0) * 1e3, 2),
                gen2_pause_ms=round(peak_ms, 2),
            )
        elif action is FreezeAction.RECLAIM:
            t0 = time.perf_counter()
            freed = self.monitor.reclaim()
            log_event(
                "gc_reclaimed",
                freed=freed,
                pause_ms=round((time.perf_counter() - t0) * 1e3, 2),
                frozen_objects=self.monitor.frozen_now,
            )
        if action is not FreezeAction.NONE:
            self.monitor.take_gen2_peak_ms()  # our own collection is not a budget overrun
        return action
