"""The sequencer role as a real process (``python -m monotape.platform.host sequencer SPEC``)
behind a real nats-server: the test plays the host (creates the ring and the interest segment,
writes config.json) and a writer (a ShmReader), and publishes ticks on NATS as the handlers do.

Frames arrive on the 40 ms grid with rising versions and the snapshot table holds them; a
wanted symbol also goes out in PRIORITY entries; after kill -9 and a restart (restarts=1) the
reader gets Gap(RESTARTED) and no version at or below one it saw is ever published again, even
when the handlers' late copies of old versions arrive; SIGTERM stops the role with one
``role_stopped`` line. Counted frame numbers and versions, never rates."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest

from monotape import metric_names as m
from monotape.config import Config, NatsConfig, SimulatorConfig
from monotape.loadgen.launch import scrape, sum_samples
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.host.interest import PriorityInterest
from monotape.platform.host.spec import RoleSpec, write_config
from monotape.platform.host.telemetry import port_file
from monotape.platform.model import Instrument, Tick
from monotape.platform.ring import (
    EntryKind,
    Gap,
    GapCause,
    Lapped,
    RingConfig,
    RingFrame,
    ShmReader,
    ShmRing,
)
from monotape.platform.wire import codec
from monotape.platform.wire.batch import TickBatch, batch_from_ticks

pytestmark = [pytest.mark.e2e]

FRAME_NS = 40_000_000
SIM = SimulatorConfig(venues=2, instruments=40)
# 8 MiB: a 4,096-iid table and 30 slots of 256 KiB; the reader keeps up, it is never lapped
RING = RingConfig(total_bytes=8 << 20, slot_bytes=256 * 1024, snapshot_iids=4096, max_readers=4)


class Host:
    """What the host does for the role: segments, run_dir, config.json, spawn, reap."""

    def __init__(self, nats_url: str | None, root: Path) -> None:
        """``nats_url``: the bus is NATS; None: the host's IPC bus (run_dir/bus.sock)."""
        self.run_dir = root / "run"
        self.run_dir.mkdir(mode=0o700)
        cfg = Config(data_dir=str(root / "data"), simulator=SIM)
        if nats_url is not None:
            # a long first connect: the out-of-reach test stops the role in the middle of it
            nats = NatsConfig(servers=nats_url, connect_timeout_s=60.0)
            cfg = msgspec.structs.replace(cfg, bus="nats", nats=nats)
        write_config(cfg, self.run_dir)
        tag = "t" + uuid.uuid4().hex[:12]
        self.ring = ShmRing.create(RING, tag=tag)
        self.interest = PriorityInterest.create(f"{self.ring.name}-prio", writers=1)
        self.procs: list[subprocess.Popen[bytes]] = []

    def spec(self, restarts: int) -> RoleSpec:
        return RoleSpec(
            role="sequencer",
            name="sequencer",
            run_dir=str(self.run_dir),
            ring=self.ring.name,
            interest=self.interest.name,
            writers=1,
            host_pid=os.getpid(),
            restarts=restarts,
        )

    def start(self, restarts: int = 0) -> subprocess.Popen[bytes]:
        port_file(self.run_dir, "sequencer").unlink(missing_ok=True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "monotape.platform.host", "sequencer",
             self.spec(restarts).encode()],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        self.procs.append(proc)
        deadline = time.monotonic() + 60
        while not port_file(self.run_dir, "sequencer").exists():  # listening and subscribed
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the sequencer role did not come up in 60 s"
            time.sleep(0.05)
        return proc

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
            if p.stderr is not None:
                p.stderr.close()
        self.ring.close()  # the host owns unlink
        self.interest.close()
        self.interest.unlink()


@contextmanager
def hosting(nats_url: str | None) -> Iterator[Host]:
    with tempfile.TemporaryDirectory() as tmp:
        h = Host(nats_url, Path(tmp))
        try:
            yield h
        finally:
            h.close()
        assert not h.ring.path.exists() and not h.interest.path.exists()


@pytest.fixture
def host(nats_url: str) -> Iterator[Host]:
    with hosting(nats_url) as h:
        yield h


@pytest.fixture
def ipc_host() -> Iterator[Host]:
    with hosting(None) as h:
        yield h


class Tape:
    """The reader's view: every entry, frame numbers, versions per symbol as frames showed them."""

    def __init__(self, reader: ShmReader) -> None:
        self.reader = reader
        self.frames: list[RingFrame] = []
        self.priority: list[RingFrame] = []
        self.gaps: list[Gap] = []
        self.shown: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.last_no = 0  # entries are read one after the other, none lost, between gaps

    def poll(self) -> None:
        while (got := self.reader.poll()) is not None:
            assert not isinstance(got, Lapped), got
            if isinstance(got, Gap):
                self.gaps.append(got)
                self.last_no = 0
                continue
            assert not self.last_no or got.no == self.last_no + 1, (self.last_no, got.no)
            self.last_no = got.no
            if got.kind is EntryKind.FRAME:
                self.frames.append(got)
                for iid, chunk in got.records.items():
                    rec = codec.decode_record(chunk)
                    self.shown[iid].append((rec.epoch, rec.seq))
            else:
                self.priority.append(got)

    def seen(self, iid: int) -> tuple[int, int]:
        return self.shown[iid][-1] if self.shown[iid] else (0, 0)


def ticks_for(universe: list[Instrument], epoch: int, seqs: range, bump: int = 0) -> list[Tick]:
    out = []
    for seq in seqs:
        for inst in universe:
            price = 100_000 + 10 * seq + inst.iid + bump
            out.append(
                Tick(inst.iid, inst.venue, epoch, seq, time.time_ns(), price, price + 5, price + 2,
                     100, handler="A", decoded_ns=time.monotonic_ns())
            )  # fmt: skip
    return out


def bus_batches(ticks: list[Tick]) -> list[TickBatch]:
    """``ticks`` as the handlers publish them: a tick batch a venue, each in its own order."""
    return batch_from_ticks(sorted(ticks, key=lambda t: t.venue))  # stable: order kept


async def play(bus: NatsTickBus, tape: Tape, batches: list[list[Tick]], gap_s: float) -> None:
    for batch in batches:
        for venue_batch in bus_batches(batch):
            bus.publish(venue_batch)
        await bus.flush()
        await asyncio.sleep(gap_s)
        tape.poll()


async def settle(tape: Tape, frames: int) -> None:
    """Read until ``frames`` more frames have arrived (generous: the machine may be busy)."""
    want = len(tape.frames) + frames
    deadline = time.monotonic() + 60
    while len(tape.frames) < want:
        assert time.monotonic() < deadline, f"{want - len(tape.frames)} frames missing"
        await asyncio.sleep(0.02)
        tape.poll()


def assert_rising(tape: Tape) -> None:
    for iid, vs in tape.shown.items():
        assert all(a < b for a, b in itertools.pairwise(vs)), (iid, vs)
    nos = [f.frame_no for f in tape.frames]
    assert all(a < b for a, b in itertools.pairwise(nos)), "frame numbers went back"
    assert all(f.boundary_ns == f.frame_no * FRAME_NS for f in tape.frames)


async def test_frames_snapshots_priority_and_a_restart(host: Host, nats_url: str) -> None:
    universe = build_universe(SIM.venues, SIM.instruments, SIM.seed)
    some = universe[:12]
    wanted = some[3].iid
    host.interest.set(0, wanted, True)
    reader = ShmReader.attach(host.ring.name, 0)
    tape = Tape(reader)
    bus = NatsTickBus(name="test-handlers")
    await bus.connect([nats_url], timeout_s=30)
    try:
        proc = host.start()
        await settle(tape, 3)
        batches = [ticks_for(some, 1, range(s, s + 2)) for s in range(1, 41, 2)]
        await play(bus, tape, batches, 0.02)
        await settle(tape, 3)
        tape.gaps.clear()  # the first start moved the generation too (no reader cared)

        # frames on the grid, rising versions, the last one of each symbol in the table
        assert len(tape.frames) >= 10
        assert_rising(tape)
        for inst in some:
            assert tape.seen(inst.iid) == (1, 40), inst
            snap = reader.snapshot(inst.iid)
            assert snap is not None and snap.version == (1, 40)
            assert codec.decode_record(snap.chunk).bid == 100_000 + 400 + inst.iid
        # the order ticket's symbol bypassed conflation, and only it
        assert tape.priority and all(list(p.priority.iids) == [wanted] for p in tape.priority)
        assert max(codec.decode_record(p.priority.chunk(0)).seq for p in tape.priority) == 40

        # kill -9, then a restart: the writers' Gap, and nothing at or below what was shown
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        before = {i.iid: tape.seen(i.iid) for i in some}
        host.start(restarts=1)
        await settle(tape, 2)
        assert tape.gaps and tape.gaps[0] == Gap(GapCause.RESTARTED)
        # the lagging twin's late copies (old versions, other prices), then new updates
        late = [ticks_for(some, 1, range(30, 41), bump=7)]
        fresh = [ticks_for(some, 1, range(s, s + 2)) for s in range(41, 61, 2)]
        after_restart = len(tape.frames)
        await play(bus, tape, late, 0)
        await settle(tape, 3)  # framed alone: a conflated newer tick cannot hide them
        assert not any(f.records for f in tape.frames[after_restart:])
        await play(bus, tape, fresh, 0.02)
        await settle(tape, 3)
        assert_rising(tape)
        for inst in some:
            shown_after = [
                codec.decode_record(c)
                for f in tape.frames[after_restart:]
                for iid, c in f.records.items()
                if iid == inst.iid
            ]
            assert shown_after, inst
            assert all((r.epoch, r.seq) > before[inst.iid] for r in shown_after), inst
            assert tape.seen(inst.iid) == (1, 60)

        # its own /metrics, for the host to scrape: the ring's, the guard's, the stages'
        port = int(port_file(host.run_dir, "sequencer").read_text())
        samples = await asyncio.to_thread(scrape, f"http://127.0.0.1:{port}")
        assert sum_samples(samples, m.RING_PUBLISHED) >= 5
        refused = sum_samples(samples, m.DUPLICATE_TICKS) + sum_samples(
            samples, m.SEQUENCE_REGRESSIONS
        )
        assert refused == len(late[0])  # every late copy, refused by the seeded guard
        assert sum_samples(samples, m.TICKS_ADMITTED) == len(fresh) * 2 * len(some)
        stages = {dict(ls).get("stage") for n, ls in samples if n == m.STAGE_DURATION + "_count"}
        assert {"sequence", "conflate", "encode"} <= stages

        # SIGTERM: stops within the deadline, one role_stopped line that names the process
        live = host.procs[-1]
        live.send_signal(signal.SIGTERM)
        assert live.wait(10) == 0
        assert live.stderr is not None
        lines = [
            json.loads(x) for x in live.stderr.read().decode().splitlines() if x.startswith("{")
        ]
        stopped = [x for x in lines if x.get("event") == "role_stopped"]
        assert len(stopped) == 1 and stopped[0]["process"] == "sequencer"
        started = [x for x in lines if x.get("event") == "role_started"]
        assert started and started[0]["seeded"] >= len(some)
        assert all(x.get("process") == "sequencer" for x in lines)
    finally:
        await bus.close()
        reader.close()


async def test_ticks_over_the_host_bus(ipc_host: Host) -> None:
    """Without NATS the handlers reach the sequencer on the host's IPC bus, which it binds."""
    from monotape.platform.bus.ipc import IpcTickBus, bus_path

    some = build_universe(SIM.venues, SIM.instruments, SIM.seed)[:8]
    reader = ShmReader.attach(ipc_host.ring.name, 0)
    tape = Tape(reader)
    bus = IpcTickBus(bus_path(ipc_host.run_dir), time.monotonic_ns)
    try:
        ipc_host.start()
        await settle(tape, 2)
        for s in range(1, 21):
            batches = bus_batches(ticks_for(some, 1, range(s, s + 1)))
            deadline = time.monotonic() + 30
            while True:  # the first sends may precede the handler end's connect: resend
                sent = bus.counters.sent_messages
                for batch in batches:
                    bus.publish(batch)
                if bus.counters.sent_messages >= sent + len(batches):
                    break
                assert time.monotonic() < deadline, "never connected to the sequencer's bus"
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.01)
            tape.poll()
        await settle(tape, 3)
        assert_rising(tape)
        for inst in some:
            assert tape.seen(inst.iid) == (1, 20)
            snap = reader.snapshot(inst.iid)
            assert snap is not None and snap.version == (1, 20)
        assert not tape.priority  # nobody marked anything
    finally:
        bus.close()
        reader.close()


def test_sigterm_while_nats_is_out_of_reach_stops_it_at_once() -> None:
    """A SIGTERM during the first connect (NATS down: it would retry for 60 s) stops the role
    within its deadline, cleanly."""
    with hosting("nats://127.0.0.1:1") as host:
        proc = subprocess.Popen(
            [sys.executable, "-m", "monotape.platform.host", "sequencer",
             host.spec(0).encode()],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        host.procs.append(proc)
        assert proc.stderr is not None
        lines: list[dict[str, object]] = []
        deadline = time.monotonic() + 60
        while not any(x.get("event") == "nats_error" for x in lines):  # it is connecting
            assert time.monotonic() < deadline, lines
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if ready:
                line = proc.stderr.readline().decode()
                assert line, f"the role exited: {proc.wait()}"
                if line.startswith("{"):
                    lines.append(json.loads(line))
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        waited = time.monotonic() - t0
        rest = [json.loads(x) for x in proc.stderr.read().decode().splitlines() if x[:1] == "{"]
        assert [x["event"] for x in rest if x["event"] == "role_stopped"] == ["role_stopped"]
        # not the 60 s connect timeout: the stop did not wait for it (generous for a busy box)
        assert waited < 20, waited


def test_a_role_whose_host_is_gone_stops_by_itself(tmp_path: Path) -> None:
    """Started by a middle process that then dies: the role is re-parented and exits."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    write_config(Config(data_dir=str(tmp_path / "data"), simulator=SIM), run_dir)
    ring = ShmRing.create(RING, tag="t" + uuid.uuid4().hex[:12])
    try:
        spec = RoleSpec(role="sequencer", name="sequencer", run_dir=str(run_dir), ring=ring.name)
        # the middle process is the role's host: it starts the role, prints its pid, exits
        script = (
            "import os, subprocess, sys, msgspec\n"
            "from monotape.platform.host.spec import RoleSpec\n"
            "spec = msgspec.json.decode(sys.argv[1], type=RoleSpec)\n"
            "spec = msgspec.structs.replace(spec, host_pid=os.getpid())\n"
            "p = subprocess.Popen([sys.executable, '-m', 'monotape.platform.host', 'sequencer',"
            " spec.encode()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "print(p.pid, flush=True)\n"
            "import time; time.sleep(3)\n"
        )
        middle = subprocess.run(
            [sys.executable, "-c", script, msgspec.json.encode(spec).decode()],
            capture_output=True,
            timeout=120,
            check=True,
        )
        pid = int(middle.stdout.split()[0])
        deadline = time.monotonic() + 30
        while _alive(pid):
            assert time.monotonic() < deadline, "the orphaned sequencer role is still running"
            time.sleep(0.1)
    finally:
        ring.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of an exited child of ours is not alive (it is re-parented to init, not us)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False
