"""The feed-handler role: the A handlers of every venue in one process, the B handlers in
another (issue 12).

Each venue's two handlers run in different processes, so one crash never takes both; a side's
handlers share one process because a process costs mostly per wake-up: twelve processes (one
per handler) took 1.13 cores at 20k ticks/s on this 2-core box, the two take 0.48
(docs/benchmarks.md, "Two feed processes"). A spec naming a venue (``RoleSpec.venue``) runs
that venue's one handler, as a test may start it.

Each handler (host/handler_role.py) hears its venue on ``run_dir/feed-<venue>-<handler>.sock``
(the venue process sends the same messages to both twins, as a venue's multicast feed does:
``host/venue.py``), normalizes with the same state machine as the one-process node
(``feeds/sources.py`` builds it: same lag, fence, gate, update-id rule, epochs in
``<data-dir>/epochs``). The process (``FeedGroup``, host/feed_group.py) wakes when the earliest
delay-line head of its handlers is due and publishes what every handler has due as one batch on
the host's IPC bus (``bus/ipc.py``), or on NATS when ``cfg.bus == "nats"``.

Telemetry on loopback (``telemetry.serve_metrics``): the handlers (``FeedCollector``), their gate
(``IngestCollector``), the feed and bus links (``LinkCollector``) or the NATS bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from typing import NoReturn

from monotape.clock import Clock
from monotape.config import Config
from monotape.log import log_event
from monotape.platform.bus.ipc import IpcTickBus
from monotape.platform.bus.ipc_collector import LinkCollector
from monotape.platform.bus.link import LinkReceiver
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.bus.nats_collector import NatsBusCollector
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.feeds.sources import HandlerPlan, handler_plans
from monotape.platform.host.buses import role_bus
from monotape.platform.host.feed_group import FeedGroup
from monotape.platform.host.handler_role import HandlerRole, feed_path, process_gate
from monotape.platform.host.lifeline import ROLE_STOP_S, run_role, stop_on_signals, watch_host
from monotape.platform.host.spec import RoleSpec
from monotape.platform.host.state import RoleView, handler_state
from monotape.platform.host.telemetry import RoleState, serve_metrics
from monotape.platform.role.kit import RoleKit

__all__ = ["exit_now", "find_plans", "main", "role_name"]


def find_plans(cfg: Config, venue: str, name: str) -> list[HandlerPlan]:
    """The handlers a process runs: every venue's handler ``name`` (``venue`` empty, as the
    host plans them), or that one venue's."""
    return [
        plan
        for plan in handler_plans(cfg)
        if plan.name == name and (not venue or plan.venue == venue)
    ]


def _bus(cfg: Config, spec: RoleSpec, clock: Clock) -> IpcTickBus | NatsTickBus:
    sim = cfg.simulator
    universe = build_universe(sim.venues, sim.instruments, sim.seed) if cfg.bus == "nats" else []
    return role_bus(cfg, spec.run_dir, spec.name, universe, clock.now_ns)


def role_name(spec: RoleSpec) -> str:
    """``handler-A`` for every venue's A handlers (as the host plans them), ``handler-XNAS-A``
    for one venue's."""
    return spec.name or "-".join(["handler", *filter(None, (spec.venue, spec.handler))])


async def _serve(spec: RoleSpec, cfg: Config) -> int:
    plans = find_plans(cfg, spec.venue, spec.handler)
    if not plans:
        # The host plans a process per handler side of the config (processes.plan_roles) and
        # none for a replay, whose venue process feeds the bus: a spec naming another handler
        # is a mistake (a role started by hand), said in one line, not a process idling unseen.
        log_event(
            "handler_not_planned",
            level="error",
            venue=spec.venue,
            handler=spec.handler,
            replay=bool(cfg.feeds.replay),
            planned=[p.key for p in handler_plans(cfg)],
        )
        return 2
    stop = asyncio.Event()
    stop_on_signals(stop)
    watcher = asyncio.create_task(watch_host(spec.host_pid, stop))
    kit = RoleKit(cfg, role_name(spec))  # role/kit.py: clock, registry, process metrics
    clock = kit.clock
    bus = _bus(cfg, spec, clock)
    gate = process_gate(cfg, clock)
    group = FeedGroup([HandlerRole(spec, cfg, p, bus, clock, gate) for p in plans], bus, clock)
    registry = kit.registry
    for collector in group.collectors():
        registry.register(collector)
    links = [r.feed for r in group.roles]
    if isinstance(bus, NatsTickBus):
        servers = [u.strip() for u in cfg.nats.servers.split(",") if u.strip()]
        await bus.connect(servers, timeout_s=cfg.nats.connect_timeout_s)
        registry.register(NatsBusCollector(bus))
    else:
        links.append(bus.counters)
    registry.register(LinkCollector(lambda: links))
    # GC pauses per process, handlers too (issue #12 item 4): no terminals here, so the
    # warm-up freeze is the whole policy (docs/observability.md, "GC and the event loop").
    gc_monitor = kit.watch_gc()
    kit.start()
    # The same loopback port answers the host's /admin/feeds with these handlers' rows.
    source = "replay" if cfg.feeds.replay else "simulator"  # the node's word (Node.source)
    handlers = [r.handler for r in group.roles]
    view = RoleView(clock, handlers=handlers, gc_monitor=gc_monitor, source=source)
    state = handler_state(RoleState(asyncio.get_running_loop()), view)
    serve_metrics(registry, spec.run_dir, role_name(spec), state)
    group.start()
    kit.freeze()
    receivers = [
        LinkReceiver(feed_path(spec.run_dir, r.plan.key), r.feed, r.on_feed) for r in group.roles
    ]
    try:
        await group.run(receivers, stop)
    finally:
        watcher.cancel()
        if isinstance(bus, NatsTickBus):
            await bus.close(timeout=ROLE_STOP_S / 2)
        else:
            bus.close()
    log_event(
        "role_stopped",
        role="handler",
        venues=[p.venue for p in plans],
        handler=spec.handler,
        published=group.published,
        feed_received=sum(r.feed.received_items for r in group.roles),
    )
    return 0


def exit_now(code: int) -> NoReturn:
    """Leave without the interpreter's finalization once the role has stopped cleanly (its
    sockets closed, ``role_stopped`` logged): tearing down numpy, prometheus_client and the
    rest takes ~0.25 s of CPU per process, and 13 feed processes (one per handler, before they
    were grouped) stopping at once on 2 busy cores took 3.4 s, past the 2 s a role has
    (measured)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(spec: RoleSpec) -> int:
    return exit_now(run_role(spec, role_name(spec), lambda cfg: _serve(spec, cfg)))
