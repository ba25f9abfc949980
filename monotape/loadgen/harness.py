"""``run_load``: replay an arrival trace against a server on loopback, over several processes.

The parent plans every terminal (``trace.plan_sessions``), reads the server's dictionary from
one probe connection, draws each terminal's Zipf watchlist of its planned size
(``watchlists.zipf_watchlists``), deals the terminals round-robin to ``processes`` workers
('spawn' context, uvloop in each), starts them on a common wall-clock second, prints progress
every second, samples the server's /metrics (event-loop lag, auth cache) when given an admin URL,
and merges what the workers measured into one ``LoadReport`` (``merge.py``, pure). Bounded: the
trace's duration plus ``drain_s`` (then the workers cancel what is left), plus a grace to collect
results, after which a worker that still has not reported is terminated.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import queue
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, Final
from urllib.parse import urlsplit, urlunsplit

import msgspec
import websockets
from msgspec import Meta
from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

from monotape.loadgen.churn import ChurnFailed, ChurnRefused, check_loopback
from monotape.loadgen.launch import scrape, sum_samples
from monotape.loadgen.merge import Lag, merge_results, sum_progress
from monotape.loadgen.report import LoadProgress, LoadReport, print_progress
from monotape.loadgen.trace import Trace, plan_sessions
from monotape.loadgen.watchlists import zipf_watchlists
from monotape.loadgen.worker import Job, Knobs, WorkerResult, worker_main
from monotape.log import redact
from monotape.metric_names import (
    AUTH_CACHE_HITS,
    AUTH_CACHE_MISSES,
    EVENT_LOOP_LAG,
    EVENT_LOOP_LAG_MAX,
)
from monotape.platform.sdk.reconnect import parse_retry_after
from monotape.platform.wire import codec

__all__ = ["LoadConfig", "LoadFailed", "LoadRefused", "run_load"]

Positive = Annotated[float, Meta(gt=0)]
_COLLECT_GRACE_S: Final = 20.0  # after the run's bound, for workers to close and report


class LoadRefused(ChurnRefused):
    """The URL is not one the harness will aim at (not ws://, or not loopback)."""


class LoadFailed(ChurnFailed):
    """The probe connection could not read the dictionary: the node refused the upgrade
    (``failure`` is the ``InvalidStatus``) or nothing answered (an ``OSError``)."""


class LoadConfig(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The knobs (docs/load.md). Defaults run on a laptop against ``monotape run``."""

    processes: Annotated[int, Meta(ge=1, le=64)] = 2
    admin_url: str | None = None  # e.g. http://127.0.0.1:8081: lag + auth cache from /metrics
    backoff_base_s: Positive = 0.5  # full jitter: uniform(0, min(cap, base * 2**attempt))
    backoff_cap_s: Positive = 10.0
    open_timeout_s: Positive = 10.0
    close_timeout_s: Positive = 2.0
    first_frame_timeout_s: Positive = 30.0  # then it counts as an error (the session stays)
    settle_s: Annotated[float, Meta(ge=0)] = 1.0  # a terminal is due this long after its slot
    drain_s: Positive = 10.0  # after the trace: at most this long, then cancel
    max_sessions: Annotated[int, Meta(ge=1)] = 50_000
    start_timeout_s: Positive = 60.0  # for the workers to start
    seed: int = 1


def check_target(url: str) -> None:
    """LoadRefused unless ``url`` is ws:// or wss:// on loopback."""
    try:
        check_loopback(url)
    except ChurnRefused as exc:
        msg = str(exc).replace("churn", "the load harness", 1)
        raise LoadRefused(f"{msg} (url {redact(url)})") from None


def check_admin(url: str) -> None:
    p = urlsplit(url)
    if p.scheme not in ("http", "https"):
        raise LoadRefused(f"admin URL must be http:// or https://, got {redact(url)!r}")
    check_target(urlunsplit(("ws", p.netloc, "/", "", "")))


# -- the dictionary ---------------------------------------------------------------------------
async def _probe_keys(url: str, timeout_s: float) -> list[str]:
    """Read the hello of one probe connection (retrying a 503 after its Retry-After)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            async with websockets.connect(
                url, compression=None, max_size=8 * 1024 * 1024, open_timeout=timeout_s
            ) as ws:
                msg = codec.decode_message(bytes(await ws.recv(decode=False)))
            break
        except InvalidStatus as exc:
            wait = parse_retry_after(exc.response.headers.get("Retry-After"))
            if exc.response.status_code != 503 or time.monotonic() + (wait or 1) > deadline:
                raise
            await asyncio.sleep(wait or 1.0)
    if not isinstance(msg, codec.Hello):
        raise RuntimeError(f"expected hello as the first message, got {type(msg).__name__}")
    return [inst.key for inst in msg.instruments]


def _watchlists(keys: list[str], sizes: list[int], seed: int) -> list[list[str]]:
    """A Zipf watchlist of each planned size (the workload's sharing, per size)."""
    need: dict[int, int] = {}
    for s in sizes:
        need[s] = need.get(s, 0) + 1
    pools: dict[int, list[list[str]]] = {}
    for size, count in need.items():
        if size > len(keys):
            raise ValueError(f"watchlist size {size} exceeds the {len(keys)}-symbol universe")
        pools[size] = zipf_watchlists(keys, count, seed + size, size_range=(size, size))
    taken = dict.fromkeys(need, 0)
    out: list[list[str]] = []
    for s in sizes:
        out.append(pools[s][taken[s]])
        taken[s] += 1
    return out


# -- the server's /metrics --------------------------------------------------------------------
_WANTED: Final = (EVENT_LOOP_LAG, EVENT_LOOP_LAG_MAX, AUTH_CACHE_HITS, AUTH_CACHE_MISSES)


def _scrape(admin_url: str) -> dict[str, float]:
    """The figures the report wants, each summed over the node's processes."""
    samples = scrape(admin_url, timeout_s=3)
    present = {name for name, _ in samples}
    return {n: sum_samples(samples, n) for n in _WANTED if n in present}


class _Scraper(threading.Thread):
    """Samples the server's event-loop lag every second, off the progress path."""

    def __init__(self, admin_url: str) -> None:
        super().__init__(name="load-metrics", daemon=True)
        self.admin_url = admin_url
        self.stop = threading.Event()
        self.lag_max: float | None = None
        self.lag_last: float | None = None
        self.samples = 0

    def sample(self) -> dict[str, float] | None:
        try:
            m = _scrape(self.admin_url)
        except (OSError, ValueError):
            return None
        lags = [m[n] for n in (EVENT_LOOP_LAG, EVENT_LOOP_LAG_MAX) if n in m]
        if lags:
            self.samples += 1
            self.lag_last = m.get(EVENT_LOOP_LAG, lags[0])
            self.lag_max = max(self.lag_max or 0.0, *lags)
        return m

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()


# -- the run ----------------------------------------------------------------------------------
def run_load(
    url: str,
    trace: Trace,
    cfg: LoadConfig | None = None,
    progress: Callable[[LoadProgress], None] | None = print_progress,
) -> LoadReport:
    """Replay ``trace`` against ``url`` (loopback only; LoadRefused otherwise) and report.

    Returns within about the trace's duration + ``cfg.drain_s`` + startup; raises LoadFailed if
    the probe connection that reads the dictionary is refused or finds nothing listening."""
    cfg = cfg or LoadConfig()
    check_target(url)
    if cfg.admin_url is not None:
        check_admin(cfg.admin_url)
    plans = plan_sessions(trace, cfg.seed)
    if len(plans) > cfg.max_sessions:
        raise ValueError(f"trace plans {len(plans)} sessions, max_sessions is {cfg.max_sessions}")
    try:
        keys = asyncio.run(_probe_keys(url, cfg.open_timeout_s))
    except (InvalidHandshake, InvalidURI, OSError, TimeoutError) as exc:
        # Never str(exc) whole: an InvalidURI would print the URL, and the token in its query.
        why = getattr(exc, "strerror", None) or type(exc).__name__
        if isinstance(exc, InvalidStatus):
            why = f"HTTP {exc.response.status_code}"
        raise LoadFailed(f"cannot read the dictionary from {redact(url)}: {why}", exc) from None
    lists = _watchlists(keys, [p.size for p in plans], cfg.seed)
    knobs = Knobs(
        backoff_base_s=cfg.backoff_base_s,
        backoff_cap_s=cfg.backoff_cap_s,
        open_timeout_s=cfg.open_timeout_s,
        close_timeout_s=cfg.close_timeout_s,
        first_frame_timeout_s=cfg.first_frame_timeout_s,
        settle_s=cfg.settle_s,
        drain_s=cfg.drain_s,
        seed=cfg.seed,
    )
    n = min(cfg.processes, max(1, len(plans)))
    jobs = [
        Job(
            wid=w,
            url=url,
            duration_s=trace.duration_s,
            knobs=knobs,
            plans=plans[w::n],
            watchlists=lists[w::n],
        )
        for w in range(n)
    ]
    scraper = _Scraper(cfg.admin_url) if cfg.admin_url else None
    before = scraper.sample() if scraper else None
    ctx = mp.get_context("spawn")
    results: Any = ctx.Queue()
    starts: list[Any] = [ctx.Queue() for _ in range(n)]
    procs = [
        ctx.Process(
            target=worker_main,
            args=(msgspec.msgpack.encode(job), results, starts[job.wid]),
            name=f"monotape-load-{job.wid}",
            daemon=True,
        )
        for job in jobs
    ]
    done: dict[int, WorkerResult] = {}
    failures: list[str] = []
    crashed: set[int] = set()
    t_start = time.monotonic()
    try:
        for p in procs:
            p.start()
        _wait_ready(results, procs, cfg.start_timeout_s)
        t0_wall = time.time() + 0.5
        for q in starts:
            q.put(t0_wall)
        if scraper is not None:
            scraper.start()
        t_start = time.monotonic() + 0.5
        bound = t_start + trace.duration_s + cfg.drain_s + _COLLECT_GRACE_S
        latest: dict[int, tuple[int, ...]] = {}
        next_print = t_start + 1.0
        while len(done) + len(failures) < n and time.monotonic() < bound:
            with contextlib.suppress(queue.Empty):
                kind, wid, payload = results.get(timeout=0.2)
                if kind == "progress":
                    latest[wid] = payload
                elif kind == "done":
                    done[wid] = msgspec.msgpack.decode(payload, type=WorkerResult)
                elif kind == "failed":
                    failures.append(f"worker {wid} failed: {payload}")
            if progress is not None and time.monotonic() >= next_print:
                next_print += 1.0
                progress(sum_progress(latest, time.monotonic() - t_start, _lag_last(scraper)))
            for wid, proc in enumerate(procs):  # a crashed worker never says "done"
                if wid not in done and wid not in crashed and proc.exitcode not in (0, None):
                    crashed.add(wid)
                    failures.append(f"worker {wid} exited with {proc.exitcode}")
        if progress is not None:
            progress(sum_progress(latest, time.monotonic() - t_start, _lag_last(scraper)))
    finally:
        for q in starts:
            with contextlib.suppress(Exception):
                q.put(None)  # a worker still waiting to start leaves at once
        if scraper is not None:
            scraper.stop.set()
            if scraper.is_alive():
                scraper.join(5)
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
        results.close()
        results.join_thread()
        for q in starts:
            q.close()
            q.join_thread()
    elapsed = time.monotonic() - t_start
    after = scraper.sample() if scraper else None
    missing = [w for w in range(n) if w not in done]
    failures += [f"worker {w} did not report" for w in missing if not any(
        f.startswith(f"worker {w} ") for f in failures)]  # fmt: skip
    return merge_results(
        redact(url),
        trace,
        n,
        list(done.values()),
        failures,
        elapsed,
        Lag(scraper.lag_max, scraper.samples) if scraper else Lag(None, 0),
        before,
        after,
    )


def _lag_last(scraper: _Scraper | None) -> float | None:
    return scraper.lag_last if scraper else None


def _wait_ready(results: Any, procs: list[Any], timeout_s: float) -> None:
    """Every worker says "ready"; a worker that died on the way fails the run at once."""
    n = len(procs)
    deadline = time.monotonic() + timeout_s
    ready = 0
    while ready < n:
        dead = [p.name for p in procs if p.exitcode is not None]
        if dead:
            raise RuntimeError(f"load workers exited before starting: {', '.join(dead)}")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{n - ready} of {n} load workers did not start in {timeout_s} s")
        try:
            kind, _, _ = results.get(timeout=0.2)
        except queue.Empty:
            continue
        if kind == "ready":
            ready += 1
