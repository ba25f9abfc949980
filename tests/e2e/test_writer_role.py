"""Two writer roles as real processes (``python -m monotape.platform.host writer SPEC``) on one
port, fed by a frame ring the test publishes itself (it plays the host and the sequencer:
segments, config.json, frames every 40 ms whose symbols' versions rise, snapshots put first).

Real WebSocket terminals on loopback check, frame by frame: they land on both writers, each
receives every frame number from its first frame on, no version ever goes back; a writer
stopped for 3 s (SIGSTOP) is lapped, snapshots its terminals when it runs again, and the other
writer's terminals miss no frame meanwhile; an order ticket's mark reaches the interest segment
and the priority records come back; kill -9 of a writer: its terminals reconnect to the other
and hydrate; SIGTERM drains and stops with one ``role_stopped`` line. Frame numbers and
versions are counted, never rates or timings."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import websockets

from monotape import metric_names
from monotape.config import Config
from monotape.platform.host.interest import PriorityInterest
from monotape.platform.host.spec import RoleSpec, write_config
from monotape.platform.host.telemetry import port_file
from monotape.platform.model import Tick
from monotape.platform.ring import Entry, EntryKind, RingConfig, ShmRing
from monotape.platform.wire import codec
from monotape.platform.wire.requests import SetPriority, Subscribe, encode_request
from tests.conftest import node_config, until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FRAME_S = 0.040
# 60 slots of 8 KiB (2.4 s of frames at 25 Hz): a writer stopped for 3 s is lapped; one that
# runs keeps up (it is never more than a few frames behind even on a busy machine).
RING = RingConfig(
    total_bytes=4096 + 256 * 128 + 60 * 8192, slot_bytes=8192, snapshot_iids=256, max_readers=4
)
SYMBOLS = 8
TERMINALS = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tape:
    """Plays the sequencer: every frame moves every one of ``iids`` one version (epoch 1,
    seq = frame number), its full record put in the table before the frame is published."""

    def __init__(self, ring: ShmRing, iids: list[int]) -> None:
        self.ring = ring
        self.iids = iids
        self.frame_no = 0
        self.admitted_ns = 0

    @staticmethod
    def tick(iid: int, n: int) -> Tick:
        price = 1_000_000 + 100 * iid + 3 * n
        return Tick(iid, "XNAS", 1, n, 0, price, price + 10, price + 5, n)

    def frame(self) -> None:
        self.frame_no = n = self.frame_no + 1
        records = {}
        for iid in self.iids:
            new = self.tick(iid, n)
            self.ring.put_snapshot(iid, (1, n), codec.encode_full_record(new))
            records[iid] = codec.encode_delta_record(self.tick(iid, n - 1) if n > 1 else None, new)
        now = time.monotonic_ns()
        self.ring.publish(Entry(EntryKind.FRAME, n, now, now, records))

    def priority(self, iid: int) -> None:
        """A PRIORITY entry between frames: the latest version of ``iid``, full record."""
        self.admitted_ns = now = time.monotonic_ns()
        record = codec.encode_full_record(self.tick(iid, self.frame_no))
        self.ring.publish(Entry(EntryKind.PRIORITY, self.frame_no, 0, now, {}, {iid: record}))

    async def run(self) -> None:
        start = time.monotonic()
        while True:
            self.frame()
            # on the 40 ms grid; a late wake-up publishes at once, never catches up in a burst
            delay = start + self.frame_no * FRAME_S - time.monotonic()
            await asyncio.sleep(max(0.0, delay))


@dataclass
class Session:
    """One connection's view: which writer, and every message kind with its frame number."""

    server_id: str = ""
    log: list[tuple[str, int]] = field(default_factory=list)  # ("frame"|"snapshot", frame_no)
    priority: list[tuple[int, int]] = field(default_factory=list)  # (iid, seq)

    def frame_nos(self) -> list[int]:
        return [n for kind, n in self.log if kind == "frame"]

    def snapshots(self) -> int:
        return sum(1 for kind, _ in self.log if kind == "snapshot")


class Terminal:
    """A trader terminal with its own guard: held versions survive a reconnect, a snapshot
    below what it holds or a delta on another base is a fault; a delta at or below what it
    holds is dropped, and allowed only when a snapshot gave that version or a newer one (the
    shared table may be a few frames ahead of the last frame its writer read): the frames
    themselves never repeat or go back. A delta on another base for a symbol the last snapshot
    left out is the documented gap, not a fault (``unhydrated``; the test asks the writer's
    counter for it)."""

    def __init__(self, url: str, keys: list[str], prio: str | None = None) -> None:
        self.url = url
        self.keys = keys
        self.prio = prio
        self.held: dict[int, int] = {}
        self.sessions: list[Session] = []
        self.faults: list[str] = []
        self.reconnect = True
        self.from_snapshot: dict[int, int] = {}  # iid -> the version the last snapshot gave
        # deltas on another base for a symbol the last snapshot left out (a hydration, a gap or
        # a lap snapshot): the writer was 2+ frames behind the table (docs/processes.md:
        # counted as monotape_ring_snapshots_ahead_total; the terminal sees a gap, never a
        # regression)
        self.unhydrated: list[str] = []
        self.left_out: set[int] = set()  # held symbols the last snapshot did not carry

    @property
    def session(self) -> Session:
        return self.sessions[-1]

    async def run(self) -> None:
        while self.reconnect:
            try:
                async with websockets.connect(
                    self.url, compression=None, open_timeout=30, max_size=None
                ) as ws:
                    self.sessions.append(Session())
                    req = [1]
                    await ws.send(encode_request(Subscribe(req=1, keys=self.keys)))
                    async for data in ws:
                        assert isinstance(data, bytes)
                        self._on(codec.decode_message(data))
                        if self.prio is not None and req == [1] and self.session.log:
                            req.append(2)
                            await ws.send(encode_request(SetPriority(req=2, keys=[self.prio])))
            except (OSError, websockets.ConnectionClosed, TimeoutError):
                pass
            await asyncio.sleep(0.2)

    def _on(self, m: object) -> None:
        s = self.session
        if isinstance(m, codec.Hello):
            s.server_id = m.server_id
        elif isinstance(m, codec.Snapshot):
            s.log.append(("snapshot", m.frame_no))
            self.left_out = set(self.held) - {r.iid for r in m.records}
            for r in m.records:
                held = self.held.get(r.iid, 0)
                if r.seq < held:
                    self.faults.append(f"snapshot {r.iid} seq {r.seq} below held {held}")
                self.held[r.iid] = max(held, r.seq)
                self.from_snapshot[r.iid] = r.seq
        elif isinstance(m, codec.Frame):
            s.log.append(("frame", m.frame_no))
            for r in m.records:
                held = self.held.get(r.iid, 0)
                if r.seq <= held:
                    if r.seq > self.from_snapshot.get(r.iid, 0):
                        self.faults.append(f"frame {m.frame_no}: {r.iid} seq {r.seq} <= {held}")
                    continue
                if r.has_base and r.base_seq != held:
                    gap = f"frame {m.frame_no}: {r.iid} base {r.base_seq} != {held}"
                    first_sight = r.iid not in self.held and r.iid not in self.from_snapshot
                    left_out = first_sight or r.iid in self.left_out
                    (self.unhydrated if left_out else self.faults).append(gap)
                self.held[r.iid] = r.seq
                self.left_out.discard(r.iid)
        elif isinstance(m, codec.PriorityUpdate):
            s.priority.append((m.record.iid, m.record.seq))


def _left_out_gaps(terminals: list[Terminal], host: Host, writer: int) -> tuple[int, float]:
    """The gaps the terminals filed as left out so far, and ``writer``'s counter of them."""
    gaps = sum(len(t.unhydrated) for t in terminals)
    return gaps, host.metric(writer, metric_names.RING_SNAPSHOTS_AHEAD)


def _assert_left_out_counted(
    terminals: list[Terminal], host: Host, writer: int, since: tuple[int, float]
) -> tuple[int, float]:
    """Terminals that met new left-out gaps since ``since`` (gaps, counter): ``writer``, whose
    snapshots they were, counted new ones."""
    now = _left_out_gaps(terminals, host, writer)
    if now[0] > since[0]:
        assert now[1] > since[1], [t.unhydrated for t in terminals]
    return now


def consecutive(nos: list[int]) -> bool:
    return all(b == a + 1 for a, b in itertools.pairwise(nos))


def frames_between_snapshots_are_consecutive(s: Session) -> bool:
    """A jump in frame numbers is allowed only where a snapshot came in between."""
    prev: int | None = None
    for kind, n in s.log:
        if kind == "snapshot":
            prev = None
        elif prev is not None and n != prev + 1:
            return False
        else:
            prev = n
    return True


class Host:
    """What the host does for the writers: segments, run_dir, config.json, spawn, reap."""

    def __init__(self, root: Path, cfg: Config, writers: int) -> None:
        self.root = root
        self.port = cfg.server.ws_port
        self.run_dir = root / "run"
        self.run_dir.mkdir(mode=0o700)
        write_config(cfg, self.run_dir)
        tag = "w" + uuid.uuid4().hex[:12]
        self.ring = ShmRing.create(RING, tag=tag)
        self.interest = PriorityInterest.create(f"{self.ring.name}-prio", writers=writers)
        self.writers = writers
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def spec(self, index: int) -> RoleSpec:
        return RoleSpec(
            role="writer",
            index=index,
            name=f"writer-{index}",
            run_dir=str(self.run_dir),
            ring=self.ring.name,
            interest=self.interest.name,
            writers=self.writers,
            host_pid=os.getpid(),
        )

    def start(self, index: int) -> None:
        spec = self.spec(index)
        port_file(self.run_dir, spec.name).unlink(missing_ok=True)
        stderr = (self.root / f"{spec.name}.log").open("ab")
        self.procs[index] = subprocess.Popen(
            [sys.executable, "-m", "monotape.platform.host", "writer", spec.encode()],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        stderr.close()

    def log(self, index: int) -> list[dict[str, object]]:
        lines = (self.root / f"writer-{index}.log").read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def metrics_port(self, index: int) -> int | None:
        path = port_file(self.run_dir, f"writer-{index}")
        return int(path.read_text()) if path.exists() else None

    def metric(self, index: int, name: str) -> float:
        port = self.metrics_port(index)
        assert port is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith(name) and line[len(name)] in " {":
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} not in writer-{index}'s metrics")

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                proc.wait(timeout=30)
        self.ring.close()  # the producer (the host) unlinks
        self.interest.close()
        self.interest.unlink()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    port = _free_port()
    cfg = node_config(
        tmp_path / "data",
        {
            "server.ws_port": port,
            "simulator.venues": 2,
            "simulator.instruments": 40,
            "server.drain_interval_s": 0.05,
            "server.keepalive_interval_s": 0,
            "server.gc_freeze": False,
        },
    )
    h = Host(tmp_path, cfg, writers=2)
    try:
        yield h
    finally:
        h.close()
    assert not h.ring.path.exists() and not h.interest.path.exists()
    assert all(p.poll() is not None for p in h.procs.values())  # no orphans


async def test_two_writers_share_the_port_and_the_ring(host: Host) -> None:
    from monotape.platform.feeds.simulator import build_universe

    universe = build_universe(2, 40, node_config(host.root).simulator.seed)
    chosen = universe[:SYMBOLS]
    iids = [i.iid for i in chosen]
    assert max(iids) < RING.snapshot_iids
    tape = Tape(host.ring, iids)
    for _ in range(3):  # the table holds every symbol before any terminal subscribes
        tape.frame()
    publisher = asyncio.create_task(tape.run())
    host.start(0)
    host.start(1)
    url = f"ws://127.0.0.1:{host.port}/"
    terminals: list[Terminal] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        await until(lambda: all(host.metrics_port(i) for i in (0, 1)), "writers up", 60)
        for n in range(TERMINALS):
            keys = [i.key for i in chosen[n % 3 : n % 3 + 5]]
            terminals.append(Terminal(url, keys, prio=chosen[0].key if n == 0 else None))
        tasks = [asyncio.create_task(t.run()) for t in terminals]
        await until(
            lambda: all(t.sessions and len(t.session.frame_nos()) >= 25 for t in terminals),
            "every terminal streaming",
            60,
        )

        # (a) terminals land on both writers: the hello says which, and each writer's gauge
        on = {i: [t for t in terminals if t.session.server_id == f"writer-{i}"] for i in (0, 1)}
        assert on[0] and on[1] and len(on[0]) + len(on[1]) == TERMINALS
        for i in (0, 1):
            assert host.metric(i, "monotape_connections") == len(on[i])

        # the order ticket: the mark reaches the interest row of that terminal's writer, and
        # a priority record comes straight back to it
        ticket = terminals[0]
        w = int(ticket.session.server_id.rsplit("-", 1)[1])
        await until(lambda: host.interest.wanted(iids[0]), "the mark in the interest row", 30)
        assert host.interest.marked(w) == [iids[0]] and host.interest.marked(1 - w) == []
        tape.priority(iids[0])
        await until(lambda: ticket.session.priority, "the priority record", 30)
        assert ticket.session.priority[0][0] == iids[0]
        assert all(not t.session.priority for t in terminals[1:])

        # (b) + (c) every frame number from the first on, no version ever back; a symbol the
        # hydration left out (a loaded box: the writer 2+ frames behind) is a counted gap
        if any(t.unhydrated for t in terminals):
            ahead = sum(host.metric(i, metric_names.RING_SNAPSHOTS_AHEAD) for i in (0, 1))
            assert ahead > 0, [t.unhydrated for t in terminals]
        for t in terminals:
            assert t.faults == [], t.faults
            assert len(t.sessions) == 1 and t.session.snapshots() == 1  # the hydration only
            assert consecutive(t.session.frame_nos())

        # (d) writer 0 stops reading for 3 s: lapped; writer 1's terminals miss nothing
        before = {id(t): len(t.session.log) for t in terminals}
        left_out = _left_out_gaps(terminals, host, 0)  # (d) and (e) snapshot on writer 0
        stopped = host.procs[0]
        stopped.send_signal(signal.SIGSTOP)
        await asyncio.sleep(3.0)
        stopped.send_signal(signal.SIGCONT)
        await until(lambda: all(t.session.snapshots() >= 2 for t in on[0]), "gap snapshots", 60)
        mark = tape.frame_no
        await until(
            lambda: all(t.session.frame_nos()[-1] > mark + 10 for t in terminals),
            "everyone streaming again",
            60,
        )
        assert host.metric(0, "monotape_ring_laps_total") >= 1
        assert host.metric(1, "monotape_ring_laps_total") == 0
        assert host.metric(0, "monotape_gap_snapshots_total") >= len(on[0])
        for t in on[0]:
            after = t.session.log[before[id(t)] :]
            assert "snapshot" in {kind for kind, _ in after}, "lapped: a snapshot next"
            assert frames_between_snapshots_are_consecutive(t.session)
        for t in on[1]:
            assert t.session.snapshots() == 1 and consecutive(t.session.frame_nos())
        for t in terminals:
            assert t.faults == [], t.faults
        # a lap snapshot taken 2+ frames behind the table left symbols out: counted, never hidden
        left_out = _assert_left_out_counted(terminals, host, 0, left_out)

        # (e) kill -9 writer 1: its terminals reconnect to writer 0 and hydrate
        host.procs[1].kill()
        host.procs[1].wait(timeout=30)
        await until(
            lambda: all(
                len(t.sessions) >= 2
                and t.session.server_id == "writer-0"
                and t.session.snapshots() >= 1
                and len(t.session.frame_nos()) >= 10
                for t in on[1]
            ),
            "reconnected to writer 0 and streaming",
            60,
        )
        for t in terminals:
            assert t.faults == [], t.faults
            assert consecutive(t.session.frame_nos()[-10:])
        _assert_left_out_counted(terminals, host, 0, left_out)
        assert host.metric(0, "monotape_connections") == TERMINALS
    finally:
        for t in terminals:
            t.reconnect = False
        # SIGTERM: writer 0 drains (close frames with reconnect hints), then stops
        if host.procs.get(0) is not None and host.procs[0].poll() is None:
            host.procs[0].send_signal(signal.SIGTERM)
            for _ in range(600):
                if host.procs[0].poll() is not None:
                    break
                await asyncio.sleep(0.1)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        publisher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await publisher
    assert host.procs[0].returncode == 0
    lines = host.log(0)
    stopped_lines = [line for line in lines if line.get("event") == "role_stopped"]
    assert len(stopped_lines) == 1 and stopped_lines[0]["process"] == "writer-0"
    assert all(line.get("process") == "writer-0" for line in lines)
    assert any(line.get("event") == "drain_started" for line in lines)


def _gone(pid: int) -> bool:
    """Exited (a zombie waiting for whoever inherited it counts: it runs nothing)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


async def test_a_writer_whose_host_dies_exits_by_itself(host: Host) -> None:
    """kill -9 of the host: the writer (a child of a stand-in host here) stops on its own."""
    spec = host.spec(0)
    stand_in = (
        "import os, subprocess, sys, time\n"
        "from monotape.platform.host.spec import RoleSpec\n"
        "spec = RoleSpec.decode(sys.argv[1]); spec.host_pid = os.getpid()\n"
        "p = subprocess.Popen([sys.executable, '-m', 'monotape.platform.host', 'writer',"
        " spec.encode()], stderr=open(sys.argv[2], 'ab'))\n"
        "print(p.pid, flush=True); time.sleep(600)\n"
    )
    log = host.root / "writer-0.log"
    parent = subprocess.Popen(
        [sys.executable, "-c", stand_in, spec.encode(), str(log)], stdout=subprocess.PIPE
    )
    host.procs[9] = parent  # reaped by the fixture whatever happens
    assert parent.stdout is not None
    writer_pid = int(parent.stdout.readline())
    try:
        await until(lambda: host.metrics_port(0), "the writer up", 60)
        parent.kill()
        parent.wait(timeout=30)
        await until(lambda: _gone(writer_pid), "the writer gone with its host", 30)
    finally:
        if not _gone(writer_pid):
            os.kill(writer_pid, signal.SIGKILL)
    events = [line.get("event") for line in host.log(0)]
    assert "role_stopped" in events and ("host_gone" in events or "role_signal" in events)
