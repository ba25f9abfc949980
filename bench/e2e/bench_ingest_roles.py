"""Ingest's CPU per venue tick, role by role: the host beside the one-process node (issue 35).

Part one, no terminal: at 120k and 190k ticks/s offered, the node (``--writers 0``) and the
host alternated on fresh servers, each process's utime+stime from /proc over a steady window
divided by the ticks the sequencer admitted; the host's processes found by role in its own
``GET /admin/processes``, never by importing the pipeline, so the bench reads whatever the
internals become. Part two: the host at 190k with 4,200 terminals from bench_latency's load
client: its own roles' cores, the sequencer's frame interval at a probe terminal, whether every
terminal got >= 24 frames/s and who waited for a core. The runs are bench_latency's
``measure`` with a ``Watch`` beside it; every row's note carries the issue's goal lines as met
or NOT met. docs/benchmarks.md says what each row means.

    .venv/bin/python -m bench.e2e.bench_ingest_roles [--quick] [--rates R,R] [--writers N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Final

import psutil

from bench.common import (
    Row,
    goal,
    median_min_max,
    most_waiting,
    per_second,
    percentile,
    print_rows,
    raise_nofile,
    row,
    run_queue_wait_s,
)
from bench.e2e.bench_latency import (
    SCRAPE_TIMEOUT_S,
    Outcome,
    Size,
    measure,
)
from bench.wsclient import FLOOR, CountingClient, Counts, client_frame
from monotape.config import MAX_WRITERS, Config, available_cores
from monotape.loadgen.launch import RunningNode, sum_samples
from monotape.metric_names import (
    FRAME_BOUNDARIES,
    FRAME_BOUNDARIES_SKIPPED,
    GAP_SNAPSHOTS,
    IPC_DROPPED_ITEMS,
    RING_LAPS,
    RING_MISSED,
    RING_PUBLISHED,
    SLOW_CONSUMER_DROPS,
    TICKS_RECEIVED,
    TICKS_REJECTED,
)
from monotape.platform.wire.requests import Subscribe, encode_request

__all__ = ["FULL", "QUICK", "FrameProbe", "Plan", "RoleRun", "run"]

RATES: Final = (120_000, 190_000)
# The goal lines (issue 35, "Must show").
GOAL_US_PER_TICK: Final = 2.5  # handlers + sequencer on the host
GOAL_RATIO: Final = 1.25  # host handlers + sequencer / the node's whole, per tick
GOAL_INGEST_CORES: Final = 0.5  # handlers + sequencer at 190k offered
GOAL_INGEST_CORES_AT: Final = 190_000
GOAL_HOST_CORES: Final = 1.3  # handlers + sequencer + writers, 4,200 terminals at 190k
HELD: Final = 0.95  # a run that admitted less than this share of the offered rate says so
# Roles outside "handlers + sequencer"; "other": a process of the tree the host does not list.
NOT_INGEST: Final = frozenset({"venue", "writer", "host", "other"})
ROLE_ORDER: Final = ("handler", "sequencer", "venue", "writer", "host")  # rows in tick order
# Where ticks went, for a run that did not hold its rate: (note label, counter).
FLOW: Final = (
    ("received by the handlers", TICKS_RECEIVED),
    ("dropped on the buses (every hop)", IPC_DROPPED_ITEMS),
    ("refused at the gate", TICKS_REJECTED),
)
# Where frames went, for the frame interval's note: the sequencer's side, then the writers'.
FRAME_FLOW: Final = (
    ("boundaries taken", FRAME_BOUNDARIES),
    ("skipped", FRAME_BOUNDARIES_SKIPPED),
    ("ring entries published", RING_PUBLISHED),
    ("writers' ring laps", RING_LAPS),
    ("entries lost to laps", RING_MISSED),
    ("gap snapshots", GAP_SNAPSHOTS),
    ("slow-consumer drops", SLOW_CONSUMER_DROPS),
)
PROBE_CONNECT_S: Final = 20.0  # the probe terminal retries a refused upgrade this long


@dataclass(frozen=True)
class Plan:
    rates: tuple[int, ...]
    repeats: int  # part one's runs per variant and rate (rows: their median and min-max)
    window_s: int  # part one's steady window
    warmup_s: int  # part one: seconds after start before the window (besides measure's own 6)
    # Part two as bench_latency measures it: rate, terminals (0: no part two), ramp, window,
    # load-client processes (all on its LOAD_CPU) and runs.
    loaded: Size


FULL = Plan(RATES, 3, 15, 4, Size(190_000, 4_200, 10, 15, processes=2, repeats=3))
QUICK = Plan(RATES, 1, 5, 2, Size(190_000, 300, 3, 5, processes=1, repeats=1))


# -- one probe terminal: when each frame reaches a screen ---------------------------------------
class _Timed(CountingClient):
    """The load client's terminal, noting the monotonic time each new frame number arrives."""

    def __init__(
        self,
        requests: bytes,
        done: asyncio.Future[bool],
        server: RunningNode,
        arrivals: list[tuple[float, int]],
    ) -> None:
        host, path = f"127.0.0.1:{server.ws_port}", f"/?token={server.token}"
        super().__init__(Counts(), host, requests, done, path, numbers=True)
        self.arrivals = arrivals

    def _numbered(self, kind: int, buf: bytes, i: int, end: int) -> None:
        shown = self.boundaries
        super()._numbered(kind, buf, i, end)
        if self.boundaries != shown:
            self.arrivals.append((time.monotonic(), self.frame_no))


def _same(client: _Timed) -> _Timed:
    return client


@dataclass(frozen=True)
class FrameStats:
    frames: int  # new frame numbers the probe was shown inside the window
    interval_p99_ms: float  # between consecutive ones, as they reached the probe
    interval_max_ms: float
    slot_gap_p99: int  # grid slots between consecutive frame numbers (1: none passed over)
    error: str = ""  # why the probe was not connected ("" when it was)


class FrameProbe:
    """One terminal of the bench's own (its own thread and event loop), subscribed to as many
    symbols as a connection may hold (the first of ``GET /admin/symbols``), so that every
    frame carries one of them: a frame number is the sequencer's 40 ms grid slot, so the
    times new numbers reach it are the sequencer's frame intervals plus the writer's and
    loopback's jitter (an upper bound on the sequencer's own), and the slot gaps say how many
    boundaries were passed over."""

    def __init__(self) -> None:
        self.requests = b""
        self.arrivals: list[tuple[float, int]] = []
        self.error = "not started"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: _Timed | None = None
        self._task: Future[None] | None = None

    def start(self, server: RunningNode) -> None:
        limit = Config().server.max_subscriptions
        body = server.get(f"/admin/symbols?limit={limit}", server.admin_token, SCRAPE_TIMEOUT_S)
        keys = [str(s["key"]) for s in json.loads(body)["symbols"]][:limit]
        self.requests = client_frame(0x2, encode_request(Subscribe(req=1, keys=keys)))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="bench-frame-probe", daemon=True
        )
        self._thread.start()
        self._task = asyncio.run_coroutine_threadsafe(self._connect(server), self._loop)

    async def _connect(self, server: RunningNode) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + PROBE_CONNECT_S
        while loop.time() < until:
            done: asyncio.Future[bool] = loop.create_future()
            client = _Timed(self.requests, done, server, self.arrivals)
            try:
                await loop.create_connection(
                    functools.partial(_same, client), "127.0.0.1", server.ws_port
                )
                if await asyncio.wait_for(done, 10.0):
                    self._client, self.error = client, ""
                    return
                self.error = client.status.decode(errors="replace") or "closed"
            except (OSError, TimeoutError) as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                if client.transport is not None:
                    client.transport.abort()
            await asyncio.sleep(1.0)

    async def _close(self) -> None:
        if self._client is not None and self._client.transport is not None:
            self._client.close()
            await asyncio.sleep(0.1)
            self._client.transport.abort()
            await asyncio.sleep(0)

    def stop(self) -> None:
        """Close the probe's connection and its loop (idempotent; nothing to do unstarted)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None
        if self._task is not None:
            self._task.cancel()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(5.0)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5.0)
        if not thread.is_alive():  # a loop still running cannot be closed: left to the exit
            loop.close()

    def stats(self, t0: float, t1: float, frame_ms: float) -> FrameStats:
        """The frames that reached the probe between ``t0`` and ``t1`` (monotonic)."""
        got = [(t, n) for t, n in list(self.arrivals) if t0 <= t <= t1]
        pairs = list(itertools.pairwise(got))
        gaps = [(b - a) * 1e3 for (a, _), (b, _) in pairs]
        slots = [float(m - n) for (_, n), (_, m) in pairs]
        return FrameStats(
            frames=len(got),
            interval_p99_ms=percentile(gaps, 99),
            interval_max_ms=max(gaps, default=0.0),
            slot_gap_p99=int(percentile(slots, 99)),
            error=self.error if len(got) < 2 else "",
        )


# -- what the bench reads beside measure(): roles, run-queue waits, the probe ------------------
class _Watch:
    """bench_latency's ``Watch``: at each mark, every process of the server by name and role
    (the host's ``/admin/processes``; the node is one process) and of the bench's load clients
    (by command line), with its run-queue wait from /proc; the probe's frames in between."""

    def __init__(self, probe: FrameProbe | None) -> None:
        self.probe = probe
        self.server: RunningNode | None = None
        self.writers = 0
        self.roles: dict[str, str] = {}  # process name -> role
        self._known: dict[str, tuple[int, str]] = {}  # name -> (pid, role), /admin/processes
        self.marks: list[tuple[float, dict[str, tuple[int, float]]]] = []

    def start(self, server: RunningNode, writers: int) -> None:
        self.server, self.writers = server, writers
        if self.probe is not None:
            self.probe.start(server)

    def mark(self) -> None:
        waits = {}
        for name, pid in self._pids().items():
            w = run_queue_wait_s(pid)
            if w is not None:
                waits[name] = (pid, w)
        self.marks.append((time.monotonic(), waits))

    def stop(self) -> None:
        if self.probe is not None:
            self.probe.stop()

    def _pids(self) -> dict[str, int]:
        assert self.server is not None
        root = "host" if self.writers else "node"  # the supervisor, or the one process
        pids = {root: self.server.proc.pid}
        self.roles[root] = root
        if self.writers:
            try:
                body = json.loads(
                    self.server.get("/admin/processes", self.server.admin_token, SCRAPE_TIMEOUT_S)
                )
                self._known = {
                    str(p["name"]): (int(p["pid"]), str(p["role"]))
                    for p in body["processes"]
                    if p.get("pid")
                }
                standby = (body.get("host") or {}).get("standby")
                if standby:  # the warm sequencer standby: idle until it takes over
                    self._known["standby-sequencer"] = (int(standby), "standby")
            except OSError:  # an overloaded host answers late: the pids it gave last time
                pass
            for name, (pid, role) in self._known.items():
                pids[name], self.roles[name] = pid, role
        clients = [
            c for c in psutil.Process().children()
            if "bench.wsclient" in " ".join(_cmdline(c))
        ]  # fmt: skip
        for k, c in enumerate(sorted(clients, key=lambda c: c.pid)):
            pids[f"load-client-{k}"] = c.pid
        return pids

    def waits(self) -> dict[str, float]:
        """s/s each process waited for a core between the two marks ({} without both)."""
        if len(self.marks) < 2:
            return {}
        (t0, w0), (t1, w1) = self.marks[0], self.marks[-1]
        return per_second(w0, w1, t1 - t0) if t1 > t0 else {}


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return list(proc.cmdline())
    except psutil.Error:
        return []


@dataclass
class RoleRun:
    """One run: measure()'s outcome, the processes' roles, their waits and the probe's frames."""

    outcome: Outcome
    roles: dict[str, str]
    waits: dict[str, float]  # s/s on a run queue (/proc), by process, load clients included
    frames: FrameStats | None = None
    offered: int = 0

    @property
    def ticks_per_s(self) -> float:
        """Admitted ticks/s in the window (the offered rate if the counter was not read)."""
        return self.outcome.ticks_per_s or float(self.offered)

    def role(self, name: str) -> str:
        """The role the host gave the process ("other" for one of its tree it does not list)."""
        return self.roles.get(name, "other")

    def cpu(self, name: str) -> float:
        return self.outcome.cpu_by_process.get(name, 0.0)

    def cores(self, keep: Callable[[str], bool]) -> float:
        """Cores of the processes whose role ``keep`` takes."""
        return sum(c for n, c in self.outcome.cpu_by_process.items() if keep(self.role(n)))

    def ingest(self) -> float:
        """handlers + sequencer: every role but the venue, the writers and the supervisor
        (the node: the whole process, its simulator included)."""
        return self.cores(lambda r: r not in NOT_INGEST)

    def us(self, cores: float) -> float:
        return cores * 1e6 / self.ticks_per_s if self.ticks_per_s else 0.0

    def held(self) -> bool:
        return self.ticks_per_s >= HELD * self.offered

    def flow(self, table: Sequence[tuple[str, str]] = FLOW) -> dict[str, float]:
        """Per second over the window, ``table``'s counters (where the ticks went, or the
        frames), summed over every process and label; one the server does not export is left
        out."""
        m0, m1 = self.outcome.window_samples
        window = self.outcome.window_s
        names = {n for n, _ in m1}
        return {
            label: (sum_samples(m1, name) - sum_samples(m0, name)) / window
            for label, name in table
            if name in names and window > 0
        }


def _one(
    size: Size, writers: int, log: Callable[[str], None], probe: FrameProbe | None = None
) -> RoleRun:
    watch = _Watch(probe)
    variant = f"host, {writers} writers" if writers else "1 process"
    o = measure(size, size.terminals, variant, log, writers, watch=watch)
    frames = None
    if probe is not None:
        t0, t1 = (watch.marks[0][0], watch.marks[-1][0]) if len(watch.marks) > 1 else (0, 0)
        frames = probe.stats(t0, t1, _frame_ms())
    return RoleRun(o, dict(watch.roles), watch.waits(), frames, size.rate)


def _frame_ms() -> float:
    return float(Config().server.frame_ms)


def default_writers() -> int:
    """The writers of a host with one per core here, at least 1: the host as "auto" runs it
    from 3 cores (on 2, "auto" runs the one-process node: config.auto_placement)."""
    return max(1, min(MAX_WRITERS, available_cores()))


# -- rows --------------------------------------------------------------------------------------
def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _each(values: Iterable[float], spec: str = ".2f") -> str:
    """One figure per run, for a note: ``0.31 / 0.29 / 0.33``."""
    return " / ".join(format(v, spec) for v in values)


def _runs_row(
    label: str,
    tag: str,
    vals: Sequence[float],
    unit: str,
    note: str,
    ratio: float | None = None,
    peer: str = "",
) -> Row:
    """The median of the runs with their min-max, every run's value in the note."""
    med, lo, hi = median_min_max(vals)
    per_run = " / ".join(_fmt(v) for v in vals)
    note = f"{note}; runs {per_run}"
    return row(label, tag, med, unit, lo=lo, hi=hi, ratio=ratio, peer=peer, note=note)


def _goal(value: float, limit: float, what: str, held: bool) -> str:
    """A cores goal: a host that did not keep up spent fewer cores than the load needs, so
    its figure under the limit is not a pass."""
    if held or value > limit:
        return goal(value, limit, what)
    return f"goal {what} <= {limit:g}: NOT met (under it only because the runs did not hold)"


def _flow_text(r: RoleRun, table: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{k} {v:,.1f}/s" for k, v in r.flow(table).items()) or "not read"


def _conditions(runs: Sequence[RoleRun]) -> str:
    """What the notes say of the runs: admitted rate, box gauge, who waited for a core."""
    o = runs[0].outcome
    short = [r for r in runs if not r.held()]
    flows = " | ".join(_flow_text(r, FLOW) for r in short)
    return (
        (f"OFFERED RATE NOT HELD in {len(short)} run(s) (admitted < {HELD:.0%} of offered; "
         f"ticks {flows}); " if short else "")
        + f"{len(runs)} run(s), window {o.window_s:.0f} s; {o.pinned}; admitted ticks/s "
        + " / ".join(f"{r.ticks_per_s:,.0f}" for r in runs)
        + "; box gauge (ms, lower is faster) " + " / ".join(f"{r.outcome.box_ms:.0f}" for r in runs)
        + "; longest run-queue wait (s/s, /proc) " + " / ".join(most_waiting(r.waits) for r in runs)
    )  # fmt: skip


def _order(runs: Sequence[RoleRun]) -> list[str]:
    """Every process name seen, in tick order (handlers, sequencer, venue, writers, host)."""
    names = {n for r in runs for n in r.outcome.cpu_by_process}
    rank = {role: k for k, role in enumerate(ROLE_ORDER)}

    def key(n: str) -> tuple[int, str]:
        return rank.get(runs[0].role(n), len(ROLE_ORDER)), n

    return sorted(names, key=key)


def ingest_rows(rate: int, node: list[RoleRun], host: list[RoleRun], writers: int) -> list[Row]:
    """Part one at one rate: per host process, handlers + sequencer, the node whole."""
    tag_host = f"host ({writers} writers), {rate:,} ticks/s offered, 0 terminals"
    tag_node = f"1 process, {rate:,} ticks/s offered, 0 terminals"
    ingest = [r.us(r.ingest()) for r in host]
    whole = [r.us(r.ingest()) for r in node]
    ingest_cores = [r.ingest() for r in host]
    ratio = median_min_max(ingest)[0] / median_min_max(whole)[0] if all(whole) else None
    goals = "; ".join(
        [
            goal(median_min_max(ingest)[0], GOAL_US_PER_TICK, "host handlers + sequencer µs/tick"),
            goal(ratio or float("inf"), GOAL_RATIO, "host / node per tick"),
        ]
        + (
            [
                _goal(
                    median_min_max(ingest_cores)[0],
                    GOAL_INGEST_CORES,
                    "ingest cores at 190k",
                    all(r.held() for r in host),
                )
            ]
            if rate >= GOAL_INGEST_CORES_AT
            else []
        )
    )
    host_note = f"{goals}; {_conditions(host)}"
    rows = []
    for name in _order(host):
        role = host[0].role(name)
        label = "venue simulator" if role == "venue" else name
        cores = " / ".join(f"{r.cpu(name):.2f}" for r in host)
        rows.append(
            _runs_row(
                f"ingest roles: {label}", tag_host, [r.us(r.cpu(name)) for r in host], "µs/tick",
                f"role {role}, process {name}: utime+stime over the window / admitted ticks; "
                f"cores {cores}; {host_note}",
            )
        )  # fmt: skip
    pair = " / ".join(f"{h / n:.2f}" for h, n in zip(ingest, whole, strict=True) if n)
    with_venue = [r.us(r.ingest() + r.cores(lambda role: role == "venue")) for r in host]
    rows.append(
        _runs_row(
            "ingest roles: handlers + sequencer", tag_host, ingest, "µs/tick",
            "every host process but the venue simulator, the writers and the supervisor; ratio: "
            f"to the whole node's µs/tick (medians; per run pair {pair}); with the venue "
            + " / ".join(f"{v:.2f}" for v in with_venue) + " µs/tick; " + host_note,
            ratio=ratio, peer=tag_node,
        )
    )  # fmt: skip
    rows.append(
        _runs_row(
            "ingest roles: handlers + sequencer", tag_host, ingest_cores, "cores",
            "the same processes' CPU seconds per second; " + host_note,
        )
    )  # fmt: skip
    rows.append(
        _runs_row(
            "ingest roles: whole node (simulator included)", tag_node, whole, "µs/tick",
            "monotape run --writers 0, one process: its utime+stime / admitted ticks; its "
            "simulator runs on the same event loop, so it is not separable; cores "
            + " / ".join(f"{r.cpu('node'):.2f}" for r in node) + f"; {goals}; " + _conditions(node),
            ratio=1.0, peer=tag_node,
        )
    )  # fmt: skip
    return rows


def loaded_rows(runs: list[RoleRun], writers: int, terminals: int) -> list[Row]:
    """Part two: the host with terminals at 190k: its own roles' cores, measured and at the
    full nominal load from this run's unit costs, frame interval, every terminal's rate."""
    rate = runs[0].offered
    hz = 1000 / _frame_ms()
    tag = f"host ({writers} writers), {rate:,} ticks/s, {terminals:,} terminals x {hz:.0f} Hz"
    writer_cores = [r.cores(lambda role: role == "writer") for r in runs]
    own = [r.ingest() + w for r, w in zip(runs, writer_cores, strict=True)]
    per_tick = [r.us(r.ingest()) for r in runs]
    per_frame = [
        w * 1e6 / r.outcome.frames_per_s if r.outcome.frames_per_s else 0.0
        for r, w in zip(runs, writer_cores, strict=True)
    ]
    nominal = [
        (t * rate + f * terminals * hz) / 1e6 for t, f in zip(per_tick, per_frame, strict=True)
    ]
    kept = [r.outcome.below_floor == 0 and r.outcome.slowest_terminal_s >= FLOOR for r in runs]
    held = all(kept) and all(r.held() for r in runs)
    waits = "; ".join(
        ", ".join(f"{n} {w:.2f}" for n, w in sorted(r.waits.items(), key=lambda kv: -kv[1])[:4])
        for r in runs
    )
    common = (
        f"load client {runs[0].outcome.client_processes} process(es), CPU "
        + " / ".join(f"{r.outcome.client_cpu:.2f}" for r in runs)
        + "; venue simulator cores " + _each(r.cores(lambda x: x == "venue") for r in runs)
        + "; supervisor cores " + _each(r.cores(lambda x: x == "host") for r in runs)
        + "; connected at the window's end " + _each((r.outcome.connections for r in runs), ",.0f")
        + f"; every terminal >= {FLOOR:g} frames/s: "
        + " / ".join("yes" if k else "NO" for k in kept)
        + "; waited most for a core (s/s, /proc, all threads) " + waits
        + "; loop's own wait (monotape_cpu_wait_seconds_total) "
        + " / ".join(most_waiting(r.outcome.wait_by_process) for r in runs)
        + "; " + _conditions(runs)
    )  # fmt: skip
    roles = " | ".join(
        ", ".join(f"{n} {r.cpu(n):.2f}" for n in _order([r]) if r.role(n) not in ("venue", "host"))
        for r in runs
    )
    rows = [
        _runs_row(
            "ingest roles, loaded: host's own roles",
            tag,
            own,
            "cores",
            "handlers + sequencer + writers, measured (this 2-core box also runs the venue "
            f"simulator and the load client); per process {roles}; "
            + _goal(median_min_max(own)[0], GOAL_HOST_CORES, "cores", held)
            + "; "
            + common,
        ),
        _runs_row(
            "ingest roles, loaded: host's own roles at full load",
            tag,
            nominal,
            "cores",
            f"this run's ingest µs/tick x {rate:,} ticks/s + writer µs/frame x {terminals:,} x "
            f"{hz:.0f} frames/s: what a desk's host (no simulator, no load client beside it) "
            "needs when every terminal gets every frame; "
            + (
                ""
                if held
                else "UNIT COSTS FROM RUNS THAT DID NOT HOLD (rate or frames): the work spent "
                "on ticks dropped and frames not delivered is in them, so they overstate a "
                "steady host's; "
            )
            + goal(median_min_max(nominal)[0], GOAL_HOST_CORES, "cores")
            + "; "
            + common,
        ),
        _runs_row(
            "ingest roles, loaded: handlers + sequencer",
            tag,
            per_tick,
            "µs/tick",
            "their CPU over the window / admitted ticks, with terminals; " + common,
        ),
        _runs_row(
            "ingest roles, loaded: writers per delivered frame",
            tag,
            per_frame,
            "µs/frame",
            "all writers' CPU / FRAME messages the load clients counted; " + common,
        ),
    ]
    frames = [r.frames for r in runs if r.frames is not None and r.frames.frames > 1]
    if frames:
        rows.append(
            _runs_row(
                "ingest roles, loaded: sequencer frame interval p99", tag,
                [f.interval_p99_ms for f in frames], "ms",
                "between consecutive new frame numbers reaching one probe terminal of the "
                f"bench's own (as many symbols as a terminal may hold, so every frame has one; "
                f"the grid is {_frame_ms():g} ms): the sequencer's "
                "interval plus writer and loopback jitter; max "
                + " / ".join(f"{f.interval_max_ms:.0f}" for f in frames) + " ms; slot gap p99 "
                + " / ".join(str(f.slot_gap_p99) for f in frames) + " (1: no boundary passed "
                "over); where the frames went (per s, sequencer then writers) "
                + " | ".join(_flow_text(r, FRAME_FLOW) for r in runs) + "; " + common,
            )
        )  # fmt: skip
    else:
        why = " / ".join(r.frames.error if r.frames else "no probe" for r in runs)
        rows.append(
            Row("ingest roles, loaded: sequencer frame interval p99", tag, None, "ms",
                note=f"not measured: the probe terminal saw no frames ({why}); {common}")
        )  # fmt: skip
    slowest = [max(0.0, r.outcome.slowest_terminal_s) for r in runs]
    rows.append(
        _runs_row(
            "ingest roles, loaded: slowest terminal's frames", tag, slowest, "/s",
            "distinct frame numbers shown to the slowest terminal open through the window, per "
            "second (the load clients' own count; a frame carries only symbols that changed, so "
            "at low rates a 40-symbol watchlist misses some); terminals below "
            f"{FLOOR:g}/s " + " / ".join(str(r.outcome.below_floor) for r in runs)
            + "; mean per terminal "
            + " / ".join(f"{r.outcome.frames_per_terminal_s:.1f}" for r in runs) + "; " + common,
        )
    )  # fmt: skip
    return rows


# -- the runs ----------------------------------------------------------------------------------
def ingest_part(plan: Plan, writers: int, log: Callable[[str], None]) -> list[Row]:
    rows: list[Row] = []
    for rate in plan.rates:
        size = Size(rate, 0, plan.warmup_s, plan.window_s, processes=1, repeats=plan.repeats)
        node: list[RoleRun] = []
        host: list[RoleRun] = []
        for k in range(plan.repeats):  # alternated, the order flipped each time: drift hits both
            log(f"  {rate:,} ticks/s, no terminal: run {k + 1} of {plan.repeats} ({_load()})")
            pair = [(node, 0), (host, writers)]
            for runs, w in pair if k % 2 == 0 else pair[::-1]:
                runs.append(_one(size, w, log))
                _log_run(runs[-1], log)
        rows += ingest_rows(rate, node, host, writers)
    return rows


def loaded_part(plan: Plan, writers: int, log: Callable[[str], None]) -> list[Row]:
    size = plan.loaded
    runs = []
    for k in range(size.repeats):
        log(f"  {size.rate:,} ticks/s, {size.terminals:,} terminals: run {k + 1} ({_load()})")
        runs.append(_one(size, writers, log, FrameProbe()))
        _log_run(runs[-1], log)
    return loaded_rows(runs, writers, size.terminals)


def _log_run(r: RoleRun, log: Callable[[str], None]) -> None:
    per = ", ".join(f"{n} {r.us(r.cpu(n)):.2f}" for n in _order([r]))
    log(f"    {r.outcome.variant}: µs/tick {per}; handlers + sequencer {r.us(r.ingest()):.2f}")


def _load() -> str:
    return "load " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def run(quick: bool = False, plan: Plan | None = None, writers: int = 0) -> list[Row]:
    """Both parts (``plan.loaded.terminals`` 0: part one only); ``writers`` 0: the default's
    count (one per core, as ``monotape run``)."""
    raise_nofile()  # the servers inherit it: 4,200 sockets
    plan = plan or (QUICK if quick else FULL)
    writers = writers or default_writers()

    def log(message: str) -> None:
        print(message, file=sys.stderr)

    rows = ingest_part(plan, writers, log)
    if plan.loaded.terminals:
        rows += loaded_part(plan, writers, log)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 s windows, one run, 300 terminals")
    parser.add_argument("--rates", default="", metavar="R[,R...]", help="default 120000,190000")
    parser.add_argument("--writers", type=int, default=0, help="the host's writers (default: "
                        "one per core, as monotape run)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=0, help="runs per variant (full: 3)")
    parser.add_argument("--terminals", type=int, default=-1,
                        help="part two's population (0: skip part two)")  # fmt: skip
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    try:
        rates = tuple(int(r) for r in args.rates.split(",") if r.strip())
    except ValueError:
        parser.error("--rates takes numbers like 120000,190000")
    if any(r <= 0 for r in rates) or args.repeats < 0 or not 0 <= args.writers <= 16:
        parser.error("--rates must be positive, --repeats >= 0, --writers 0-16")
    plan = dataclasses.replace(
        plan,
        rates=rates or plan.rates,
        repeats=args.repeats or plan.repeats,
        loaded=dataclasses.replace(
            plan.loaded,
            terminals=plan.loaded.terminals if args.terminals < 0 else args.terminals,
            repeats=args.repeats or plan.loaded.repeats,
        ),
    )
    print_rows(run(args.quick, plan, args.writers))


if __name__ == "__main__":
    main()
