"""Chaos against the real multi-process node (issue 12, "Must show"): ``monotape run --writers 2``
with the real roles, terminals connected and checking every frame (tests/e2e/terminal_check.py:
no version lower than one held, a delta only on the held base (else a gap the terminal
resyncs, as an SDK does: allowed only where said below, and every one must resolve), one price
per (symbol, version) across every terminal, frame numbers compared among terminals with the
same watchlist), while:

1. ``kill -9`` of a feed handler: its twin carries the venue on (every watched symbol of that
   venue moves again), the handler is restarted and counted;
2. ``kill -9`` of a writer: its terminals reconnect to the other writer and are hydrated with a
   snapshot; the writer comes back on the same port;
3. ``kill -9`` of the sequencer: restarted, every terminal gets a gap snapshot;
4. SIGSTOP of a writer for 3 s with a ring of ~1.7 s (``host.ring_mib = 24``): it is lapped
   (``monotape_ring_laps_total`` through the host's /metrics), its terminals recover with
   snapshots, and the other writer's terminals miss no frame and get no snapshot and no gap.

Gaps are allowed only where a writer hydrates a terminal while it may be frames behind the
sequencer (docs/ring.md: a hot symbol whose two table slots both moved past the writer's
position is left out of the snapshot): the first subscribe, the reconnect in 2, the lap in 4;
never after the blow in 1 and 3.

0. (first, on the fresh host) it serves as one node: 20 terminals land on both writers, each
   gets every frame boundary its twins got, /metrics and /admin/latency merge every process.

One host serves the module (each case waits for every role to run first and counts restarts
as differences); its SIGTERM stop, checked when the module ends, goes stage by stage (the
writers first, then reverse start order) and leaves no role, segment or run dir. Counts and
frame numbers are asserted, never rates or timings; deadlines are generous (both cores may be
busy).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import websockets

from monotape import metric_names as m
from monotape.loadgen.launch import parse_samples, sum_samples
from monotape.platform.ring import RingConfig
from monotape.platform.role.process_metrics import main_thread_schedstat
from monotape.platform.wire import codec
from tests.conftest import RunningServer, start_server, until
from tests.e2e.terminal_check import Prices, Terminal, run_terminal

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RING_MIB = 24  # 43 slots: ~1.7 s of frames at 25/s, lapped by a 3 s stop
FRAMES = 25  # frames every terminal gets before and after each blow (one second at 25/s)


def admin(node: RunningServer) -> dict[str, Any]:
    """/admin/processes: the roles and the split of terminals over writers."""
    req = urllib.request.Request(node.admin_url + "/admin/processes")
    req.add_header("Authorization", f"Bearer {node.admin_token}")
    with urllib.request.urlopen(req, timeout=10) as r:
        body: dict[str, Any] = json.loads(r.read())
    return body


def rows(node: RunningServer) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in admin(node)["processes"]}


def restarts(node: RunningServer, process: str) -> float:
    samples = parse_samples(node.http("/metrics", timeout=30))
    return sum_samples(samples, m.PROCESS_RESTARTS, process=process, reason="SIGKILL")


def metric(node: RunningServer, name: str, **labels: str) -> float:
    return sum_samples(parse_samples(node.http("/metrics", timeout=30)), name, **labels)


async def all_running(node: RunningServer) -> dict[str, dict[str, Any]]:
    last: dict[str, dict[str, Any]] = {}

    def ok() -> bool:
        last.update(rows(node))
        return all(r["state"] == "running" and r["ready"] for r in last.values())

    try:
        await until(ok, "every role running and ready", 90)
    except AssertionError:
        late = {n: r for n, r in last.items() if not (r["state"] == "running" and r["ready"])}
        raise AssertionError(f"not running: {late}\n" + "".join(node.tail)) from None
    return last


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("chaos")
    env = {
        "MONOTAPE_HOST__STOP_TIMEOUT_S": "10",
        "MONOTAPE_HOST__RUN_BASE": str(tmp),
        "MONOTAPE_HOST__SCRAPE_TIMEOUT_S": "10",
        "MONOTAPE_HOST__RING_MIB": str(RING_MIB),
        # case 4 stops a writer for 3 s to be lapped, not to be replaced as hung (liveness is
        # test_host_liveness.py's)
        "MONOTAPE_HOST__WRITER_BEAT_LIMIT_MS": "0",
    }
    running = start_server(tmp / "data", "--writers", "2", "--rate", "8000", env=env)
    pids = [r["pid"] for r in rows(running).values()]
    host_pid = running.proc.pid
    yield running
    # SIGTERM: the writers first (they drain while the prices move), then the rest in reverse
    # start order, within host.stop_timeout_s (10 s)
    code = running.stop(timeout=40, sig=signal.SIGTERM)
    assert code == 0, "".join(running.tail)
    stages = [
        json.loads(line)["stage"]
        for line in running.tail
        if line.startswith("{") and '"event": "stage_stopped"' in line
    ]
    assert stages == ["writer", "venue", "handler", "sequencer"], "".join(running.tail)
    pids += [r["pid"] for r in rows_or_none(running)]
    deadline = time.monotonic() + 30
    while not all(gone(p) for p in pids):
        assert time.monotonic() < deadline, "a role outlived its host"
        time.sleep(0.1)
    assert list(Path("/dev/shm").glob(f"monotape-{host_pid}-*")) == []
    assert list(tmp.glob(f"monotape-run-{host_pid}")) == []


def rows_or_none(node: RunningServer) -> list[dict[str, Any]]:
    try:
        return list(rows(node).values())
    except OSError:
        return []


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


async def universe(node: RunningServer) -> dict[str, int]:
    """key -> iid, in the hello's order."""
    async with websockets.connect(
        node.url, compression=None, max_size=None, open_timeout=60
    ) as probe:
        hello = codec.decode_message(await probe.recv(decode=False))
    assert isinstance(hello, codec.Hello)
    return {i.key: i.iid for i in hello.instruments}


class Crowd:
    """Terminals with one watchlist (so any two must get the same frames), spread by the
    kernel over both writers; ``at_least`` on each writer (more are connected until so)."""

    def __init__(self, node: RunningServer, keys: list[str], reconnect: bool = False) -> None:
        self.node = node
        self.keys = keys
        self.reconnect = reconnect
        self.prices = Prices()
        self.terminals: list[Terminal] = []
        self.tasks: list[asyncio.Task[None]] = []

    def _add(self) -> None:
        t = Terminal(self.prices, name=f"t{len(self.terminals)}")
        self.terminals.append(t)
        run = run_terminal(
            self.node.bare_url, self.node.token, self.keys, t, reconnect=self.reconnect
        )
        self.tasks.append(asyncio.create_task(run))

    async def connect(self, n: int, at_least: int) -> None:
        for _ in range(n):
            self._add()
        for _ in range(40):
            await self.until(lambda t: bool(t.servers), "a hello at every terminal")
            on = self.on_writer()
            if all(len(on.get(w, [])) >= at_least for w in ("writer-0", "writer-1")):
                return
            self._add()
        raise AssertionError(f"the kernel put no {at_least} terminals on each writer: {on}")

    def on_writer(self) -> dict[str, list[Terminal]]:
        """Terminals by the writer of their first connection."""
        out: dict[str, list[Terminal]] = {}
        for t in self.terminals:
            if t.servers:
                out.setdefault(t.servers[0], []).append(t)
        return out

    async def until(self, ok: Callable[[Terminal], bool], what: str, timeout_s: float = 90) -> None:
        def every() -> bool:
            for task in self.tasks:
                if task.done():
                    task.result()  # a terminal that ended: its exception is the failure
            return all(ok(t) for t in self.terminals)

        try:
            await until(every, what, timeout_s)
        except AssertionError:
            late = [
                f"{t.name} on {t.servers}: {len(t.frames)} frames, last {t.log[-3:]}"
                for t in self.terminals
                if not ok(t)
            ]
            raise AssertionError(f"{what}: not within {timeout_s} s at {late}") from None

    async def check(self) -> None:
        """No fault at any terminal, one price per version, every gap resolved by the symbol's
        snapshot, and every terminal got every frame number its twins got within its span (but
        where a snapshot announced a gap)."""
        await self.until(lambda t: not t.resyncing, "every gapped symbol snapshotted again")
        gaps = sum(len(t.gaps) for t in self.terminals)
        print(f"{len(self.terminals)} terminals, {gaps} gaps: {self.gaps()[:3]}")
        published = set().union(*(set(t.frames) for t in self.terminals))
        assert self.prices.faults == []
        for t in self.terminals:
            assert t.faults == [], t.name
            assert t.missed(published) == [], t.name

    def gaps(self, terminals: list[Terminal] | None = None, since: float = 0.0) -> list[str]:
        return [
            g
            for t in terminals or self.terminals
            for g, at in zip(t.gaps, t.gap_times, strict=True)
            if at >= since
        ]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def watchlist(keys: dict[str, int], start: int) -> list[str]:
    """256 keys (the most a terminal may hold) from ``start`` on, every venue among them."""
    return list(itertools.islice(itertools.cycle(keys), start, start + 256))


def frames_after(t0: float, n: int = FRAMES) -> Callable[[Terminal], bool]:
    return lambda t: len(t.since(t0, "frame")) >= n


# -- 0. one node ------------------------------------------------------------------------------
async def test_monotape_run_writers_2_serves_as_one_node(node: RunningServer) -> None:
    # First in the module: the host as it started, no other terminal connected.
    assert any("2 writers share the WebSocket port" in line for line in node.output)
    processes = await all_running(node)
    # the sequencer, 2 writers, the A and the B feed process, the venue
    assert len(processes) == 1 + 2 + 2 + 1 and all(r["pid"] for r in processes.values())
    universe_keys = await universe(node)
    prices = Prices()  # one price per (symbol, version) across all 20
    terminals = [Terminal(prices, name=f"t{n}") for n in range(20)]
    tasks: list[asyncio.Task[None]] = []
    try:
        for n, t in enumerate(terminals):
            # Two watchlists of 256 keys (the most a terminal may hold), ten terminals each:
            # a frame goes to a terminal only when it moves one of its symbols, so terminals
            # with the same watchlist, wherever they landed, must get the same frames.
            keys = watchlist(universe_keys, (n % 2) * 997)
            tasks.append(asyncio.create_task(run_terminal(node.bare_url, node.token, keys, t)))

        def enough() -> bool:
            for task in tasks:
                if task.done():
                    task.result()  # a terminal that ended: its exception is the failure
            return all(len(t.frames) >= 75 for t in terminals)

        await until(enough, "75 frames at every terminal", 120)
        split = admin(node)["terminals"]
        assert sorted(split) == ["writer-0", "writer-1"]
        # counted by the writers themselves (monotape_connections); the probe may linger
        assert sum(split.values()) >= 20 and all(split.values()), split
        samples = parse_samples(node.http("/metrics", timeout=30))
        assert sum_samples(samples, m.CONNECTIONS) == sum(split.values())
        assert sum_samples(samples, m.PROCESS_UP) == len(processes)
        if main_thread_schedstat().exists():  # each process's own run-queue wait, labelled
            waits = {dict(ls).get("process") for (n, ls) in samples if n == m.CPU_WAIT}
            assert waits >= set(processes), waits
        # Every frame that moved a watchlist's symbols reached every terminal of that watchlist,
        # on either writer (a late sequencer conflates the boundaries it overslept into the
        # next one, so numbers may skip: core/conflation.py, due_boundary; what counts is that
        # no terminal misses a frame its twins got).
        for group in (0, 1):
            twins = terminals[group::2]
            published = set().union(*(set(t.frames) for t in twins))
            for t in twins:
                assert t.faults == [], t.name
                assert t.frames == sorted(set(t.frames)), "frames out of order or twice"
                assert t.missed(published) == [], t.name
        assert prices.faults == []
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # /admin/latency merges the intervals every process wrote (10 s rotation): the write
    # stage from both writers, the encode stage from the sequencer, and the end-to-end
    # tick_to_write from the writers, from the tick ages the sequencer put in each frame
    def latency(stage: str) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(
            node.http(f"/admin/latency?stage={stage}&window=10m", node.admin_token, timeout=30)
        )
        return body

    # Waited for by count, not by intervals: a writer's first 10 s interval may close before
    # the venue is up (empty), and under load both writers' can.
    def stage_counted() -> bool:
        return all(latency(s)["count"] > 0 for s in ("write", "encode", "tick_to_write"))

    await until(stage_counted, "write, encode and tick_to_write values in /admin/latency", 60)
    # decoded -> handed to the kernel spans a frame's conflation: never below a write
    end_to_end, write = latency("tick_to_write"), latency("write")
    assert end_to_end["max_us"] >= write["p50_us"] > 0, (end_to_end, write)
    # kill -9 of a writer and its return on the port: case 2; the SIGTERM stop: the fixture.


# -- 1. kill -9 of a feed handler --------------------------------------------------------------
async def test_kill_9_of_a_feed_handler_its_twin_carries_the_venue_on(
    node: RunningServer,
) -> None:
    before = await all_running(node)
    keys = await universe(node)
    venue = next(iter(keys)).split(":")[0]
    watched = [k for k in keys if k.startswith(venue + ":")][:256]
    iids = {keys[k] for k in watched}
    crowd = Crowd(node, watched)
    victim = "handler-A"  # every venue's A handler: this venue's is one of them
    counted = restarts(node, victim)
    try:
        await crowd.connect(8, at_least=2)
        t_start = time.monotonic()
        # every watched symbol moves with both handlers up (the baseline the kill is held to)
        await crowd.until(lambda t: all(t.advanced.get(i, 0) > t_start for i in iids), "all move")
        t_kill = time.monotonic()
        os.kill(before[victim]["pid"], signal.SIGKILL)
        # no frozen symbol: the twin (in handler-B) moves every one of them again
        await crowd.until(
            lambda t: all(t.advanced.get(i, 0) > t_kill for i in iids), "all move after the kill"
        )
        after = await all_running(node)
        assert after[victim]["pid"] != before[victim]["pid"]
        assert after[victim]["restarts"] == before[victim]["restarts"] + 1
        for name in ("sequencer", "writer-0", "writer-1", "handler-B"):
            assert after[name]["pid"] == before[name]["pid"], f"{name} was restarted too"
        assert restarts(node, victim) == counted + 1
        # the restarted handler feeds again (its epoch fenced): no regression at any terminal
        t_back = time.monotonic()
        await crowd.until(lambda t: all(t.advanced.get(i, 0) > t_back for i in iids), "moves")
        await crowd.until(frames_after(t_back), "frames after the restart")
        await crowd.check()
        assert sum(len(t.since(t_kill, "snapshot")) for t in crowd.terminals) == 0
        assert crowd.gaps(since=t_kill) == []  # nothing hydrated since: every delta on its base
    finally:
        await crowd.close()


# -- 2. kill -9 of a writer --------------------------------------------------------------------
async def test_kill_9_of_a_writer_its_terminals_reconnect_to_the_other_and_it_comes_back(
    node: RunningServer,
) -> None:
    before = await all_running(node)
    keys = await universe(node)
    crowd = Crowd(node, watchlist(keys, 401), reconnect=True)
    counted = restarts(node, "writer-1")
    try:
        await crowd.connect(10, at_least=3)
        await crowd.until(lambda t: len(t.frames) >= FRAMES, "frames before the kill")
        moved, stayed = crowd.on_writer()["writer-1"], crowd.on_writer()["writer-0"]
        t_kill = time.monotonic()
        os.kill(before["writer-1"]["pid"], signal.SIGKILL)
        # its terminals reconnect at once (to writer-0: writer-1 is not listening yet), are
        # hydrated by a snapshot, and stream on; the held versions carry over the reconnect
        await crowd.until(lambda t: len(t.servers) >= 2 or t in stayed, "reconnected")
        await crowd.until(lambda t: t in stayed or bool(t.since(t_kill, "snapshot")), "rehydrated")
        await crowd.until(frames_after(t_kill), "frames after the kill")
        assert {t.servers[1] for t in moved} == {"writer-0"}
        assert all(t.servers == ["writer-0"] for t in stayed)  # never noticed
        await crowd.check()
        after = await all_running(node)
        assert after["writer-1"]["pid"] != before["writer-1"]["pid"]
        assert after["writer-0"]["pid"] == before["writer-0"]["pid"]
        assert after["sequencer"]["pid"] == before["sequencer"]["pid"]
        assert restarts(node, "writer-1") == counted + 1
        seen: set[str] = set()
        for _ in range(40):  # the kernel spreads connections over both listening writers
            # a writer just restarted on a busy machine may take seconds to answer: 60 s, as
            # terminal_check's terminals allow
            async with websockets.connect(
                node.url, compression=None, max_size=None, open_timeout=60
            ) as ws:
                hello = codec.decode_message(await ws.recv(decode=False))
            assert isinstance(hello, codec.Hello)
            seen.add(hello.server_id)
            if len(seen) == 2:
                break
        assert seen == {"writer-0", "writer-1"}  # back on the same port
    finally:
        await crowd.close()


# -- 3. kill -9 of the sequencer ---------------------------------------------------------------
async def test_kill_9_of_the_sequencer_every_terminal_gets_a_gap_snapshot(
    node: RunningServer,
) -> None:
    before = await all_running(node)
    keys = await universe(node)
    crowd = Crowd(node, watchlist(keys, 1203))
    counted = restarts(node, "sequencer")
    try:
        await crowd.connect(8, at_least=2)
        await crowd.until(lambda t: len(t.frames) >= FRAMES, "frames before the kill")
        t_kill = time.monotonic()
        os.kill(before["sequencer"]["pid"], signal.SIGKILL)
        await crowd.until(lambda t: bool(t.since(t_kill, "snapshot")), "a gap snapshot", 120)
        await crowd.until(frames_after(t_kill), "frames after the restart")
        await crowd.check()  # no regression, one price per version, no frame missed but by a gap
        # the first record of each symbol after a restart is a full one: never a gap
        assert crowd.gaps(since=t_kill) == []
        assert all(len(t.servers) == 1 for t in crowd.terminals)  # never disconnected
        after = await all_running(node)
        assert after["sequencer"]["pid"] != before["sequencer"]["pid"]
        for name in ("writer-0", "writer-1"):
            assert after[name]["pid"] == before[name]["pid"], f"{name} was restarted too"
        assert restarts(node, "sequencer") == counted + 1
    finally:
        await crowd.close()


# -- 4. SIGSTOP of a writer --------------------------------------------------------------------
async def test_a_writer_stopped_for_3_s_is_lapped_and_holds_back_no_other_terminal(
    node: RunningServer,
) -> None:
    before = await all_running(node)
    keys = await universe(node)
    crowd = Crowd(node, watchlist(keys, 1777))
    laps = metric(node, m.RING_LAPS, process="writer-1")
    try:
        await crowd.connect(10, at_least=3)
        await crowd.until(lambda t: len(t.frames) >= FRAMES, "frames before the stop")
        stopped, live = crowd.on_writer()["writer-1"], crowd.on_writer()["writer-0"]
        t_stop = time.monotonic()
        os.kill(before["writer-1"]["pid"], signal.SIGSTOP)
        try:
            # 3 s, and at least as long as the sequencer takes to publish more frames than the
            # ring holds (a starved sequencer conflates boundaries: count them, at writer-0)
            await asyncio.sleep(3.0)
            lap = RingConfig(total_bytes=RING_MIB << 20).geometry().slots + 10
            await until(lambda: all(len(t.since(t_stop, "frame")) > lap for t in live), "a lap", 60)
        finally:
            t_cont = time.monotonic()
            os.kill(before["writer-1"]["pid"], signal.SIGCONT)
        await crowd.until(
            lambda t: t not in stopped or bool(t.since(t_stop, "snapshot")),
            "snapshots after the lap",
        )
        await crowd.until(frames_after(t_cont), "frames after the stop")
        assert metric(node, m.RING_LAPS, process="writer-1") > laps
        # the other writer's terminals: frames all along, no gap, every frame their twins got
        for t in live:
            assert t.between(t_stop, t_cont), f"{t.name}: no frame while writer-1 was stopped"
            assert t.since(t_stop, "snapshot") == [], f"{t.name} was snapshotted"
        assert crowd.gaps(live, since=t_stop) == []
        await crowd.check()
        after = await all_running(node)
        assert {n: r["pid"] for n, r in after.items()} == {n: r["pid"] for n, r in before.items()}
    finally:
        os.kill(before["writer-1"]["pid"], signal.SIGCONT)  # whatever happened
        await crowd.close()
