"""The latency record under load: per-stage percentiles from a real ``monotape run``.

The bench starts ``monotape run`` with ``bench.bench_storm.start_server`` (loopback, fresh data
directory, pinned to CPU 0 from its first instruction) at ``--rate 120000`` (full) or
``--rate 20000`` (quick), and holds a steady population of terminals with
``monotape.platform.load.run_load`` from load workers pinned to CPU 1 (``bench_storm._affinity``
in the thread that starts them: the 'spawn' workers inherit it). Every watchlist is exactly 40
symbols, drawn Zipf by the harness.

The trace: a linear ramp (the same number of connects every second; full 4,200 over 10 s = 420/s,
well under the admission bucket's 1,200/s, so nothing is refused), then no connects and no
disconnects until the trace ends, when every terminal closes gracefully. Once the last arrival
second has passed (plus 1 s to settle), the measurement window starts: full 40 s, quick 12 s
(the interval logs rotate every 10 s, so at least two rotations). At its end, with the
terminals still connected, the bench reads (admin token):

- ``GET /admin/latency?stage=S&window=1m`` for decode, sequence, conflate, encode, write, glass,
  hydrate: one row per stage, value = p99 (ms), note with p50 / p99.9 / max / count. The minute
  covers the ramp as well as the window, and the last (unrotated, < 10 s) interval is not in it.
  ``glass`` is RTT/2 of timed pings: an upper bound, not a one-way figure.
- ``end to end (server side)``: the sum of the five pipeline stages' p99s (decode .. write), an
  explicit UPPER BOUND: p99s do not add (the slow ticks of one stage are not those of another).
- ``GET /admin/gc`` at the window's start and end: gen-2 collections per minute (delta / window)
  and the longest gen-2 pause that started inside the window.
- ``/metrics`` scraped every second by the bench (the harness's own scraper is off, so nobody
  else resets ``monotape_event_loop_lag_max_seconds``, a max since the last scrape): the worst
  loop lag inside the window and ``process_resident_memory_bytes`` at its end.

The peer, in the same run on a fresh server with the same ``--rate``: 10x fewer terminals
(420 full / 20 quick) with the same ramp length and window. Loaded rows carry
ratio = loaded / light; the light rows carry ratio 1.

Not measured: the priority path has no histogram of its own (its frames land in the same
``write`` stage); the one-way client latency (only RTT/2 via ``glass``); anything past loopback.

    .venv/bin/python -m bench.bench_latency [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import bench_storm
from bench.bench_storm import LOAD_CPU, SERVER_CPU, Server, _affinity, _can_pin, _mint, start_server
from bench.common import raise_nofile, row
from monotape.histograms import ALL_STAGES, STAGES
from monotape.metric_names import CONNECTIONS, EVENT_LOOP_LAG_MAX
from monotape.platform.load import LoadConfig, LoadReport, SizeWeight, Trace, run_load

__all__ = ["run"]

WATCHLIST = 40
RSS = "process_resident_memory_bytes"


@dataclass(frozen=True)
class Size:
    rate: int
    terminals: int
    ramp_s: int
    window_s: int
    processes: int


FULL = Size(rate=120_000, terminals=4_200, ramp_s=10, window_s=40, processes=2)
QUICK = Size(rate=20_000, terminals=200, ramp_s=3, window_s=12, processes=1)
SLACK_S = 6  # trace seconds after the window: room for the reads, terminals still connected
SETTLE_S = 1.0


@contextlib.contextmanager
def _rate(rate: int) -> Iterator[None]:
    """bench_storm.start_server passes its module's RATE as --rate: set it for one start."""
    before = bench_storm.RATE
    bench_storm.RATE = rate
    try:
        yield
    finally:
        bench_storm.RATE = before


def steady_trace(terminals: int, ramp_s: int, hold_s: int) -> Trace:
    """``terminals`` connecting evenly over ``ramp_s`` seconds, then held to the end."""
    per = [terminals // ramp_s + (1 if k < terminals % ramp_s else 0) for k in range(ramp_s)]
    connects = [*per, *([0] * hold_s)]
    return Trace(
        name=f"steady-{terminals}x{WATCHLIST}",
        connects=connects,
        disconnects=[0] * len(connects),
        cardinality=[SizeWeight(WATCHLIST, 1.0)],
        abrupt_fraction=0.0,
    )


class _Metrics(threading.Thread):
    """Scrapes /metrics every second: (monotonic time, loop-lag max since last scrape, RSS,
    connections). The only scraper, so the lag max is not reset by anyone else."""

    def __init__(self, server: Server) -> None:
        super().__init__(name="bench-latency-metrics", daemon=True)
        self.server = server
        self.stop = threading.Event()
        self.samples: list[tuple[float, float, float, float]] = []

    def sample(self) -> tuple[float, float, float, float] | None:
        try:
            text = self.server.http("/metrics", timeout=3).decode()
        except OSError:
            return None
        lag = rss = conns = 0.0
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == EVENT_LOOP_LAG_MAX:
                    lag = max(lag, s.value)
                elif s.name == RSS:
                    rss = s.value
                elif s.name == CONNECTIONS:
                    conns += s.value
        out = (time.monotonic(), lag, rss, conns)
        self.samples.append(out)
        return out

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()


@dataclass
class Outcome:
    variant: str
    terminals: int
    stages: dict[str, dict[str, Any]]
    gen2_per_min: float
    gen2_max_ms: float
    gen2_collections: int
    lag_max_ms: float
    rss_mb: float
    connections: float
    window_s: float
    report: LoadReport | None
    pinned: str
    errors: list[str] = field(default_factory=list)


def _gc(server: Server, token: str) -> dict[str, Any]:
    return dict(json.loads(server.http("/admin/gc?recent=10000", token))["gc"])


def measure(size: Size, terminals: int, variant: str, log: Any) -> Outcome:
    pin = _can_pin(SERVER_CPU, LOAD_CPU)
    hold = int(SETTLE_S) + size.window_s + SLACK_S
    trace = steady_trace(terminals, size.ramp_s, hold)
    result: dict[str, Any] = {}
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        data_dir = Path(tmp)
        with _rate(size.rate):
            server = start_server(data_dir, {}, cpu=SERVER_CPU if pin else None)
        scraper = _Metrics(server)
        loader: threading.Thread | None = None
        try:
            token, admin = _mint(data_dir, admin=False), _mint(data_dir, admin=True)
            cfg = LoadConfig(
                processes=size.processes,
                admin_url=None,  # the bench scrapes /metrics itself (see _Metrics)
                drain_s=5.0,
                open_timeout_s=10.0,
                start_timeout_s=30.0,
                seed=1,
            )
            url = f"ws://127.0.0.1:{server.ws_port}/?token={token}"

            def load() -> None:
                try:  # sched_setaffinity(0) pins this thread; the workers it spawns inherit it
                    with _affinity(LOAD_CPU if pin else None):
                        result["report"] = run_load(url, trace, cfg, progress=None)
                except Exception as exc:  # reported in the rows' note, not swallowed
                    errors.append(f"{type(exc).__name__}: {exc}")

            scraper.start()
            loader = threading.Thread(target=load, name="bench-latency-load", daemon=True)
            loader.start()
            # The trace starts when the first terminal connects (workers spawn first).
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and loader.is_alive():
                s = scraper.samples[-1] if scraper.samples else None
                if s and s[3] >= 1:
                    break
                time.sleep(0.2)
            first = time.monotonic()
            time.sleep(size.ramp_s + SETTLE_S)
            w0 = time.monotonic()
            w0_wall_ms = int(time.time() * 1000)
            gc0 = _gc(server, admin)
            time.sleep(size.window_s)
            w1 = time.monotonic()
            w1_wall_ms = int(time.time() * 1000)
            gc1 = _gc(server, admin)
            stages = {
                st: dict(json.loads(server.http(f"/admin/latency?stage={st}&window=1m", admin)))
                for st in ALL_STAGES
            }
            last = scraper.sample()
            log(f"  {variant}: window began {w0 - first:.1f} s after the first connect")
        finally:
            scraper.stop.set()
            if loader is not None:
                loader.join(hold + size.ramp_s + 60)
            rc = server.stop()
            if rc not in (0, None):
                log(f"  {variant}: monotape run exited {rc}; last lines:")
                for line in server.output[-5:]:
                    log("    " + line.rstrip())
    minutes = (w1 - w0) / 60
    g0, g1 = gc0["generations"]["2"], gc1["generations"]["2"]
    n2 = int(g1["collections"] - g0["collections"])
    in_window = [
        p["duration_ns"] / 1e6
        for p in gc1["recent"]
        if p["generation"] == 2 and w0_wall_ms <= p["start_ms"] < w1_wall_ms
    ]
    lags = [s[1] for s in scraper.samples if w0 <= s[0] <= w1 + 0.5]
    report = result.get("report")
    out = Outcome(
        variant=variant,
        terminals=terminals,
        stages=stages,
        gen2_per_min=n2 / minutes if minutes > 0 else 0.0,
        gen2_max_ms=max(in_window, default=0.0),
        gen2_collections=n2,
        lag_max_ms=max(lags, default=0.0) * 1000,
        rss_mb=(last[2] if last else 0.0) / 2**20,
        connections=last[3] if last else 0.0,
        window_s=w1 - w0,
        report=report,
        pinned=(
            f"server on CPU {SERVER_CPU}, load workers on CPU {LOAD_CPU}"
            if pin
            else "not pinned (CPUs 0 and 1 not both available)"
        ),
        errors=errors + (list(report.error_samples[:3]) if report else []),
    )
    r = report
    log(
        f"  {variant}: {out.connections:.0f} connected at the window's end, "
        f"write p99 {stages['write'].get('p99_us', 0) / 1000:.3f} ms, "
        f"gen2 {out.gen2_collections} ({out.gen2_max_ms:.2f} ms max), lag max "
        f"{out.lag_max_ms:.1f} ms, rss {out.rss_mb:.0f} MiB, "
        + (f"{r.connected}/{r.scheduled} connected, 503s {r.rejected_503}" if r else "no report")
    )
    return out


# -- rows -------------------------------------------------------------------------------------
def _ms(body: dict[str, Any], key: str) -> float:
    return float(body.get(key, 0)) / 1000


def _ratio(a: float, b: float | None) -> float | None:
    if b is None or b == 0:
        return None
    return a / b


def _rows(o: Outcome, peer: Outcome | None, size: Size) -> list[dict[str, Any]]:
    tag = f"{o.variant}, {o.terminals:,} x {WATCHLIST} sym, --rate {size.rate:,}"
    peer_name = f"{peer.variant}, {peer.terminals:,} terminals" if peer else ""
    r = o.report
    held = o.connections >= 0.95 * o.terminals
    common = (
        (
            ""
            if held
            else f"POPULATION NOT HELD ({o.connections:,.0f}/{o.terminals:,} connected "
            "at the window's end): these figures are NOT the steady-state record; "
        )
        + f"{o.pinned}; window {o.window_s:.0f} s after a {size.ramp_s} s ramp; "
        f"{o.connections:,.0f} connected at the window's end"
        + (
            f"; load: {r.connected:,}/{r.scheduled:,} connected, 503s {r.rejected_503}, "
            f"connect failures {r.connect_failures}, lost {r.lost}, errors {r.errors}"
            if r
            else "; load report missing"
        )
        + (f"; errors: {' | '.join(o.errors)}" if o.errors else "")
    )

    def ratio(value: float, peer_value: float | None) -> float | None:
        return _ratio(value, peer_value) if peer else 1.0

    rows: list[dict[str, Any]] = []
    for st in ALL_STAGES:
        b = o.stages[st]
        p = peer.stages[st] if peer else None
        v = _ms(b, "p99_us")
        label = "glass (RTT/2: an upper bound)" if st == "glass" else st
        rows.append(
            row(
                f"latency: {label} p99",
                tag,
                v,
                "ms",
                lo=_ms(b, "p50_us"),
                hi=_ms(b, "max_us"),
                ratio=ratio(v, _ms(p, "p99_us") if p else None),
                peer=peer_name,
                note=(
                    f"GET /admin/latency?stage={st}&window=1m (ramp + window; the last <10 s "
                    f"interval not yet rotated): p50 {_ms(b, 'p50_us'):.3f} ms, p99.9 "
                    f"{_ms(b, 'p999_us'):.3f} ms, max {_ms(b, 'max_us'):.3f} ms, count "
                    f"{int(b.get('count', 0)):,}, intervals {b.get('intervals', 0)}"
                    + (f"; peer p99 {_ms(p, 'p99_us'):.3f} ms" if p else "")
                    + ("; RTT/2 of timed pings: an upper bound" if st == "glass" else "")
                    + f"; {common}"
                ),
            )
        )
    e2e = sum(_ms(o.stages[st], "p99_us") for st in STAGES)
    e2e_peer = sum(_ms(peer.stages[st], "p99_us") for st in STAGES) if peer else None
    rows.append(
        row(
            "latency: end to end (server side) p99",
            tag,
            e2e,
            "ms",
            ratio=ratio(e2e, e2e_peer),
            peer=peer_name,
            note=(
                "UPPER BOUND: the sum of the p99s of " + " + ".join(STAGES) + " ("
                + " + ".join(f"{_ms(o.stages[st], 'p99_us'):.3f}" for st in STAGES)
                + " ms); p99s do not add exactly (one stage's slow ticks are not another's), "
                "so the true end-to-end p99 is at most this; glass and hydrate not included"
            ),
        )
    )  # fmt: skip
    rows.append(
        row(
            "latency: longest gen-2 GC pause",
            tag,
            o.gen2_max_ms,
            "ms",
            ratio=ratio(o.gen2_max_ms, peer.gen2_max_ms if peer else None),
            peer=peer_name,
            note=(
                f"GET /admin/gc: gen-2 pauses that started inside the {o.window_s:.0f} s window "
                f"({o.gen2_collections} collections; 0 ms when none ran)"
            ),
        )
    )
    rows.append(
        row(
            "latency: gen-2 collections",
            tag,
            o.gen2_per_min,
            "/min",
            ratio=ratio(o.gen2_per_min, peer.gen2_per_min if peer else None),
            peer=peer_name,
            note=(
                f"GET /admin/gc collections delta over the window: {o.gen2_collections} in "
                f"{o.window_s:.0f} s"
            ),
        )
    )
    rows.append(
        row(
            "latency: process RSS",
            tag,
            o.rss_mb,
            "MiB",
            ratio=ratio(o.rss_mb, peer.rss_mb if peer else None),
            peer=peer_name,
            note=f"/metrics {RSS} at the window's end (terminals still connected)",
        )
    )
    rows.append(
        row(
            "latency: event-loop lag max",
            tag,
            o.lag_max_ms,
            "ms",
            ratio=ratio(o.lag_max_ms, peer.lag_max_ms if peer else None),
            peer=peer_name,
            note=(
                f"/metrics {EVENT_LOOP_LAG_MAX} (max since the last scrape) scraped every "
                "second by the bench alone; the worst scrape inside the window"
            ),
        )
    )
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    size = QUICK if quick else FULL
    raise_nofile()  # the server inherits it: 4,200 sockets
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    loaded = measure(size, size.terminals, "loaded", log)
    light = measure(size, size.terminals // 10, "light", log)
    return _rows(loaded, light, size) + _rows(light, None, size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 terminals instead of 4,200")
    args = parser.parse_args()
    for r in run(args.quick):
        print(json.dumps(r, ensure_ascii=False))


if __name__ == "__main__":
    main()
