"""The feed-handler role: one ``FeedHandler`` in a process of its own (issue 12).

Each venue's two handlers run in different processes, so one crash never takes both. A handler
process hears its venue on ``run_dir/feed-<venue>-<handler>.sock`` (the venue process sends the
same messages to both twins, as a venue's multicast feed does: ``host/venue.py``), normalizes
with the same state machine as the one-process node (``node/sources.py`` builds it: same lag,
fence, gate, update-id rule, epochs in ``<data-dir>/epochs``), and publishes the ticks on the
host's IPC bus (``bus/ipc.py``), or on NATS when ``cfg.bus == "nats"``.

Epochs across processes: a handler that starts bumps its venue's epoch in the shared file store
(under ``flock``). The first handler of a venue to start in a host run bumps at once (no live
twin to race, as the node's cold start); every later start (its twin, or a restart after kill -9
or a crash) bumps with the 250 ms fence exactly as a restarted in-process handler does
(``first_of_venue`` says why), so versions never go back and the twins stamp the same ones. A
twin sees the other's bump by re-reading the store before it stamps, at most every
``EPOCH_CHECK_NS`` (10 ms, far inside the fence). A message on the feed that is lost (this
process down or slow) is a real feed's packet loss: the twin still carries the venue, the
version rule keeps one copy.

Telemetry on loopback (``telemetry.serve_metrics``): the handler (``FeedCollector``), its gate
(``IngestCollector``), the feed and bus links (``LinkCollector``) or the NATS bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import msgspec
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.registry import Collector

from monotape import metric_names as m
from monotape.clock import Clock, SystemClock
from monotape.config import Config
from monotape.histograms.gc import GcMonitor
from monotape.log import log_event
from monotape.platform.bus.ipc import IpcTickBus
from monotape.platform.bus.ipc_collector import LinkCollector
from monotape.platform.bus.link import LinkCounters, LinkReceiver
from monotape.platform.bus.memory import TickBus
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.bus.nats_collector import NatsBusCollector
from monotape.platform.feeds.epochs import FileEpochStore
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.feeds.validate import TickGate
from monotape.platform.feeds.venue_wire import VenueBatchCodec
from monotape.platform.host.buses import role_bus
from monotape.platform.host.lifeline import ROLE_STOP_S, run_role, stop_on_signals, watch_host
from monotape.platform.host.spec import RoleSpec
from monotape.platform.host.state import RoleView, handler_state
from monotape.platform.host.telemetry import RoleState, serve_metrics
from monotape.platform.node.collectors import FeedCollector, GcCollector, IngestCollector
from monotape.platform.node.failures import StageFailures
from monotape.platform.node.sources import HandlerPlan, build_handler, handler_plans

__all__ = [
    "EPOCH_CHECK_NS",
    "HandlerRole",
    "exit_now",
    "feed_path",
    "first_of_venue",
    "main",
]

EPOCH_CHECK_NS = 10_000_000  # a twin's bump is seen within 10 ms (the fence is 250 ms)


def feed_path(run_dir: str | Path, key: str) -> Path:
    """The socket a handler hears its venue on: ``run_dir/feed-XNAS-A.sock``."""
    return Path(run_dir) / f"feed-{key}.sock"


def find_plan(cfg: Config, venue: str, name: str) -> HandlerPlan | None:
    for plan in handler_plans(cfg):
        if plan.venue == venue and plan.name == name:
            return plan
    return None


@contextlib.contextmanager
def first_of_venue(run_dir: str | Path, venue: str) -> Iterator[bool]:
    """True for the first handler of ``venue`` to start in this host run (``run_dir``), False
    for every later start (its twin, or itself restarted); held until the caller has bumped.

    The first one bumps at once, as the node's cold start does: nothing of this run to race,
    and its epoch is above anything an earlier run issued from the first update on. Every later
    start may have a live twin, so it bumps behind the 250 ms fence, as a restarted in-process
    handler does. Deciding by ``spec.restarts`` alone would not do: on the host's first start
    both twins have ``restarts == 0``, and a second at-once bump lets the later twin stamp its
    delay line's *older* updates above the first twin's newer ones (a price moving back on
    screen). The lock also orders the bumps: the at-once one is never behind a fenced one."""
    base = Path(run_dir)
    fd = os.open(base / f"start-{venue}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        marker = base / f"started-{venue}"
        first = not marker.exists()
        if first:
            marker.touch()
        yield first
    finally:
        os.close(fd)  # closing releases the lock


class HandlerRole:
    """The role's pieces; ``on_feed`` and ``pump`` are one step each (tests call them with a fake
    clock and an in-process bus); ``run`` drives them on a loop."""

    def __init__(
        self,
        spec: RoleSpec,
        cfg: Config,
        plan: HandlerPlan,
        bus: TickBus,
        clock: Clock | None = None,
    ) -> None:
        self.spec = spec
        self.cfg = cfg
        self.plan = plan
        self.name = spec.name or f"handler-{plan.key}"
        self.clock: Clock = clock or SystemClock()
        sim = cfg.simulator
        self.gate = TickGate(
            build_universe(sim.venues, sim.instruments, sim.seed), self.clock.now_ns
        )
        self.epochs = FileEpochStore(Path(cfg.data_dir) / "epochs")
        self.handler = build_handler(plan, cfg, self.epochs, self.clock, self.gate)
        self.bus = bus
        self.codec = VenueBatchCodec()
        self.feed = LinkCounters(f"feed-{plan.key}")
        self.failures = StageFailures(self.clock.now_ns)
        self.published = 0
        self._next_epoch_check = 0
        self._epoch_file: tuple[int, int, int] | None = None  # its (inode, mtime, size) read
        self._wake: asyncio.Event | None = None  # the driver's, while ``run`` runs
        self._timer: asyncio.TimerHandle | None = None  # the driver's wake-up for the head

    def start(self) -> int:
        """Go live: bump the venue's epoch, at once if this is the first handler of its venue
        to start in this host run, else behind the fence (``first_of_venue``); the new epoch."""
        with first_of_venue(self.spec.run_dir, self.plan.venue) as first:
            record = self.handler.start(at_once=first)
        self._next_epoch_check = self.clock.now_ns() + EPOCH_CHECK_NS
        log_event(
            "handler_started",
            venue=self.plan.venue,
            handler=self.plan.name,
            epoch=record.epoch,
            fence_ts_ns=record.fence_ts_ns,
            restarts=self.spec.restarts,
            at_once=first,
        )
        return record.epoch

    def on_feed(self, message: bytes) -> None:
        """One message from the venue: its updates enter the handler's delay line."""
        try:
            updates = self.codec.decode(message)
        except msgspec.DecodeError:
            self.feed.malformed_messages += 1
            return
        self.feed.received_items += len(updates)
        idle = self.handler.next_due_ns is None
        self.handler.on_venue(updates)
        if idle and self._wake is not None:
            # The delay line was empty: the driver sleeps with no timer; set the head's here
            # rather than wake it to set one (a loop pass and a pump for nothing, ~350 a
            # second per handler at the default rate). Otherwise its timer is for the head,
            # due before anything added now.
            self._arm(self._wake)

    def pump(self) -> int:
        """What is due goes on the bus; the twin's epoch bumps are picked up every 10 ms."""
        now = self.clock.now_ns()
        if now >= self._next_epoch_check:
            self._next_epoch_check = now + EPOCH_CHECK_NS
            if self._epochs_changed():
                self.handler.refresh_epochs()
        ticks = self.handler.drain_due()
        if ticks:
            self.published += len(ticks)
            self.bus.publish(ticks)
        return len(ticks)

    def _epochs_changed(self) -> bool:
        """Whether the venue's epoch file changed since the last look: one ``stat`` every
        10 ms instead of an open, a read and a decode (a bump replaces the file: a new inode
        and mtime)."""
        try:
            st = os.stat(self.epochs.path(self.plan.venue))
            seen: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            seen = None  # none yet (or unreadable): reading it says which
        if seen is not None and seen == self._epoch_file:
            return False
        self._epoch_file = seen
        return True

    def _arm(self, wake: asyncio.Event) -> None:
        """The driver's timer: ``wake`` when the delay line's head is due (none: no timer)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = self.handler.next_due_ns
        if due is not None:
            # Whole milliseconds, rounded up: uvloop's timers are whole milliseconds rounded to
            # the nearest, and a head rounded down would wake to nothing due, again and again
            # until it is (the one-process node pumps on a 1 ms step: the same granularity).
            delay_ms = math.ceil(max(due - self.clock.now_ns(), 0) / 1e6)
            self._timer = asyncio.get_running_loop().call_later(delay_ms / 1e3, wake.set)

    def collectors(self) -> list[Collector]:
        return [
            FeedCollector(lambda: [self.handler]),
            IngestCollector(lambda: self.gate, self.failures),
        ]

    async def run(self, receiver: LinkReceiver, stop: asyncio.Event) -> None:
        """Pump when the oldest update of the delay line is due, and sleep otherwise: a quiet
        venue's handler does not wake every millisecond for nothing (there are 12 of them on
        a 2-core box), and a due update waits for no 1 ms poll."""
        loop = asyncio.get_running_loop()
        wake = self._wake = asyncio.Event()
        stopper = loop.create_task(_set_when(stop, wake))
        receiver.open()
        try:
            while not stop.is_set():
                try:
                    self.pump()
                except Exception as exc:  # contained: the next wake-up pumps as usual
                    self.failures.record("pump", exc)
                wake.clear()
                self._arm(wake)
                await wake.wait()  # the head is due (on_feed may have set it), or stop
        finally:
            stopper.cancel()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._wake = None
            receiver.close()
            self.handler.stop()


async def _set_when(stop: asyncio.Event, wake: asyncio.Event) -> None:
    await stop.wait()
    wake.set()


def _bus(cfg: Config, spec: RoleSpec, clock: Clock) -> IpcTickBus | NatsTickBus:
    sim = cfg.simulator
    universe = build_universe(sim.venues, sim.instruments, sim.seed) if cfg.bus == "nats" else []
    return role_bus(cfg, spec.run_dir, spec.name, universe, clock.now_ns)


async def _serve(spec: RoleSpec, cfg: Config) -> int:
    plan = find_plan(cfg, spec.venue, spec.handler)
    if plan is None:
        # The host plans one process per handler of the config (processes.plan_roles) and none
        # for a replay, whose venue process feeds the bus: a spec naming another handler is a
        # mistake (a role started by hand), said in one line, not a process idling unseen.
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
    clock = SystemClock()
    bus = _bus(cfg, spec, clock)
    role = HandlerRole(spec, cfg, plan, bus, clock)
    registry = CollectorRegistry()
    for collector in role.collectors():
        registry.register(collector)
    links = [role.feed]
    if isinstance(bus, NatsTickBus):
        servers = [u.strip() for u in cfg.nats.servers.split(",") if u.strip()]
        await bus.connect(servers, timeout_s=cfg.nats.connect_timeout_s)
        registry.register(NatsBusCollector(bus))
    else:
        links.append(bus.counters)
    registry.register(LinkCollector(lambda: links))
    # GC pauses per process, handlers too (issue #12 item 4): no terminals here, so the
    # warm-up freeze is the whole policy (docs/observability.md, "GC and the event loop").
    gc_monitor = GcMonitor(clock=clock).install()
    registry.register(GcCollector(gc_monitor, frozen_name=m.GC_FROZEN_OBJECTS))
    ProcessCollector(registry=registry)
    # The same loopback port answers the host's /admin/feeds with this handler's row.
    source = "replay" if cfg.feeds.replay else "simulator"  # the node's word (Node.source)
    view = RoleView(clock, handlers=[role.handler], gc_monitor=gc_monitor, source=source)
    state = handler_state(RoleState(asyncio.get_running_loop()), view)
    serve_metrics(registry, spec.run_dir, role.name, state)
    role.start()
    if cfg.server.gc_freeze:
        gc_monitor.freeze_after_warmup()
    receiver = LinkReceiver(feed_path(spec.run_dir, plan.key), role.feed, role.on_feed)
    try:
        await role.run(receiver, stop)
    finally:
        watcher.cancel()
        if isinstance(bus, NatsTickBus):
            await bus.close(timeout=ROLE_STOP_S / 2)
        else:
            bus.close()
    log_event(
        "role_stopped",
        role="handler",
        venue=plan.venue,
        handler=plan.name,
        published=role.published,
        feed_received=role.feed.received_items,
    )
    return 0


def exit_now(code: int) -> NoReturn:
    """Leave without the interpreter's finalization once the role has stopped cleanly (its
    sockets closed, ``role_stopped`` logged): tearing down numpy, prometheus_client and the
    rest takes ~0.25 s of CPU per process, and 13 feed processes stopping at once on 2 busy
    cores took 3.4 s, past the 2 s a role has (measured)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(spec: RoleSpec) -> int:
    name = f"handler-{spec.venue}-{spec.handler}"
    return exit_now(run_role(spec, name, lambda cfg: _serve(spec, cfg)))
