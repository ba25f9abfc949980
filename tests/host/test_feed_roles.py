"""host/venue.py and host/handler.py, one step at a time: a fake clock, real sockets in a temporary
run dir, both twins of a venue in this process (the e2e test runs them as processes)."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from monotape.clock import FakeClock
from monotape.config import Config
from monotape.platform.bus.link import Drop, LinkCounters, LinkReceiver
from monotape.platform.core.feed_liveness import BEAT_NS
from monotape.platform.feeds.epochs import FileEpochStore
from monotape.platform.feeds.simulator import VenueUpdate
from monotape.platform.feeds.sources import build_sources, handler_plans
from monotape.platform.feeds.venue_wire import venue_batch
from monotape.platform.host.feed_group import FeedGroup
from monotape.platform.host.handler import _serve, find_plans
from monotape.platform.host.handler_role import EPOCH_CHECK_NS, HandlerRole, feed_path
from monotape.platform.host.spec import RoleSpec
from monotape.platform.host.venue import VenueRole
from monotape.platform.model import Tick
from monotape.platform.wire.batch import TickBatch, batch_from_ticks
from tests.conftest import node_config, until


@pytest.fixture
def run_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mt-feed-", dir="/tmp"))  # short: socket paths <= 107 B
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _cfg(run_dir: Path) -> Config:
    return node_config(
        run_dir / "data",
        {"simulator.venues": 2, "simulator.instruments": 40, "simulator.rate": 4_000.0},
    )


class Bus:
    def __init__(self) -> None:
        self.batches: list[TickBatch] = []
        self.ticks: list[Tick] = []

    def publish(self, batch: TickBatch) -> None:
        self.batches.append(batch)
        self.ticks.extend(batch.ticks())

    def publish_many(self, batches: Sequence[TickBatch]) -> None:
        for batch in batches:
            self.publish(batch)

    def subscribe(self, sink: object) -> None:
        raise NotImplementedError


def _spec(
    run_dir: Path, role: str, venue: str = "", handler: str = "", restarts: int = 0
) -> RoleSpec:
    return RoleSpec(
        role=role, run_dir=str(run_dir), venue=venue, handler=handler, restarts=restarts
    )


def test_plans_are_the_nodes_handlers(run_dir: Path) -> None:
    """The handler processes are built as the node builds its handlers: same venues, names,
    lags and update-id rule (one helper, feeds/sources.py)."""
    cfg = node_config(run_dir / "data")
    node_handlers = build_sources(cfg, FakeClock(), FileEpochStore(run_dir / "epochs")).handlers
    plans = handler_plans(cfg)
    assert [(p.venue, p.name, p.lag_ns, p.update_ids) for p in plans] == [
        (h.venue, h.name, h.lag_ns, h.update_ids) for h in node_handlers
    ]
    assert len({p.key for p in plans}) == 12  # 6 venues x 2, keys unique
    replay = node_config(run_dir / "data", {"feeds.replay": "x.ndjson"})
    assert handler_plans(replay) == []  # a replay feeds the bus, not handlers


async def test_both_twins_hear_the_same_updates_and_stamp_the_same_versions(
    run_dir: Path,
) -> None:
    cfg = _cfg(run_dir)
    clock = FakeClock()
    venue = VenueRole(_spec(run_dir, "venue"), cfg, clock)
    plans = [p for p in handler_plans(cfg) if p.venue == "XNAS"]
    buses = {p.name: Bus() for p in plans}
    roles = {
        p.name: HandlerRole(
            _spec(run_dir, "handler", p.venue, p.name), cfg, p, buses[p.name], clock
        )
        for p in plans
    }
    receivers = [
        LinkReceiver(feed_path(run_dir, p.key), roles[p.name].feed, roles[p.name].on_feed)
        for p in plans
    ]
    for r in receivers:
        r.open()
    try:
        epochs = {name: role.start() for name, role in roles.items()}
        # A started first: at once. B may have a live twin: its epoch waits for the fence.
        assert epochs["B"] == epochs["A"] + 1
        assert roles["A"].handler.records[-1].fence_ts_ns <= clock.wall_ns()
        assert roles["B"].handler.records[-1].fence_ts_ns > clock.wall_ns() + 200_000_000
        for _ in range(200):
            clock.advance_ms(1)
            venue.step()
        to_a, to_b = (s.counters for s in venue.feeds["XNAS"])
        sent = to_a.sent_items
        assert to_b.sent_items == sent  # multicast: the same updates to both
        assert sent > 0
        await until(
            lambda: all(r.feed.received_items == sent for r in roles.values()),
            "both twins heard every XNAS update",
        )
        clock.advance(EPOCH_CHECK_NS)
        clock.advance_ms(20)  # past both lags (A: 0-1 ms, B: 6-10 ms)
        for role in roles.values():
            role.pump()
        a, b = (buses[n].ticks for n in ("A", "B"))
        assert len(a) == len(b) == sent
        assert all(t.venue == "XNAS" for t in a)
        for name, bus in buses.items():  # each twin's batches name it
            assert {(x.venue, x.handler) for x in bus.batches} == {("XNAS", name)}
        # The same update (iid, venue timestamp) carries the same version from both twins.
        va = {(t.iid, t.venue_ts_ns): (t.epoch, t.seq, t.bid, t.ask) for t in a}
        vb = {(t.iid, t.venue_ts_ns): (t.epoch, t.seq, t.bid, t.ask) for t in b}
        assert va == vb
        assert {t.epoch for t in a} == {epochs["A"]}  # 220 ms in: B's fence not reached
    finally:
        for r in receivers:
            r.close()
        venue.close()


def test_a_handler_that_is_down_misses_updates_counted(run_dir: Path) -> None:
    cfg = _cfg(run_dir)
    clock = FakeClock()
    venue = VenueRole(_spec(run_dir, "venue"), cfg, clock)
    for _ in range(50):
        clock.advance_ms(1)
        venue.step()
    assert venue.updates > 0
    for counters in venue.links:  # no handler listens: every message dropped, none queued
        assert counters.sent_messages == 0
        assert set(counters.dropped_messages) == {Drop.DOWN}
    assert sum(sum(c.dropped_items.values()) for c in venue.links) == venue.updates * 2
    venue.close()


def test_only_the_first_start_of_a_venue_in_a_run_is_at_once(run_dir: Path) -> None:
    """Whichever twin starts first bumps at once; the other, started at the same moment or
    later, bumps behind the fence; a new host run (a new run dir) starts at once again."""
    cfg = _cfg(run_dir)
    clock = FakeClock()
    plan_a, plan_b = [p for p in handler_plans(cfg) if p.venue == "XNAS"]
    b = HandlerRole(_spec(run_dir, "handler", "XNAS", "B"), cfg, plan_b, Bus(), clock)
    a = HandlerRole(_spec(run_dir, "handler", "XNAS", "A"), cfg, plan_a, Bus(), clock)
    b.start()
    a.start()
    assert b.handler.records[-1].fence_ts_ns <= clock.wall_ns()  # B first: at once
    assert a.handler.records[-1].fence_ts_ns > clock.wall_ns()
    other_run = run_dir / "next-run"
    other_run.mkdir()
    again = HandlerRole(_spec(other_run, "handler", "XNAS", "A"), cfg, plan_a, Bus(), clock)
    again.start()
    assert again.handler.records[-1].epoch == a.handler.records[-1].epoch + 1
    assert again.handler.records[-1].fence_ts_ns <= a.handler.records[-1].fence_ts_ns


def test_a_restarted_handler_takes_a_higher_epoch_behind_the_fence(run_dir: Path) -> None:
    cfg = _cfg(run_dir)
    clock = FakeClock()
    plan_a, plan_b = [p for p in handler_plans(cfg) if p.venue == "XNAS"]
    twin = HandlerRole(_spec(run_dir, "handler", "XNAS", "A"), cfg, plan_a, Bus(), clock)
    first = twin.start()
    dead = HandlerRole(_spec(run_dir, "handler", "XNAS", "B"), cfg, plan_b, Bus(), clock)
    dead.start()
    again = HandlerRole(
        _spec(run_dir, "handler", "XNAS", "B", restarts=1), cfg, plan_b, Bus(), clock
    )
    epoch = again.start()
    assert epoch > first + 1
    record = again.handler.records[-1]
    assert record.fence_ts_ns > clock.wall_ns()  # the 250 ms fence, as an in-process restart
    clock.advance(EPOCH_CHECK_NS)
    twin.pump()  # re-reads the store: the twin knows the new epoch within 10 ms
    assert twin.handler.records[-1] == record


def test_malformed_feed_message_is_counted(run_dir: Path) -> None:
    cfg = _cfg(run_dir)
    plan = handler_plans(cfg)[0]
    role = HandlerRole(_spec(run_dir, "handler", plan.venue, plan.name), cfg, plan, Bus())
    role.start()
    good = venue_batch(plan.venue, [VenueUpdate(0, plan.venue, 1, 10, 100, 101, 100, 5)] * 2)
    role.on_feed(b"\xc1")
    role.on_feed(good.buffer[:-1])  # an update cut short
    role.on_feed(b"NOT" + good.buffer[3:])  # not a venue batch at all
    assert role.feed.malformed_messages == 3 and role.feed.received_items == 0
    assert role.handler.next_due_ns is None  # refused whole: nothing entered the delay line
    assert {r: n for r, n in role.gate.batches_refused.items() if n} == {
        "short": 1, "length_mismatch": 1, "not_a_batch": 1,
    }  # fmt: skip
    role.on_feed(good.buffer)  # the next message is heard as usual
    assert role.feed.received_items == 2 and role.handler.next_due_ns is not None
    assert isinstance(role.feed, LinkCounters)


@pytest.mark.parametrize("replay", [False, True], ids=["unknown-handler", "replay"])
def test_a_handler_the_host_did_not_plan_exits_2_saying_so(
    run_dir: Path, capsys: pytest.CaptureFixture[str], replay: bool
) -> None:
    """The host plans one process per handler and none for a replay; a spec naming another
    (a role started by hand) is one error line and exit 2, never a process idling unseen."""
    overrides: dict[str, object] = {"feeds.replay": "x.ndjson"} if replay else {}
    cfg = node_config(run_dir / "data", overrides)
    venue = "XNAS" if replay else "NOPE"
    assert asyncio.run(_serve(_spec(run_dir, "handler", venue, "A"), cfg)) == 2
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    said = [x for x in lines if x["event"] == "handler_not_planned"]
    assert len(said) == 1 and said[0]["venue"] == venue and said[0]["level"] == "error"
    assert (said[0]["planned"] == []) is replay  # a replay plans no handler at all


class TickingClock(FakeClock):
    """A clock that moves 1 µs at every read, as a real one does between two handlers' drains."""

    def now_ns(self) -> int:
        self._now += 1_000
        return self._now


async def test_one_process_runs_every_venues_a_handler_a_batch_each_per_wake(
    run_dir: Path,
) -> None:
    """The A side of the host: both venues' A handlers in one FeedGroup, one gate, one bus.
    A pump publishes what each handler has due as its own batch (one venue, one handler, one
    epoch), every batch stamped decoded at one time (the sequencer records a batch of one stamp
    as one run); the timer is for the earliest head of them; a handler that fails is counted
    and the other venue still publishes."""
    cfg = _cfg(run_dir)
    clock = TickingClock()
    venue = VenueRole(_spec(run_dir, "venue"), cfg, clock)
    plans = find_plans(cfg, "", "A")
    assert [p.venue for p in plans] == sorted({p.venue for p in handler_plans(cfg)})
    assert len(plans) == 2 and {p.name for p in plans} == {"A"}
    bus = Batches()
    spec = _spec(run_dir, "handler", "", "A")
    roles = [HandlerRole(spec, cfg, p, bus, clock) for p in plans]
    group = FeedGroup(roles, bus, clock)
    receivers = [LinkReceiver(feed_path(run_dir, r.plan.key), r.feed, r.on_feed) for r in roles]
    for r in receivers:
        r.open()
    try:
        group.start()
        # nothing heard yet: the only timer is the handlers' liveness beat
        assert group.next_due_ns() == min(r.next_beat_ns for r in group.roles)
        for _ in range(50):
            clock.advance_ms(1)
            venue.step()
        sent = {p.venue: venue.feeds[p.venue][0].counters.sent_items for p in plans}
        assert all(n > 0 for n in sent.values())
        await until(
            lambda: all(r.feed.received_items == sent[r.plan.venue] for r in roles),
            "each A handler heard its venue",
        )
        heads = [r.handler.next_due_ns for r in roles]
        beats = [r.next_beat_ns for r in roles]  # a quiet handler still wakes to beat
        assert group.next_due_ns() == min([h for h in heads if h is not None] + beats)
        clock.advance_ms(20)  # past every A lag (0-1 ms)
        assert group.pump() == sum(sent.values())
        assert len(bus.batches) == 2  # a batch a venue, both in one wake-up
        assert sorted(b.venue for b in bus.batches) == sorted(p.venue for p in plans)
        assert {b.handler for b in bus.batches} == {"A"}
        assert {b.venue: b.count for b in bus.batches} == sent
        stamps = {t for b in bus.batches for t in b.recv_ts.tolist()}
        assert len(stamps) == 1  # one stamp for the wake-up (the clock ticks at every read)
        assert group.published == sum(sent.values())
        assert group.next_due_ns() == min(r.next_beat_ns for r in group.roles)  # the next beat

        def broken(now: int | None = None) -> list[TickBatch]:
            raise RuntimeError("a bad venue")

        roles[0].due = broken  # type: ignore[method-assign]
        for _ in range(20):
            clock.advance_ms(1)
            venue.step()
        await until(lambda: roles[1].handler.next_due_ns is not None, "the other venue heard")
        clock.advance_ms(20)
        published = len(bus.batches)
        assert group.pump() > 0  # the other venue published
        assert [b.venue for b in bus.batches[published:]] == [plans[1].venue]
        assert group.failures.counts == {"pump": 1}
    finally:
        for r in receivers:
            r.close()
        venue.close()


class Batches(Bus):
    """A bus that keeps what it was handed (the batches, as ``Bus`` does)."""


async def test_a_handler_whose_step_keeps_raising_does_not_spin_the_process(
    run_dir: Path,
) -> None:
    """Its head stays due, so the timer is armed at once after every pump: at least 1 ms, or
    the process would spin on it and starve the other venues of its side."""
    cfg = _cfg(run_dir)
    clock = FakeClock()
    plans = find_plans(cfg, "", "A")
    roles = [HandlerRole(_spec(run_dir, "handler", "", "A"), cfg, p, Bus(), clock) for p in plans]
    group = FeedGroup(roles, Bus(), clock)
    group.start()
    pumps = 0

    def broken(now: int | None = None) -> list[TickBatch]:
        nonlocal pumps
        pumps += 1
        raise RuntimeError("a bad venue")

    roles[0].due = broken  # type: ignore[method-assign]
    # its delay line's head overdue, as a step that raises before draining leaves it
    roles[0].handler = SimpleNamespace(  # type: ignore[assignment]
        next_due_ns=clock.now_ns() - 1, stop=lambda: None, up=False
    )
    stop = asyncio.Event()
    runner = asyncio.create_task(group.run([], stop))
    await asyncio.sleep(0.2)
    stop.set()
    await runner
    assert 1 <= pumps <= 250  # ~1 ms apart; a 0 ms timer pumps tens of thousands of times
    assert group.failures.counts["pump"] == pumps


def test_when_the_bus_takes_only_the_first_batches_of_a_wake_no_venue_starves(
    run_dir: Path,
) -> None:
    """A full sequencer socket drops the later messages of a wake-up: the pumps rotate which
    venue's batch goes first, so the loss is spread over every venue instead of freezing the
    same ones every time."""
    cfg = _cfg(run_dir)
    clock = FakeClock()
    plans = find_plans(cfg, "", "A")
    roles = [HandlerRole(_spec(run_dir, "handler", "", "A"), cfg, p, Bus(), clock) for p in plans]

    class FirstOnly:  # a socket with room for the first batch of each wake-up only
        def __init__(self) -> None:
            self.room = 1
            self.kept: list[TickBatch] = []

        def publish(self, batch: TickBatch) -> None:
            if self.room:
                self.room -= 1
                self.kept.append(batch)

        def publish_many(self, batches: Sequence[TickBatch]) -> None:
            for batch in batches:  # a message each: only the first of the wake-up goes
                self.publish(batch)

    bus = FirstOnly()
    group = FeedGroup(roles, bus, clock)  # type: ignore[arg-type]
    for n, role in enumerate(roles):
        ticks = [Tick(n, role.plan.venue, 1, s, 0, 100, 101, 100, 1, "A") for s in range(1, 11)]
        due = batch_from_ticks(ticks)
        role.due = lambda now=None, due=due: list(due)  # type: ignore[method-assign,misc]
    for _ in range(2 * len(roles)):
        bus.room = 1  # the sequencer read its socket between two wake-ups
        assert group.pump() == 10 * len(roles)
    through = {p.venue: sum(b.count for b in bus.kept if b.venue == p.venue) for p in plans}
    assert len(through) == len(roles) >= 2
    # every venue led the same number of wake-ups, so each got the same share through
    assert set(through.values()) == {10 * 2}, through


def test_a_handler_with_nothing_due_beats_with_a_header_only_batch(run_dir: Path) -> None:
    clock = FakeClock()
    clock.advance_ms(1_000)
    cfg = _cfg(run_dir)
    plan = find_plans(cfg, "", "A")[0]
    bus = Bus()
    role = HandlerRole(_spec(run_dir, "handler", handler="A"), cfg, plan, bus, clock)
    role.start()
    assert role.pump() == 0 and [b.count for b in bus.batches] == [0]  # the first beat at once
    clock.advance_ms(50)
    role.pump()
    assert len(bus.batches) == 1  # within the beat interval: nothing sent
    clock.advance_ms(60)
    role.pump()
    assert [(b.venue, b.handler, b.count) for b in bus.batches[1:]] == [(plan.venue, "A", 0)]
    assert role.beats == 2 and role.next_beat_ns == clock.now_ns() + BEAT_NS
    role.handler.stop()
    clock.advance_ms(500)
    role.pump()
    assert role.beats == 2  # a stopped handler does not beat: its silence is the signal
