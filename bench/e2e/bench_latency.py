"""The latency record under load: per-stage percentiles from a real ``monotape run``.

The bench starts ``monotape run`` with ``bench.e2e.pinned.start_pinned`` (the launcher:
loopback, fresh data directory, pinned to CPU 0 from its first instruction) at ``--rate
120000`` (full) or ``--rate 20000`` (quick), and holds a steady population of terminals with
the byte-counting raw-socket client of ``bench/wsclient.py`` in separate processes pinned to
CPU 1 (the ``websockets`` client costs ~15-25 µs per message: at 4,200 x 25 Hz it would be the
bottleneck; this one reports its own CPU). Every watchlist is exactly 40 symbols, drawn Zipf
(``watchlists.zipf_watchlists`` over the default simulator's universe); one terminal in
``PRIORITY_EVERY`` also puts one of its symbols in an order ticket (``SetPriority``).

Before each run the bench takes ``bench.common.box_gauge_ms`` (CPU ms of one fixed loop) and
the host rows' notes list it per run: this VM has done the same work ~1.8x slower within the
hour, and runs whose gauges differ that much ran on another box in effect.

The trace: a linear ramp (full 4,200 over 10 s = 420/s, under the admission bucket's
1,200/s), then no connects and no disconnects; a refused upgrade (503: the node sheds upgrades
while its loop runs late) retries after 1 s. ``SETTLE_S`` after the ramp (the node refreezes
the heap once connections settle: ``gc_policy``), the measurement window starts: full 30 s,
quick 12 s (at least two 10 s rotations). At its end, with the terminals still connected, the
bench reads (admin token):

- ``GET /admin/latency?stage=S&window=1m`` for decode, sequence, conflate, encode, write, glass,
  hydrate, priority: one row per stage, value = p99 (ms), note with p50 / p99.9 / max / count.
  The minute covers the ramp as well as the window, and the last (unrotated, < 10 s) interval
  is not in it. ``glass`` is RTT/2 of timed pings: an upper bound, not a one-way figure.
  ``priority`` is admitted -> handed to the kernel, per (tick, order-ticket terminal).
- ``end to end (server side)``: the sum of the five pipeline stages' p99s (decode .. write), an
  explicit UPPER BOUND: p99s do not add (the slow ticks of one stage are not those of another).
- ``GET /admin/gc`` at the window's start and end: gen-2 collections per minute, the longest
  gen-2 pause that started inside the window, and GC-tracked allocations per second (gen-0
  collections x threshold[0]: net of frees, a lower bound).
- ``/metrics`` scraped every second by the bench (nobody else resets
  ``monotape_event_loop_lag_max_seconds``, a max since the last scrape): the worst loop lag
  inside the window and ``process_resident_memory_bytes`` at its end.
- The clients' own counts over the window: frames per terminal per second as distinct frame
  numbers (FRAME or SNAPSHOT) shown to each terminal open at both ends of the window (25 when
  every boundary reaches every terminal; a message count would read more for a terminal
  catching up after a stall; each client process's own interval between its two samples,
  not the bench's window), with the FRAME messages read, the boundaries a terminal's
  numbers passed without showing it and the server's own skipped-boundary rate
  (``monotape_frame_boundaries_skipped_total``) in the note; PRIORITY messages per second,
  ERROR messages; the server's and the clients' CPU seconds per second (psutil); and how long
  each server process's event loop waited for a core over the window (the delta of its
  ``monotape_cpu_wait_seconds_total``, s per s), logged per process, the longest-waiting one
  per run in every row's note: a run on a box short of cores says so.

The peer, in the same run on a fresh server with the same ``--rate``: 10x fewer terminals
(420 full / 20 quick) with the same ramp length and window. Each variant runs ``repeats``
times (full: 3), alternated with its peer; a row is the median of the runs with their min-max,
the per-run values in the note. Loaded rows carry ratio = loaded median / light median; the
light rows carry ratio 1. One more run per rate with no terminal at all gives the server's CPU
for ingest alone (the simulated venues, both handlers per venue, sequencer, conflation,
recording): what the core has left for fan-out.

Full mode measures both at ``--rate 120000`` (the issue's load) and again at ``--rate 20000``
(``monotape run``'s default): on one core, 120k ticks/s of simulated venues and ingest leave
too little for 4,200 x 25 Hz, and the second set shows what the fan-out itself holds.

Not measured: the one-way client latency (only RTT/2 via ``glass``); anything past loopback.

``--writers N`` (issue 12) measures the multi-process host (``monotape run --writers N``: venue,
two handlers per venue, sequencer, N writers) beside the one-process node instead of the
420-terminal peer: the same terminals, the same client processes, the same rates, alternated
(node, host, node, host, ...) on fresh servers. The node stays pinned to ``SERVER_CPU``; the
host is not pinned (its roles spread over both cores, so it shares ``LOAD_CPU`` with the load
client: on this 2-core box the client and the host cannot have a core each, and the rows say
so). For the host the bench reads, besides the node's figures:

- CPU per process and per role: psutil user+system seconds of every process in the host's tree
  (pid -> name from ``/admin/processes``) over the window / window;
- the longest gen-2 pause per process: the window's delta of ``monotape_gc_pause_seconds``
  buckets (``process`` label) from the merged ``/metrics``, as the upper bound of the highest
  bucket that gained a pause (the host serves no ``/admin/gc``); the node's row keeps the exact
  ``/admin/gc`` figure;
- the capacity model's unit costs: ingest CPU (handlers + sequencer) per 1,000 ticks, writer
  CPU per 1,000 delivered frames (the clients' FRAME count), and one run per rate with no
  terminal (ingest alone, per role);
- the terminals' split over writers (``/admin/processes``).

``frame spread`` is read server-side as the ``write`` stage's p99.9: ``write`` is one value per
(frame, terminal) from the frame's publish to its hand-off to the kernel, so its tail is the
last write of a frame (the load client reads every 0.2 s, too coarse for a client-side spread).

``--writers N --ingest-only``: no terminal, no fan-out; per rate, the one-process node and the
host alternated (3 runs, 10 s windows): CPU per role and ingest per 1,000 admitted ticks, the
host's figure with the node's as its peer (the node's includes its simulator).

    .venv/bin/python -m bench.e2e.bench_latency [--quick] [--writers N] [--ingest-only]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from bench.common import (
    Row,
    box_gauge_ms,
    cpu_waits,
    median_min_max,
    most_waiting,
    per_second,
    print_rows,
    raise_nofile,
    row,
    waits_text,
)
from bench.e2e.pinned import LOAD_CPU, SERVER_CPU, can_pin, start_pinned
from bench.wsclient import KINDS, client_frame
from monotape.histograms import ALL_STAGES, STAGES
from monotape.loadgen.launch import RunningNode, Samples, sum_samples
from monotape.loadgen.watchlists import zipf_watchlists
from monotape.metric_names import (
    CONNECTIONS,
    EVENT_LOOP_LAG_MAX,
    FRAME_BOUNDARIES_SKIPPED,
    GC_PAUSE,
    TICKS_ADMITTED,
)
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.wire.codec import Kind
from monotape.platform.wire.requests import SetPriority, Subscribe, encode_request

__all__ = ["Outcome", "Size", "Watch", "measure", "role_of", "run", "terminal_requests"]

ROOT = Path(__file__).resolve().parents[2]

WATCHLIST = 40
RSS = "process_resident_memory_bytes"


@dataclass(frozen=True)
class Size:
    rate: int
    terminals: int
    ramp_s: int
    window_s: int
    processes: int  # load-client processes, all on LOAD_CPU
    repeats: int = 1  # runs per variant (the table gives their median and min-max)
    # Also measured at this rate (0: not): the 120k ticks/s on the one core leaves
    # little for fan-out, so the same populations at monotape run's default rate show what
    # the fan-out itself holds.
    fanout_rate: int = 0


FULL = Size(
    rate=120_000,
    terminals=4_200,
    ramp_s=10,
    window_s=30,
    processes=2,
    repeats=3,
    fanout_rate=20_000,
)
QUICK = Size(rate=20_000, terminals=200, ramp_s=3, window_s=12, processes=1, repeats=1)
# --writers N --quick: 300 terminals, a 10 s window, once each (the smoke of the comparison).
QUICK_HOST = Size(rate=20_000, terminals=300, ramp_s=3, window_s=10, processes=1, repeats=1)
# CPython's default gen-0 threshold: the host's roles leave it alone (the node reports its own).
GC_THRESHOLD0 = 700
NO_LAG_SHEDDING = {"MONOTAPE_SERVER__ADMISSION_MAX_LAG_MS": "0"}  # --no-lag-shedding
SCRAPE_TIMEOUT_S = 30.0  # an overloaded server answers its admin API seconds late
INGEST_ROLES = ("handler", "sequencer")  # the capacity model's ingest: the venue is simulated
PRIORITY_EVERY = 50  # one terminal in 50 has an order ticket open on one of its symbols
SLACK_S = 6  # after the window: room for the reads, terminals still connected
SETTLE_S = 4.0  # after the ramp: the node refreezes once connections settle (1-2 s polls)
START_S = 2.0  # the client processes start and import before the first connect
SEED = 1


def terminal_requests(terminals: int, seed: int = SEED) -> list[bytes]:
    """Each terminal's requests as client frames: a 40-symbol Zipf watchlist (the default
    simulator's universe, as ``monotape run`` builds it) and, for one in ``PRIORITY_EVERY``,
    an order ticket on one of its symbols."""
    keys = [inst.key for inst in build_universe()]
    lists = zipf_watchlists(keys, terminals, seed, size_range=(WATCHLIST, WATCHLIST))
    rng = random.Random(seed)
    out = []
    for i, wl in enumerate(lists):
        frames = client_frame(0x2, encode_request(Subscribe(req=1, keys=wl)))
        if i % PRIORITY_EVERY == 0:
            ticket = SetPriority(req=2, keys=[rng.choice(wl)])
            frames += client_frame(0x2, encode_request(ticket))
        out.append(frames)
    return out


class _Metrics(threading.Thread):
    """Scrapes /metrics every second: (monotonic time, loop-lag max since last scrape, RSS,
    connections). The only scraper, so the lag max is not reset by anyone else."""

    def __init__(self, server: RunningNode) -> None:
        super().__init__(name="bench-latency-metrics", daemon=True)
        self.server = server
        self.stop = threading.Event()
        self.samples: list[tuple[float, float, float, float]] = []

    def sample(self) -> tuple[float, float, float, float] | None:
        try:
            samples = self.server.metrics(timeout=3)
        except OSError:
            return None
        # The max over the node's processes (a max since the last scrape: not summed).
        lag = max((v for (n, _), v in samples.items() if n == EVENT_LOOP_LAG_MAX), default=0.0)
        rss = sum_samples(samples, RSS)
        conns = sum_samples(samples, CONNECTIONS)
        out = (time.monotonic(), lag, rss, conns)
        self.samples.append(out)
        return out

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()


class _Clients:
    """The load-client processes (``python -m bench.wsclient``), pinned to LOAD_CPU."""

    def __init__(self, port: int, path: str, requests: list[bytes], at: float, size: Size):
        self.procs: list[subprocess.Popen[str]] = []
        pin = can_pin(SERVER_CPU, LOAD_CPU)
        until = at + size.ramp_s + SETTLE_S + size.window_s + SLACK_S
        for k in range(size.processes):
            mine = range(k, len(requests), size.processes)
            job = {
                "port": port,
                "path": path,
                "until": until,
                "terminals": [
                    {"at": at + size.ramp_s * i / len(requests), "requests": requests[i].hex()}
                    for i in mine
                ],
            }
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.wsclient"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                preexec_fn=(lambda: os.sched_setaffinity(0, {LOAD_CPU})) if pin else None,
            )
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
            self.procs.append(proc)

    def sample(self) -> dict[str, Any]:
        """Every process's counts, summed (the kinds element-wise); failures joined."""
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write("sample\n")
            p.stdin.flush()
        total: dict[str, Any] = {"kinds": [0] * KINDS, "failures": [], "window": {}}
        slowest: list[float] = []  # each process's slowest held terminal (boundaries/s)
        below = 0
        for p in self.procs:
            assert p.stdout is not None
            snap = json.loads(p.stdout.readline())
            for key in ("cpu_s", "bytes", "msgs", "open", "closed", "live"):
                total[key] = total.get(key, 0) + snap[key]
            total["kinds"] = [a + b for a, b in zip(total["kinds"], snap["kinds"], strict=True)]
            for key, n in snap["window"].items():  # frame numbers since the previous sample
                total["window"][key] = total["window"].get(key, 0) + n
            total["failures"] += snap["failures"]
            rates = snap.get("rates", {})
            if rates.get("slowest", -1.0) >= 0:
                slowest.append(float(rates["slowest"]))
            below += int(rates.get("below", 0))
        total["slowest"] = min(slowest, default=-1.0)  # -1: no terminal held
        total["below_floor"] = below  # terminals shown < wsclient.FLOOR boundaries/s
        total["t"] = time.monotonic()
        return total

    def close(self) -> None:
        for p in self.procs:
            with contextlib.suppress(OSError):
                assert p.stdin is not None
                p.stdin.write("close\n")
                p.stdin.close()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


@dataclass
class Outcome:
    variant: str
    terminals: int
    stages: dict[str, dict[str, Any]]
    gen2_per_min: float
    gen2_max_ms: float
    gen2_collections: int
    gen0_per_s: float
    allocs_per_s: float  # GC-tracked objects, net: gen-0 collections x threshold[0]
    lag_max_ms: float
    rss_mb: float
    connections: float
    window_s: float
    frames_per_terminal_s: float  # distinct frame numbers a terminal was shown per second
    priority_per_s: float  # PRIORITY messages, all terminals
    errors_received: int  # ERROR messages (a refused request)
    server_cpu: float  # CPU seconds per second over the window (1.0 = one core)
    client_cpu: float
    client_processes: int
    pinned: str
    errors: list[str] = field(default_factory=list)
    writers: int = 0  # 0: the one-process node
    rate: int = 0  # simulated ticks/s
    frames_per_s: float = 0.0  # FRAME messages the clients counted, all terminals
    messages_per_terminal_s: float = 0.0  # FRAME messages a terminal read per second
    missed_per_terminal_s: float = 0.0  # boundaries its frame numbers passed without showing it
    repeats: int = 0  # FRAMEs not above the last number shown (must be 0)
    skipped_per_s: float = 0.0  # boundaries the server's frame loop passed over (its counter)
    ticks_per_s: float = 0.0  # monotape_ticks_admitted_total over the window (0: not read)
    cpu_by_process: dict[str, float] = field(default_factory=dict)  # cores, psutil
    gen2_by_process: dict[str, tuple[int, float]] = field(default_factory=dict)  # (n, ms bound)
    split: dict[str, int] = field(default_factory=dict)  # terminals per writer
    box_ms: float = 0.0  # bench.common.box_gauge_ms before the server started (lower: faster)
    # s/s each process's event loop waited for a core (monotape_cpu_wait_seconds_total)
    wait_by_process: dict[str, float] = field(default_factory=dict)
    slowest_terminal_s: float = -1.0  # the slowest terminal's distinct frames/s (-1: none held)
    below_floor: int = 0  # terminals shown fewer than wsclient.FLOOR frames/s in the window
    # /metrics at the window's two ends, as read (empty when a scrape failed): for figures a
    # bench wants beyond these
    window_samples: tuple[Samples, Samples] = ({}, {})

    def cpu_by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, cores in self.cpu_by_process.items():
            out[role_of(name)] = out.get(role_of(name), 0.0) + cores
        return out

    def ingest_ms_per_1k_ticks(self) -> float:
        """Handlers + sequencer CPU ms per 1,000 admitted ticks (the host only): the ticks the
        sequencer admitted in the window, not ``--rate`` (a starved venue sends fewer)."""
        roles = self.cpu_by_role()
        cores = sum(roles.get(r, 0.0) for r in INGEST_ROLES)
        ticks = self.ticks_per_s or self.rate
        return cores * 1000 / (ticks / 1000) if ticks else 0.0

    def writer_ms_per_1k_frames(self) -> float:
        """Writer CPU ms per 1,000 delivered frames (all writers; the host only)."""
        cores = self.cpu_by_role().get("writer", 0.0)
        return cores * 1000 / (self.frames_per_s / 1000) if self.frames_per_s else 0.0


def _gc(server: RunningNode, token: str) -> dict[str, Any]:
    return dict(json.loads(server.get("/admin/gc?recent=10000", token, SCRAPE_TIMEOUT_S))["gc"])


def _scrape(server: RunningNode, log: Callable[[str], None]) -> Any:
    """/metrics, retried: an overloaded node answers late (its loop runs seconds behind at
    120k ticks/s on a busy box); empty (and said) if it never does."""
    for attempt in range(3):
        try:
            return server.metrics(timeout=SCRAPE_TIMEOUT_S)
        except OSError as exc:
            log(f"  /metrics attempt {attempt + 1} failed: {exc!r}")
    return {}


def _cpu(pid: int) -> float:
    c = psutil.Process(pid).cpu_times()
    return float(c.user + c.system)


def role_of(name: str) -> str:
    """``writer-1`` -> ``writer``, ``handler-ARCX-A`` -> ``handler``; ``node``, ``host`` as is."""
    return name.split("-", 1)[0]


def _names(server: RunningNode, token: str, writers: int) -> dict[int, str]:
    """pid -> process name: the host's table (``/admin/processes``), or the node itself."""
    if not writers:
        return {server.proc.pid: "node"}
    body = json.loads(server.get("/admin/processes", token))
    out = {server.proc.pid: "host"}
    out.update({int(p["pid"]): str(p["name"]) for p in body["processes"] if p.get("pid")})
    standby = (body.get("host") or {}).get("standby")
    if standby:  # the warm sequencer standby: imported, idle until a takeover
        out[int(standby)] = "standby-sequencer"
    return out


def _tree_cpu(server: RunningNode, names: dict[int, str]) -> dict[str, tuple[int, float]]:
    """name -> (pid, user+system CPU seconds) for every process of the server's tree (psutil);
    a process not in ``names`` is keyed by its pid."""
    root = psutil.Process(server.proc.pid)
    out: dict[str, tuple[int, float]] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            c = proc.cpu_times()
        except psutil.Error:  # it left between the listing and the read
            continue
        out[names.get(proc.pid, f"pid-{proc.pid}")] = (proc.pid, float(c.user + c.system))
    return out


GcHist = dict[tuple[str, str], dict[float, float]]  # (process, generation) -> le -> count


def _gc_hist(samples: Any) -> GcHist:
    """The ``monotape_gc_pause_seconds`` buckets of a /metrics scrape, by (process, generation);
    the node has no ``process`` label (``node``)."""
    out: GcHist = {}
    for (name, labels), value in samples.items():
        if name != GC_PAUSE + "_bucket":
            continue
        lab = dict(labels)
        key = (lab.get("process", "node"), lab.get("generation", ""))
        out.setdefault(key, {})[float(lab["le"])] = value
    return out


def gc_window(before: GcHist, after: GcHist, generation: str) -> dict[str, tuple[int, float]]:
    """process -> (collections of ``generation`` in the window, the upper bound in ms of the
    highest bucket that gained one: the longest pause, to the bucket; 0 with none)."""
    out: dict[str, tuple[int, float]] = {}
    for (proc, gen), buckets in after.items():
        if gen != generation:
            continue
        prior = before.get((proc, gen), {})
        deltas = sorted((le, n - prior.get(le, 0.0)) for le, n in buckets.items())
        total = deltas[-1][1] if deltas else 0.0
        longest = next((le for le, n in deltas if total and n >= total), 0.0)
        out[proc] = (int(total), longest * 1000)
    return out


def _split(server: RunningNode, token: str, writers: int) -> dict[str, int]:
    if not writers:
        return {}
    body = json.loads(server.get("/admin/processes", token))
    return {str(k): int(v) for k, v in body.get("terminals", {}).items()}


class Watch(Protocol):
    """What another bench reads beside ``measure``'s own figures, in the same run: ``start``
    once the server listens and the load clients are on their way, ``mark`` at each end of the
    window (just before its first read, just after its last), ``stop`` before the server
    stops (always, a failed run too)."""

    def start(self, server: RunningNode, writers: int) -> None: ...

    def mark(self) -> None: ...

    def stop(self) -> None: ...


def measure(
    size: Size,
    terminals: int,
    variant: str,
    log: Any,
    writers: int = 0,
    watch: Watch | None = None,
) -> Outcome:
    """One run on a fresh server: the one-process node (``writers`` 0, pinned to SERVER_CPU)
    or the host with ``writers`` writer processes (not pinned); ``watch`` sees the same run."""
    pin = can_pin(SERVER_CPU, LOAD_CPU)
    box_ms = box_gauge_ms()  # how fast the box runs now: runs are compared only at one speed
    requests = terminal_requests(terminals)
    errors: list[str] = []
    server = start_pinned(
        size.rate,
        {},
        cpu=SERVER_CPU if pin and not writers else None,
        sub="bench-latency",
        writers=writers,  # 0: --writers 0, the node even where the default is a host
    )
    scraper = _Metrics(server)
    clients: _Clients | None = None
    try:
        admin = server.admin_token
        scraper.start()
        first = time.monotonic() + START_S
        clients = _Clients(server.ws_port, f"/?token={server.token}", requests, first, size)
        if watch is not None:
            watch.start(server, writers)
        time.sleep(max(0.0, first + size.ramp_s + SETTLE_S - time.monotonic()))
        names = _names(server, admin, writers)
        w0_wall_ms = int(time.time() * 1000)
        gc0 = _gc(server, admin) if not writers else None
        if watch is not None:
            watch.mark()
        m0, tree0 = _scrape(server, log), _tree_cpu(server, names)
        c0 = clients.sample()
        w0 = c0["t"]
        time.sleep(size.window_s)
        w1_wall_ms = int(time.time() * 1000)
        gc1 = _gc(server, admin) if not writers else None
        m1, tree1 = _scrape(server, log), _tree_cpu(server, names)
        c1 = clients.sample()
        w1 = c1["t"]
        if watch is not None:
            watch.mark()
        split = _split(server, admin, writers)
        stages = {
            st: dict(
                json.loads(
                    server.get(f"/admin/latency?stage={st}&window=1m", admin, SCRAPE_TIMEOUT_S)
                )
            )
            for st in ALL_STAGES
        }
        last = scraper.sample()
    finally:
        scraper.stop.set()
        if watch is not None:
            watch.stop()
        if clients is not None:
            clients.close()
        rc = server.stop()
        if rc != 0:
            log(f"  {variant}: monotape run exited {rc}; last lines:")
            for line in list(server.tail)[-5:]:
                log("    " + line.rstrip())
    window = w1 - w0
    minutes = window / 60
    cpu_by_process = per_second(tree0, tree1, window)
    h0, h1 = _gc_hist(m0), _gc_hist(m1)
    admitted = sum_samples(m1, TICKS_ADMITTED) - sum_samples(m0, TICKS_ADMITTED)
    gen2_by_process = gc_window(h0, h1, "2")
    if gc0 is not None and gc1 is not None:  # the node: exact pauses from /admin/gc
        g0, g1 = gc0["generations"], gc1["generations"]
        n2 = int(g1["2"]["collections"] - g0["2"]["collections"])
        gen0 = int(g1["0"]["collections"] - g0["0"]["collections"])
        threshold0 = int(gc1["threshold"][0])
        in_window = [
            p["duration_ns"] / 1e6
            for p in gc1["recent"]
            if p["generation"] == 2 and w0_wall_ms <= p["start_ms"] < w1_wall_ms
        ]
    else:  # the host: the merged histogram, to the bucket
        n2 = sum(n for n, _ in gen2_by_process.values())
        gen0 = sum(n for n, _ in gc_window(h0, h1, "0").values())
        threshold0 = GC_THRESHOLD0
        in_window = [ms for _, ms in gen2_by_process.values()]
    lags = [s[1] for s in scraper.samples if w0 <= s[0] <= w1 + 0.5]
    live = max(1, min(c0["live"], c1["live"]))
    kinds = [b - a for a, b in zip(c0["kinds"], c1["kinds"], strict=True)]
    # the terminals open at both samples, and the frame numbers they were shown in between
    shown = c1["window"]
    terminal_s = shown.get("terminal_s", 0.0) or 1.0  # each process over its own interval
    skipped = sum_samples(m1, FRAME_BOUNDARIES_SKIPPED) - sum_samples(m0, FRAME_BOUNDARIES_SKIPPED)
    errors += c1["failures"][:3]
    out = Outcome(
        variant=variant,
        terminals=terminals,
        stages=stages,
        gen2_per_min=n2 / minutes if minutes > 0 else 0.0,
        gen2_max_ms=max(in_window, default=0.0),
        gen2_collections=n2,
        gen0_per_s=gen0 / window,
        allocs_per_s=gen0 * threshold0 / window,
        lag_max_ms=max(lags, default=0.0) * 1000,
        rss_mb=(last[2] if last else 0.0) / 2**20,
        connections=last[3] if last else 0.0,
        window_s=window,
        frames_per_terminal_s=shown.get("boundaries", 0) / terminal_s,
        messages_per_terminal_s=kinds[Kind.FRAME] / live / window,
        missed_per_terminal_s=(shown.get("slots", 0) - shown.get("boundaries", 0)) / terminal_s,
        repeats=int(shown.get("repeats", 0)),
        skipped_per_s=skipped / window if m0 and m1 else 0.0,
        priority_per_s=kinds[Kind.PRIORITY] / window,
        errors_received=kinds[Kind.ERROR],
        server_cpu=sum(cpu_by_process.values()),
        client_cpu=(c1["cpu_s"] - c0["cpu_s"]) / window,
        client_processes=size.processes,
        pinned=(
            f"host not pinned (both cores), load clients on CPU {LOAD_CPU}"
            if pin and writers
            else f"server on CPU {SERVER_CPU}, load clients on CPU {LOAD_CPU}"
            if pin
            else "not pinned (CPUs 0 and 1 not both available)"
        ),
        errors=errors,
        writers=writers,
        rate=size.rate,
        frames_per_s=kinds[Kind.FRAME] / window,
        ticks_per_s=admitted / window if m0 and m1 else 0.0,
        cpu_by_process=cpu_by_process,
        gen2_by_process=gen2_by_process,
        split=split,
        box_ms=box_ms,
        wait_by_process=cpu_waits(m0, m1, window) if m0 and m1 else {},
        slowest_terminal_s=float(c1["slowest"]),
        below_floor=int(c1["below_floor"]),
        window_samples=(m0, m1),
    )
    log(
        f"  {variant}: {out.connections:.0f} connected at the window's end "
        f"{_split_text(out)}, "
        f"{out.frames_per_terminal_s:.1f} frames/s per terminal, "
        f"{out.priority_per_s:.0f} priority/s, server CPU {out.server_cpu:.2f}, "
        f"client CPU {out.client_cpu:.2f}, write p99 "
        f"{stages['write'].get('p99_us', 0) / 1000:.3f} ms, "
        f"gen2 {out.gen2_collections} ({out.gen2_max_ms:.2f} ms max), lag max "
        f"{out.lag_max_ms:.1f} ms, rss {out.rss_mb:.0f} MiB, allocs {out.allocs_per_s:,.0f}/s; "
        f"cores by role {_roles_text(out)}; admitted {out.ticks_per_s:,.0f} ticks/s; "
        f"box gauge {box_ms:.0f} ms; waiting for a core (s/s) {waits_text(out.wait_by_process)}"
    )
    return out


def _split_text(o: Outcome) -> str:
    if not o.split:
        return ""
    return "(" + " + ".join(f"{k} {v:,}" for k, v in sorted(o.split.items())) + ")"


def _roles_text(o: Outcome) -> str:
    return " ".join(f"{k} {v:.2f}" for k, v in sorted(o.cpu_by_role().items()))


# -- rows -------------------------------------------------------------------------------------
def _ms(body: dict[str, Any], key: str) -> float:
    return float(body.get(key, 0)) / 1000


def _stage(st: str) -> Callable[[Outcome], float]:
    return lambda o: _ms(o.stages[st], "p99_us")


def _stage_note(st: str) -> Callable[[Outcome], str]:
    def note(o: Outcome) -> str:
        b = o.stages[st]
        return (
            f"p50 {_ms(b, 'p50_us'):.3f} p99.9 {_ms(b, 'p999_us'):.3f} max {_ms(b, 'max_us'):.3f}"
            f" ms n {int(b.get('count', 0)):,}"
        )

    return note


def _e2e(o: Outcome) -> float:
    return sum(_ms(o.stages[st], "p99_us") for st in STAGES)


# (label, value of one run, unit, what the row is, per-run detail or None)
Metric = tuple[str, Callable[[Outcome], float], str, str, Callable[[Outcome], str] | None]


def _metrics() -> list[Metric]:
    out: list[Metric] = []
    for st in ALL_STAGES:
        label = "glass (RTT/2: an upper bound)" if st == "glass" else st
        what = (
            f"GET /admin/latency?stage={st}&window=1m at the window's end (the ramp and the "
            "window; the last <10 s interval not yet rotated)"
            + ("; RTT/2 of timed pings: an upper bound" if st == "glass" else "")
            + (
                "; admitted -> handed to the kernel, per order-ticket terminal"
                if st == "priority"
                else ""
            )
        )
        out.append((f"latency: {label} p99", _stage(st), "ms", what, _stage_note(st)))
    out += [
        (
            "latency: frame spread (write p99.9)",
            lambda o: _ms(o.stages["write"], "p999_us"),
            "ms",
            "the write stage's p99.9 from GET /admin/latency: one value per (frame, terminal), "
            "publish -> handed to the kernel, so its tail is a frame's last write (boundary -> "
            "publish adds the encode stage)",
            None,
        ),
        (
            "latency: end to end (server side) p99",
            _e2e,
            "ms",
            "UPPER BOUND: the sum of the p99s of " + " + ".join(STAGES) + "; p99s do not add "
            "exactly (one stage's slow ticks are not another's), so the true end-to-end p99 is "
            "at most this; glass, hydrate and priority not included",
            None,
        ),
        (
            "latency: frames per terminal",
            lambda o: o.frames_per_terminal_s,
            "/s",
            "distinct frame numbers (FRAME or SNAPSHOT) shown to each terminal open at both ends "
            "of the window / (terminals x the seconds between its client process's two samples): "
            "25 when every 40 ms boundary reaches every terminal; fewer when boundaries were "
            "conflated into later ones (never older)",
            lambda o: (
                f"{o.messages_per_terminal_s:.1f} FRAME msgs, {o.missed_per_terminal_s:.1f} "
                f"missed /terminal/s, loop skipped {o.skipped_per_s:.1f}/s"
                + (f", {o.repeats} REPEATED" if o.repeats else "")
            ),
        ),
        (
            "latency: priority updates delivered",
            lambda o: o.priority_per_s,
            "/s",
            f"PRIORITY messages over the window, all terminals (one terminal in {PRIORITY_EVERY} "
            "has one symbol of its watchlist in an order ticket)",
            None,
        ),
        (
            "latency: longest gen-2 GC pause",
            lambda o: o.gen2_max_ms,
            "ms",
            "GET /admin/gc: the longest gen-2 pause that started inside the window (0 when none "
            "ran); target: none > 5 ms in steady state",
            lambda o: f"{o.gen2_collections} gen-2",
        ),
        (
            "latency: gen-2 collections",
            lambda o: o.gen2_per_min,
            "/min",
            "GET /admin/gc collections delta over the window",
            None,
        ),
        (
            "latency: GC-tracked allocations (net)",
            lambda o: o.allocs_per_s,
            "/s",
            "gen-0 collections over the window x threshold[0]: container objects allocated minus "
            "freed between collections, a lower bound on the allocation rate (bytes, strings and "
            "ints are not counted)",
            lambda o: f"{o.gen0_per_s:,.0f} gen-0/s",
        ),
        (
            "latency: process RSS",
            lambda o: o.rss_mb,
            "MiB",
            f"/metrics {RSS} at the window's end (terminals still connected)",
            None,
        ),
        (
            "latency: event-loop lag max",
            lambda o: o.lag_max_ms,
            "ms",
            f"/metrics {EVENT_LOOP_LAG_MAX} (max since the last scrape) scraped every second by "
            "the bench alone; the worst scrape inside the window",
            None,
        ),
        (
            "latency: server CPU",
            lambda o: o.server_cpu,
            "cores",
            "psutil user+system seconds of monotape run over the window / window (1.00: the one "
            "core it is pinned to is saturated)",
            None,
        ),
        (
            "latency: load client CPU",
            lambda o: o.client_cpu,
            "cores",
            "bench/wsclient.py processes on one core, their own user+system seconds / window "
            "(above 0.90 the client may be the bottleneck: the note says so)",
            None,
        ),
    ]
    return out


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _rows(runs: list[Outcome], peers: list[Outcome] | None, size: Size) -> list[Row]:
    """One row per metric: the median of the runs, their min-max, the ratio of medians to the
    peer's (``peers`` None: this is the peer, ratio 1)."""
    o = runs[0]
    tag = f"{o.variant}, {o.terminals:,} x {WATCHLIST} sym, --rate {size.rate:,}"
    peer_name = f"{peers[0].variant}, {peers[0].terminals:,} terminals" if peers else ""
    held = [r.connections >= 0.95 * r.terminals for r in runs]
    client_bound = any(r.client_cpu > 0.9 for r in runs)
    errors = [e for r in runs for e in r.errors]
    common = (
        (
            ""
            if all(held)
            else f"POPULATION NOT HELD in {held.count(False)} of {len(runs)} run(s) (connected "
            "at the window's end: " + " / ".join(f"{r.connections:,.0f}" for r in runs)
            + f" of {o.terminals:,}): NOT the steady-state record at this size; "
        )
        + ("THE LOAD CLIENT WAS NEAR SATURATION (> 0.90 of its core); " if client_bound else "")
        + f"{len(runs)} run(s) on fresh servers, alternated with the peer; {o.pinned}; "
        f"window {o.window_s:.0f} s, {SETTLE_S:.0f} s after a {size.ramp_s} s ramp; connected "
        "at the window's end " + " / ".join(f"{r.connections:,.0f}" for r in runs)
        + "; frames/s per terminal " + " / ".join(f"{r.frames_per_terminal_s:.1f}" for r in runs)
        + "; server CPU " + " / ".join(f"{r.server_cpu:.2f}" for r in runs)
        + "; load client CPU " + " / ".join(f"{r.client_cpu:.2f}" for r in runs)
        + (f"; {sum(r.errors_received for r in runs)} ERROR messages received"
           if any(r.errors_received for r in runs) else "")
        + (f"; errors: {' | '.join(errors[:3])}" if errors else "")
    )  # fmt: skip
    rows: list[Row] = []
    for label, value, unit, what, detail in _metrics():
        vals = [value(r) for r in runs]
        med, lo, hi = median_min_max(vals)
        ratio: float | None = 1.0
        if peers:
            peer_med = median_min_max([value(p) for p in peers])[0]
            ratio = med / peer_med if peer_med else None
        note = f"{what}; runs {' / '.join(_fmt(v) for v in vals)}"
        if detail is not None:
            note += " (" + " / ".join(detail(r) for r in runs) + ")"
        rows.append(
            row(label, tag, med, unit, lo=lo, hi=hi, ratio=ratio, peer=peer_name,
                note=f"{note}; {common}")
        )  # fmt: skip
    return rows


def _host_rows(runs: list[Outcome], tag: str, common: str) -> list[Row]:
    """The host's per-process figures: cores per role, the capacity model's unit costs, the
    longest gen-2 pause per process, the terminals' split. Medians over the runs."""
    rows: list[Row] = []
    roles = sorted({r for o in runs for r in o.cpu_by_role()})

    def add(label: str, vals: list[float], unit: str, note: str) -> None:
        med, lo, hi = median_min_max(vals)
        per_run = " / ".join(_fmt(v) for v in vals)
        rows.append(
            row(label, tag, med, unit, lo=lo, hi=hi, note=f"{note}; runs {per_run}; {common}")
        )

    for role in roles:
        add(
            f"host: CPU of the {role} role",
            [o.cpu_by_role().get(role, 0.0) for o in runs],
            "cores",
            f"psutil user+system seconds of every {role} process in the host's tree over the "
            "window / window (" + " | ".join(
                ", ".join(f"{n} {c:.2f}" for n, c in sorted(o.cpu_by_process.items())
                          if role_of(n) == role) for o in runs
            ) + ")",
        )  # fmt: skip
    add(
        "host: ingest CPU per 1,000 ticks",
        [o.ingest_ms_per_1k_ticks() for o in runs],
        "ms",
        "handler + sequencer CPU (psutil) / ticks admitted in the window "
        f"({TICKS_ADMITTED}, unique venue updates; each reached both twin handlers) x 1,000; "
        "the venue (the simulator) is not counted; admitted ticks/s "
        + " / ".join(f"{o.ticks_per_s:,.0f}" for o in runs),
    )
    if any(o.frames_per_s for o in runs):
        add(
            "host: writer CPU per 1,000 delivered frames",
            [o.writer_ms_per_1k_frames() for o in runs],
            "ms",
            "all writers' CPU (psutil) / FRAME messages the load clients counted x 1,000",
        )
    add(
        "host: longest gen-2 pause of any process",
        [max((ms for _, ms in o.gen2_by_process.values()), default=0.0) for o in runs],
        "ms",
        "monotape_gc_pause_seconds{generation=2} bucket deltas over the window from the merged "
        "/metrics: the upper bound of the highest bucket that gained a pause (0: none ran); "
        "target <= 5 ms; per process with any (" + " | ".join(
            ", ".join(f"{p} {n}x <= {ms:g} ms" for p, (n, ms) in sorted(o.gen2_by_process.items())
                      if n) or "none" for o in runs
        ) + ")",
    )  # fmt: skip
    if any(sum(o.split.values()) for o in runs):
        add(
            "host: terminals on the busiest writer",
            [max(o.split.values(), default=0) / max(1, sum(o.split.values())) for o in runs],
            "share",
            "GET /admin/processes at the window's end, terminals per writer (SO_REUSEPORT's "
            "hash): " + " | ".join(_split_text(o) for o in runs),
        )
    return rows


def _idle_row(o: Outcome, size: Size) -> Row:
    """What the core spends before any fan-out: the same ``--rate``, no terminal connected."""
    return row(
        "latency: server CPU with no terminals",
        f"idle, 0 terminals, --rate {size.rate:,}",
        o.server_cpu,
        "cores",
        note=(
            f"psutil user+system seconds of monotape run over a {o.window_s:.0f} s window / "
            "window, nobody connected: the simulated venues, both feed handlers per venue, the "
            "sequencer, conflation and stage recording, i.e. what is left of the one core for "
            f"fan-out at this rate; one run; {o.pinned}"
        ),
    )


def _common(runs: list[Outcome], size: Size) -> str:
    o = runs[0]
    shedding = all(os.environ.get(k) == v for k, v in NO_LAG_SHEDDING.items())
    return (
        f"{len(runs)} run(s) on fresh servers, alternated with the one-process node; {o.pinned}; "
        f"window {o.window_s:.0f} s, {SETTLE_S:.0f} s after a {size.ramp_s} s ramp"
        + ("; lag shedding off (no 503 while a loop runs late)" if shedding else "")
        + "; box gauge before each run (ms of one fixed loop, lower is faster; runs far apart "
        "ran on a faster or slower box) "
        + " / ".join(f"{r.box_ms:.0f}" for r in runs)
        + "; the process that waited longest for a core (run-queue wait, s per s) "
        + " / ".join(most_waiting(r.wait_by_process) for r in runs)
    )


def compare(
    size: Size, writers: Sequence[int], log: Callable[[str], None], rates: Sequence[int] = ()
) -> list[Row]:
    """The host with each of ``writers`` writer counts against the one-process node, same
    terminals, same clients, alternated (node, host N1, host N2, node, ...); then one host run
    per rate and writer count with no terminal (ingest alone)."""
    rows: list[Row] = []
    rates = rates or [size.rate] + ([size.fanout_rate] if size.fanout_rate else [])
    for rate in rates:
        at = dataclasses.replace(size, rate=rate)
        node: list[Outcome] = []
        hosts: dict[int, list[Outcome]] = {n: [] for n in writers}
        for k in range(at.repeats):  # alternated, so drift on a shared machine hits all
            log(f"  --rate {rate:,}: run {k + 1} of {at.repeats} (load {_load()})")
            node.append(measure(at, at.terminals, "1 process", log))
            for n in writers:
                hosts[n].append(measure(at, at.terminals, f"host, {n} writers", log, n))
        rows += _rows(node, None, at)
        for n, runs in hosts.items():
            tag = f"host, {n} writers, {at.terminals:,} x {WATCHLIST} sym, --rate {rate:,}"
            rows += _rows(runs, node, at) + _host_rows(runs, tag, _common(runs, at))
        for n in writers:
            idle_size = dataclasses.replace(at, window_s=min(at.window_s, 10))
            idle = measure(idle_size, 0, f"host idle, {n} writers", log, n)
            idle_tag = f"host idle, {n} writers, 0 terminals, --rate {rate:,}"
            note = f"no terminal: ingest alone; load {_load()}; " + _common([idle], at)
            rows += _host_rows([idle], idle_tag, note)
    return rows


def ingest(
    size: Size, writers: Sequence[int], log: Callable[[str], None], rates: Sequence[int]
) -> list[Row]:
    """Ingest alone, no terminal: per rate, the one-process node and the host with each writer
    count, alternated ``size.repeats`` times on fresh servers (10 s windows); CPU per role and
    per 1,000 admitted ticks, the node's figure the peer (its simulator included, the host's
    venue not)."""
    rows: list[Row] = []
    for rate in rates:
        at = dataclasses.replace(size, rate=rate, window_s=min(size.window_s, 10))
        node: list[Outcome] = []
        hosts: dict[int, list[Outcome]] = {n: [] for n in writers}
        for k in range(at.repeats):
            log(f"  --rate {rate:,}, no terminal: run {k + 1} of {at.repeats} (load {_load()})")
            node.append(measure(at, 0, "1 process idle", log))
            for n in writers:
                hosts[n].append(measure(at, 0, f"host idle, {n} writers", log, n))
        node_ms = [1e6 * o.server_cpu / o.ticks_per_s for o in node if o.ticks_per_s]
        peer = f"1 process idle, --rate {rate:,}"
        node_med = 0.0
        if node_ms:
            node_med, lo, hi = median_min_max(node_ms)
            rows.append(row("host: ingest CPU per 1,000 ticks", peer, node_med, "ms", lo=lo, hi=hi,
                            ratio=1.0, peer=peer,
                            note="monotape run --writers 0, nobody connected: its whole CPU "
                            "(simulator included) / ticks admitted; admitted ticks/s "
                            + " / ".join(f"{o.ticks_per_s:,.0f}" for o in node)
                            + "; " + _common(node, at)))  # fmt: skip
        for n, runs in hosts.items():
            tag = f"host idle, {n} writers, 0 terminals, --rate {rate:,}"
            host_rows = _host_rows(runs, tag, "no terminal: ingest alone; " + _common(runs, at))
            if node_med:  # the ingest row against the node's
                host_rows = [
                    dataclasses.replace(r, ratio=r.value / node_med, peer=peer)
                    if r.benchmark == "host: ingest CPU per 1,000 ticks" and r.value
                    else r
                    for r in host_rows
                ]
            rows += host_rows
    return rows


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def run(
    quick: bool = False,
    writers: Sequence[int] = (),
    rates: Sequence[int] = (),
    terminals: int = 0,
    ingest_only: bool = False,
) -> list[Row]:
    """``writers`` empty: the node against its 420-terminal peer; writer counts: the host with
    each against the node (``ingest_only``: with no terminal, ingest's CPU alone)."""
    raise_nofile()  # the server inherits it: 4,200 sockets

    def log(message: str) -> None:
        print(message, file=sys.stderr)

    if writers:
        size = QUICK_HOST if quick else FULL
        if ingest_only:
            return ingest(size, writers, log, rates or [size.rate])
        if terminals:
            size = dataclasses.replace(size, terminals=terminals)
        return compare(size, writers, log, rates)
    size = QUICK if quick else FULL

    rows: list[Row] = []
    rates = [size.rate] + ([size.fanout_rate] if size.fanout_rate else [])
    for rate in rates:
        at = dataclasses.replace(size, rate=rate)
        loaded: list[Outcome] = []
        light: list[Outcome] = []
        for k in range(at.repeats):  # alternated, so drift on a shared machine hits both
            log(f"  --rate {rate:,}: run {k + 1} of {at.repeats}")
            loaded.append(measure(at, at.terminals, "loaded", log))
            light.append(measure(at, at.terminals // 10, "light", log))
        idle = measure(dataclasses.replace(at, window_s=min(at.window_s, 10)), 0, "idle", log)
        rows += _rows(loaded, light, at) + _rows(light, None, at) + [_idle_row(idle, at)]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 terminals instead of 4,200")
    parser.add_argument(
        "--writers",
        default="",
        metavar="N[,N...]",
        help="measure the host (monotape run --writers N) beside the one-process node, for "
        "each N (e.g. 2 or 1,2); default: the node against its 420-terminal peer",
    )
    parser.add_argument(
        "--rates",
        default="",
        metavar="R[,R...]",
        help="with --writers: only these --rate values (default: 120000,20000; quick 20000)",
    )
    parser.add_argument(
        "--terminals",
        type=int,
        default=0,
        metavar="N",
        help="with --writers: N terminals instead of 4,200 (quick 300), e.g. a population that "
        "holds on a busy box, for clean per-unit CPU costs",
    )
    parser.add_argument(
        "--ingest-only",
        action="store_true",
        help="with --writers: no terminal, only ingest's CPU per role and per 1,000 ticks, the "
        "host against the one-process node at each rate (default rate 120000; quick 20000)",
    )
    parser.add_argument(
        "--no-lag-shedding",
        action="store_true",
        help="servers admit upgrades while their loop runs late (no 503s): on a busy box the "
        "population then connects and stays, so per-unit CPU is not mixed with refusals",
    )
    args = parser.parse_args()
    if args.no_lag_shedding:
        os.environ.update(NO_LAG_SHEDDING)  # every server the bench starts inherits it
    if args.terminals < 0:
        parser.error("--terminals must be positive")
    try:
        writers = [int(w) for w in args.writers.split(",") if w.strip()]
        rates = [int(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        parser.error("--writers and --rates take numbers like 2 or 1,2")
    if any(r <= 0 for r in rates):
        parser.error("--rates: each rate must be positive")
    if any(not 1 <= n <= 16 for n in writers):
        parser.error("--writers: each count must be 1-16 (the frame ring's reader slots)")
    if args.ingest_only and not writers:
        parser.error("--ingest-only needs --writers N (the host to measure)")
    print_rows(run(args.quick, writers, rates, args.terminals, args.ingest_only))


if __name__ == "__main__":
    main()
