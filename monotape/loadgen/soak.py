"""The soak behind ``make soak``: hours of churn against the real ``monotape run``, then a verdict.

It starts ``monotape run`` as a subprocess on loopback (free ports, a temporary data dir, the
invariants checked every few seconds), samples ``/metrics`` before any terminal connects (the
baseline), runs the churn driver (``churn.run_churn``, in-process, ~6% RSTs) for the duration
while sampling ``/metrics`` every few seconds and printing a report line every
``report_every_s``, lets the server settle once every client has left, samples it one last time,
stops it with SIGTERM and judges (docs/soak.md):

- the invariants were 0 at every sample, and the server never logged ``invariant_tripped``;
- ``monotape_connections`` is 0 and every ``monotape_index_entries{index}`` is exactly 0;
- asyncio tasks and open fds are back to the baseline (small slack), RSS within a tolerance;
- the churn ran (sessions opened) without errors or cancelled stragglers; upgrades the node
  refused with 503 + Retry-After (shedding under load, as designed) and handshakes that timed out
  (a node starved of CPU) are retried by the churn and reported apart, but timeouts plus sessions
  that gave up may be at most 5% of the upgrade attempts (a node that stops answering fails);
- the server exited 0 on SIGTERM.

The verdict logic (``judge``) is a pure function of the samples, so it is unit-tested apart from
the hours it normally takes. Bounded everywhere: startup, each scrape, the churn (duration plus
its drain), the settle and the stop all have deadlines; the server is killed if it overstays.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Final, TextIO

import msgspec
from msgspec import Meta
from prometheus_client.parser import text_string_to_metric_families

from monotape import metric_names as m
from monotape.loadgen.churn import ChurnConfig, ChurnProgress, ChurnReport, run_churn
from monotape.loadgen.launch import ADMIN_LINE, WS_LINE
from monotape.platform.auth import ensure_dev_keys, mint_token

__all__ = [
    "Check",
    "Sample",
    "SoakConfig",
    "SoakVerdict",
    "Tolerances",
    "format_report_line",
    "judge",
    "main",
    "parse_metrics",
    "run_soak",
]

Positive = Annotated[float, Meta(gt=0)]
NonNegative = Annotated[float, Meta(ge=0)]
Share = Annotated[float, Meta(ge=0, le=1)]

_TRIPPED: Final = "invariant_tripped"
_MAX_TRIP_LINES: Final = 20
_LOG_TAIL: Final = 200
_MB: Final = 1024 * 1024
_PROCESS_RSS: Final = "process_resident_memory_bytes"
_PROCESS_FDS: Final = "process_open_fds"


class Tolerances(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """How far the end may sit above the baseline (docs/soak.md explains each number)."""

    task_slack: Annotated[int, Meta(ge=0)] = 2  # tasks <= baseline + this
    fd_slack: Annotated[int, Meta(ge=0)] = 2  # open fds <= baseline + this
    rss_ratio: Annotated[float, Meta(ge=1)] = 1.25  # RSS <= baseline x ratio + slack
    rss_slack_mb: NonNegative = 32.0
    max_missed_share: Share = 0.1  # of the scrapes during the run, at most this many may fail
    # Of the churn's upgrade attempts, at most this share may time out or end in giving up: a
    # busy machine answers a few late, a node that stops answering upgrades answers none.
    max_unanswered_share: Share = 0.05


class SoakConfig(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The knobs (docs/soak.md). Defaults: the issue's stress (1.3x, 6% RSTs) for one hour."""

    hours: Positive = 1.0  # churn duration; the settle and startup come on top
    rate_multiple: Positive = 1.3  # the churn's multiple of the base arrival trace
    rst_share: Share = 0.06  # share of leavers that send an RST (the seed's ~6%)
    arrival_rate_per_s: Positive = 100.0  # base trace: session arrivals per second
    mean_session_s: Positive = 5.0  # mean session length (exponential)
    mean_change_interval_s: Positive = 2.0  # mean time between subscription changes
    max_connections: Annotated[int, Meta(ge=1)] = 1_000  # churn sessions open at once
    churn_drain_s: Positive = 10.0  # the churn's bound for stragglers after the duration
    seed: int = 1
    report_every_s: Positive = 30.0  # a report line this often
    sample_every_s: Positive = 5.0  # /metrics scraped this often (invariants at every sample)
    warmup_s: NonNegative = 5.0  # after the server listens, before the baseline sample
    settle_s: NonNegative = 15.0  # after every client left, before the final sample
    server_rate: Positive = 6_000.0  # `monotape run --rate`: simulated ticks/s
    invariant_interval_s: Positive = 5.0  # MONOTAPE_SERVER__INVARIANT_INTERVAL_S for the server
    server_args: tuple[str, ...] = ()  # extra `monotape run` flags
    data_dir: str | None = None  # the server's --data-dir; a temporary one by default
    startup_timeout_s: Positive = 60.0
    scrape_timeout_s: Positive = 10.0
    stop_timeout_s: Positive = 30.0
    tolerances: Tolerances = msgspec.field(default_factory=Tolerances)

    @property
    def duration_s(self) -> float:
        return self.hours * 3600.0

    def churn_config(self) -> ChurnConfig:
        rate = self.arrival_rate_per_s * self.rate_multiple
        return ChurnConfig(
            arrival_rate_per_s=self.arrival_rate_per_s,
            mean_session_s=self.mean_session_s,
            rate_multiple=self.rate_multiple,
            rst_share=self.rst_share,
            mean_change_interval_s=self.mean_change_interval_s,
            duration_s=self.duration_s,
            drain_s=self.churn_drain_s,
            max_connections=self.max_connections,
            # Never the binding cap: twice the expected arrivals, plus room for a short run.
            max_total=max(1_000, math.ceil(2 * rate * self.duration_s)),
            seed=self.seed,
        )


class Sample(msgspec.Struct, kw_only=True, frozen=True):
    """One scrape of /metrics: what the report prints and the verdict judges."""

    elapsed_s: float
    connections: float | None = None
    index_entries: dict[str, float] = msgspec.field(default_factory=dict)
    invariants: dict[str, float] = msgspec.field(default_factory=dict)  # 1 = violated
    tasks: float | None = None
    fds: float | None = None
    rss_bytes: float | None = None
    p99_write_s: float | None = None
    disconnects: dict[str, float] = msgspec.field(default_factory=dict)  # {reason}

    @property
    def tripped(self) -> list[str]:
        return sorted(name for name, v in self.invariants.items() if v != 0)


class Check(msgspec.Struct, frozen=True):
    name: str
    ok: bool
    detail: str


class SoakVerdict(msgspec.Struct, kw_only=True, frozen=True):
    passed: bool
    checks: list[Check]
    baseline: Sample | None
    final: Sample | None
    samples: list[Sample]  # every successful scrape, baseline and final included
    missed_scrapes: int
    churn: ChurnReport | None
    tripped_log_lines: list[str]
    invariant_trips: dict[str, int] | None  # GET /admin/invariants "trips" at the end
    server_exit: int | None
    elapsed_s: float

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)


# -- /metrics ----------------------------------------------------------------------------------
def parse_metrics(text: str, elapsed_s: float) -> Sample:
    """The soak's view of one /metrics body (Prometheus' own text-format parser)."""
    conns = tasks = fds = rss = p99 = None
    index: dict[str, float] = {}
    invariants: dict[str, float] = {}
    disconnects: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == m.CONNECTIONS:
                conns = s.value
            elif s.name == m.INDEX_ENTRIES:
                index[s.labels.get("index", "")] = s.value
            elif s.name == m.INVARIANT_VIOLATION:
                invariants[s.labels.get("invariant", "")] = s.value
            elif s.name == m.ASYNCIO_TASKS:
                tasks = s.value
            elif s.name == _PROCESS_FDS:
                fds = s.value
            elif s.name == _PROCESS_RSS:
                rss = s.value
            elif (
                s.name == m.STAGE_LATENCY
                and s.labels.get("stage") == "write"
                and s.labels.get("quantile") == "0.99"
            ):
                p99 = s.value
            elif s.name == m.DISCONNECTS:
                disconnects[s.labels.get("reason", "")] = s.value
    return Sample(
        elapsed_s=round(elapsed_s, 3),
        connections=conns,
        index_entries=index,
        invariants=invariants,
        tasks=tasks,
        fds=fds,
        rss_bytes=rss,
        p99_write_s=p99,
        disconnects=disconnects,
    )


async def _http_get(port: int, path: str, timeout_s: float, token: str = "") -> str:
    """GET on 127.0.0.1 (HTTP/1.0: the body runs to EOF), bounded by ``timeout_s``."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""

    async def get() -> str:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            request = f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n"
            writer.write(request.encode())
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        head, _, body = raw.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if b" 200 " not in status + b" ":
            raise OSError(f"GET {path}: {status.decode(errors='replace')}")
        return body.decode()

    return await asyncio.wait_for(get(), timeout_s)


# -- the report line ---------------------------------------------------------------------------
def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _num(v: float | None, fmt: str = ".0f") -> str:
    return "-" if v is None else format(v, fmt)


def format_report_line(s: Sample, p: ChurnProgress | None, phase: str) -> str:
    """One line: elapsed, open connections, churn totals, invariants, RSS, fds, tasks, p99."""
    if not s.invariants:
        inv = "inv ?"
    elif s.tripped:
        inv = "inv TRIPPED:" + ",".join(s.tripped)
    else:
        inv = "inv 0"
    churn = (
        f"opened {p.opened:7d}  closed {p.closed:7d}  rst {p.rst:6d}  errors {p.errors:3d}"
        if p is not None
        else f"opened {'-':>7}  closed {'-':>7}  rst {'-':>6}  errors {'-':>3}"
    )
    rss = None if s.rss_bytes is None else s.rss_bytes / _MB
    p99 = None if s.p99_write_s is None else s.p99_write_s * 1e3
    return (
        f"soak {_hms(s.elapsed_s)} {phase:<7} open {_num(s.connections):>5}  {churn}  {inv}"
        f"  rss {_num(rss, '.1f')}MB  fds {_num(s.fds)}  tasks {_num(s.tasks)}"
        f"  p99w {_num(p99, '.2f')}ms"
    )


# -- the verdict -------------------------------------------------------------------------------
def _mb(v: float) -> str:
    return f"{v / _MB:.1f} MB"


def judge(
    *,
    baseline: Sample | None,
    samples: Sequence[Sample],
    final: Sample | None,
    churn: ChurnReport | None,
    tolerances: Tolerances,
    tripped_log_lines: Iterable[str] = (),
    invariant_trips: Mapping[str, int] | None = None,
    server_exit: int | None = 0,
    missed_scrapes: int = 0,
    elapsed_s: float = 0.0,
) -> SoakVerdict:
    """PASS only if every check holds; each failed check names its numbers (docs/soak.md)."""
    tol = tolerances
    trips = list(tripped_log_lines)
    checks: list[Check] = []

    # 1. Invariants: 0 at every sample, present at all, and never logged as tripped.
    seen = [s for s in samples if s.invariants]
    bad = [(s.elapsed_s, name) for s in samples for name in s.tripped]
    if bad:
        first: dict[str, float] = {}
        count: collections.Counter[str] = collections.Counter()
        for t, name in bad:
            first.setdefault(name, t)
            count[name] += 1
        detail = "; ".join(
            f"{name}=1 in {count[name]} of {len(seen)} samples, first at {_hms(first[name])}"
            for name in sorted(first)
        )
        checks.append(Check("invariants", False, detail))
    elif not seen:
        checks.append(Check("invariants", False, f"no sample carried {m.INVARIANT_VIOLATION}"))
    elif any(invariant_trips.values() if invariant_trips else ()):
        counted = {k: v for k, v in sorted((invariant_trips or {}).items()) if v}
        detail = ", ".join(f"{k} tripped {v}x" for k, v in counted.items())
        checks.append(Check("invariants", False, f"{detail} (GET /admin/invariants trips)"))
    elif trips:
        checks.append(
            Check("invariants", False, f"{len(trips)} invariant_tripped log line(s): {trips[0]}")
        )
    else:
        names = sorted({n for s in seen for n in s.invariants})
        also = "" if invariant_trips is None else ", no trip in /admin/invariants"
        detail = f"{', '.join(names)} 0 in {len(seen)} samples{also}"
        checks.append(Check("invariants", True, detail))

    # 2. Scrapes: enough samples read that "at every sample" means something.
    total = len(samples) + missed_scrapes
    missing = [w for w, s in (("baseline", baseline), ("final", final)) if s is None]
    if missing or (total and missed_scrapes > tol.max_missed_share * total):
        detail = f"{missed_scrapes} of {total} scrapes failed"
        if missing:
            detail += f"; no {' and no '.join(missing)} sample"
        checks.append(Check("scrapes", False, detail))
    else:
        checks.append(Check("scrapes", True, f"{len(samples)} read, {missed_scrapes} failed"))

    # 3. Connections and indexes: exactly empty once every client has left.
    if final is None or final.connections is None:
        checks.append(Check("connections", False, f"no final {m.CONNECTIONS}"))
    else:
        checks.append(
            Check("connections", final.connections == 0, f"{final.connections:.0f} open (want 0)")
        )
    if final is None or not final.index_entries:
        checks.append(Check("index_empty", False, f"no final {m.INDEX_ENTRIES}"))
    else:
        leaked = {k: v for k, v in sorted(final.index_entries.items()) if v != 0}
        detail = (
            ", ".join(f"{k}={v:.0f}" for k, v in leaked.items()) + " (want 0)"
            if leaked
            else f"all {len(final.index_entries)} indexes 0"
        )
        checks.append(Check("index_empty", not leaked, detail))

    # 4. Tasks, fds, RSS against the baseline.
    def against(name: str, b: float | None, f: float | None, limit: float, fmt: str) -> None:
        if b is None or f is None:
            checks.append(Check(name, False, "no baseline or final value"))
            return
        ok = f <= limit
        if fmt == "mb":
            detail = f"{_mb(f)} vs baseline {_mb(b)} (limit {_mb(limit)})"
        else:
            detail = f"{f:.0f} vs baseline {b:.0f} (limit {limit:.0f})"
        checks.append(Check(name, ok, detail))

    b_tasks = baseline.tasks if baseline else None
    b_fds = baseline.fds if baseline else None
    b_rss = baseline.rss_bytes if baseline else None
    against(
        "tasks",
        b_tasks,
        final.tasks if final else None,
        (b_tasks or 0) + tol.task_slack,
        "n",
    )
    against("fds", b_fds, final.fds if final else None, (b_fds or 0) + tol.fd_slack, "n")
    against(
        "rss",
        b_rss,
        final.rss_bytes if final else None,
        (b_rss or 0) * tol.rss_ratio + tol.rss_slack_mb * _MB,
        "mb",
    )

    # 5. The churn: it ran, and without errors or stragglers.
    if churn is None:
        checks.append(Check("churn", False, "the churn did not report"))
    else:
        problems = []
        if churn.opened == 0:
            problems.append("no session opened")
        if churn.errors:
            sample = f" (e.g. {churn.error_samples[0]})" if churn.error_samples else ""
            problems.append(f"{churn.errors} errors{sample}")
        if churn.cancelled:
            problems.append(f"{churn.cancelled} sessions cancelled after the drain")
        unanswered = churn.timeouts + churn.gave_up
        if unanswered > tol.max_unanswered_share * churn.attempts:
            share = unanswered / churn.attempts if churn.attempts else 1.0
            problems.append(
                f"{churn.timeouts} handshake timeouts + {churn.gave_up} gave up = {share:.1%} "
                f"of {churn.attempts} upgrade attempts (limit {tol.max_unanswered_share:.0%})"
            )
        summary = (
            f"opened {churn.opened}, closed {churn.closed}, rst {churn.rst}, "
            f"errors {churn.errors}, skipped {churn.skipped}, peak open {churn.peak_open}, "
            f"upgrade attempts {churn.attempts}, 503 refusals {churn.rejected}, "
            f"handshake timeouts {churn.timeouts} (retried; {churn.gave_up} gave up)"
        )
        checks.append(
            Check(
                "churn",
                not problems,
                "; ".join(problems) + f" [{summary}]" if problems else summary,
            )
        )

    # 6. The server stopped cleanly on SIGTERM.
    checks.append(
        Check(
            "server_exit",
            server_exit == 0,
            "exit 0 on SIGTERM"
            if server_exit == 0
            else ("did not exit on SIGTERM" if server_exit is None else f"exit {server_exit}"),
        )
    )
    return SoakVerdict(
        passed=all(c.ok for c in checks),
        checks=checks,
        baseline=baseline,
        final=final,
        samples=list(samples),
        missed_scrapes=missed_scrapes,
        churn=churn,
        tripped_log_lines=trips[:_MAX_TRIP_LINES],
        invariant_trips=dict(invariant_trips) if invariant_trips is not None else None,
        server_exit=server_exit,
        elapsed_s=round(elapsed_s, 3),
    )


def format_verdict(v: SoakVerdict) -> str:
    lines = [f"soak verdict: {'PASS' if v.passed else 'FAIL'}  ({_hms(v.elapsed_s)})"]
    for c in v.checks:
        lines.append(f"  {'ok  ' if c.ok else 'FAIL'} {c.name:<12} {c.detail}")
    return "\n".join(lines)


# -- the server --------------------------------------------------------------------------------
class _Server:
    """``monotape run`` as a subprocess: ports from its banner, its output drained and kept."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.ws_port = 0
        self.admin_port = 0
        self.tail: collections.deque[str] = collections.deque(maxlen=_LOG_TAIL)
        self.tripped: list[str] = []
        self.trip_count = 0
        self._buf = b""
        self._drainer: asyncio.Task[None] | None = None
        self.token = ""  # a terminal token (the server verifies tokens on the upgrade)
        self.admin_token = ""  # for GET /admin/invariants

    @classmethod
    async def start(cls, cfg: SoakConfig, data_dir: str) -> _Server:
        env = {
            **os.environ,
            "MONOTAPE_SERVER__INVARIANT_INTERVAL_S": str(cfg.invariant_interval_s),
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "monotape", "run",
            "--ws-port", "0", "--admin-port", "0", "--data-dir", data_dir,
            "--rate", f"{cfg.server_rate:g}", *cfg.server_args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
        )  # fmt: skip
        server = cls(proc)
        try:
            await asyncio.wait_for(server._banner(), cfg.startup_timeout_s)
        except (TimeoutError, EOFError) as exc:
            await server.kill()
            raise RuntimeError(
                "monotape run did not say what it listens on:\n" + "".join(server.tail)
            ) from exc
        server._drainer = asyncio.create_task(server._drain())
        server._mint(cfg, data_dir)
        return server

    def _mint(self, cfg: SoakConfig, data_dir: str) -> None:
        """Tokens signed by the dev key the server uses under its data dir, valid for the whole
        run (with an hour to spare). Without one (other keys configured) the churn's upgrades
        are refused and the verdict says so."""
        ttl_s = cfg.warmup_s + cfg.duration_s + cfg.churn_drain_s + cfg.settle_s + 3600
        try:
            pem = ensure_dev_keys(data_dir).private_pem_path
            self.token = mint_token(pem, sub="monotape-soak", ttl_s=ttl_s)
            self.admin_token = mint_token(pem, sub="monotape-soak", ttl_s=ttl_s, admin=True)
        except (OSError, ValueError) as exc:
            self.tail.append(f"soak: no token minted: {exc!r}\n")

    async def _chunks(self) -> bool:
        assert self.proc.stdout is not None
        chunk = await self.proc.stdout.read(65536)
        if not chunk:
            return False
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace") + "\n"
            self.tail.append(line)
            if _TRIPPED in line:
                self.trip_count += 1
                if len(self.tripped) < _MAX_TRIP_LINES:
                    self.tripped.append(line.strip()[:500])
            if w := WS_LINE.search(line):
                self.ws_port = int(w.group(1))
            if a := ADMIN_LINE.search(line):
                self.admin_port = int(a.group(1))
        return True

    async def _banner(self) -> None:
        while not (self.ws_port and self.admin_port):
            if not await self._chunks():
                raise EOFError("monotape run exited during startup")

    async def _drain(self) -> None:
        while await self._chunks():
            pass

    @property
    def url(self) -> str:
        """What the report prints: never the token."""
        return f"ws://127.0.0.1:{self.ws_port}/"

    async def invariant_trips(self, timeout_s: float) -> dict[str, int] | None:
        """``trips`` of ``GET /admin/invariants``: every trip since start, even one that
        recovered between two samples. None if the admin API did not answer."""
        try:
            body = await _http_get(
                self.admin_port, "/admin/invariants", timeout_s, self.admin_token
            )
            trips = msgspec.json.decode(body).get("trips", {})
            return {str(k): int(v) for k, v in trips.items()}
        except (OSError, TimeoutError, ValueError, AttributeError, msgspec.DecodeError):
            return None

    async def scrape(self, elapsed_s: float, timeout_s: float) -> Sample:
        return parse_metrics(await _http_get(self.admin_port, "/metrics", timeout_s), elapsed_s)

    async def stop(self, timeout_s: float) -> int | None:
        """SIGTERM and wait; the exit code, or None (and a SIGKILL) if it overstayed."""
        code: int | None
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            await self.kill()
            code = None
        await self._finish_drain()
        return code

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 10)
        await self._finish_drain()

    async def _finish_drain(self) -> None:
        if self._drainer is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._drainer, 5)
            self._drainer = None


# -- the run -----------------------------------------------------------------------------------
class _Soak:
    def __init__(self, cfg: SoakConfig, out: TextIO, server: _Server) -> None:
        self.cfg = cfg
        self.out = out
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.samples: list[Sample] = []
        self.missed = 0
        self.progress: ChurnProgress | None = None
        self.phase = "warmup"
        self.last_report = -math.inf

    def elapsed(self) -> float:
        return self.loop.time() - self.t0

    def print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    async def sample(self, *, force_report: bool = False) -> Sample | None:
        try:
            s = await self.server.scrape(self.elapsed(), self.cfg.scrape_timeout_s)
        except (OSError, TimeoutError, ValueError) as exc:
            self.missed += 1
            self.print(f"soak {_hms(self.elapsed())} {self.phase:<7} /metrics failed: {exc!r}")
            return None
        self.samples.append(s)
        if s.tripped:
            self.print(f"soak {_hms(s.elapsed_s)} INVARIANT TRIPPED: {', '.join(s.tripped)}")
        now = self.loop.time()
        if force_report or now - self.last_report >= self.cfg.report_every_s - 1e-6:
            self.last_report = now
            self.print(format_report_line(s, self.progress, self.phase))
        return s

    async def sample_until(self, deadline: float) -> None:
        """Sample every ``sample_every_s`` until ``deadline`` (loop time)."""
        while (left := deadline - self.loop.time()) > 0:
            await asyncio.sleep(min(self.cfg.sample_every_s, left))
            if self.loop.time() < deadline - 0.5:
                await self.sample()

    def on_progress(self, p: ChurnProgress) -> None:
        self.progress = p


async def run_soak(cfg: SoakConfig, out: TextIO = sys.stdout) -> SoakVerdict:
    """Start ``monotape run``, churn it for ``cfg.hours``, settle, judge, stop it. Loopback only.

    Takes about ``warmup_s + hours x 3600 + settle_s`` plus startup and stop; every step is
    bounded, and the server is stopped (or killed) whatever happens.
    """
    with contextlib.ExitStack() as stack:
        data_dir = cfg.data_dir or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="monotape-soak-")
        )
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        server = await _Server.start(cfg, data_dir)
        stopped = False
        try:
            soak = _Soak(cfg, out, server)
            churn_cfg = cfg.churn_config()
            soak.print(
                f"soak: monotape run on {server.url} (metrics :{server.admin_port}), "
                f"churn {cfg.hours:g} h at {cfg.arrival_rate_per_s:g}/s x {cfg.rate_multiple:g}, "
                f"{cfg.rst_share:.0%} RST, mean session {cfg.mean_session_s:g} s, "
                f"max {cfg.max_connections} open; invariants every {cfg.invariant_interval_s:g} s"
            )
            # Baseline: the server up and settled, no terminal yet.
            await asyncio.sleep(cfg.warmup_s)
            baseline = await soak.sample(force_report=True)
            if baseline is None:  # one retry: the baseline is what everything is judged against
                await asyncio.sleep(1.0)
                baseline = await soak.sample(force_report=True)

            soak.phase = "churn"
            soak.last_report = soak.loop.time()
            churn_task = asyncio.create_task(
                run_churn(server.url, churn_cfg, soak.on_progress, token=server.token or None)
            )
            report: ChurnReport | None = None
            try:
                while not churn_task.done():
                    done, _ = await asyncio.wait({churn_task}, timeout=cfg.sample_every_s)
                    if not done:
                        await soak.sample()
                try:
                    report = churn_task.result()
                except (OSError, RuntimeError) as exc:
                    soak.print(f"soak: the churn failed: {exc!r}")
            finally:
                if not churn_task.done():
                    churn_task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await churn_task

            # Every client has left (run_churn closes or cancels all of its sessions).
            soak.phase = "settle"
            await soak.sample(force_report=True)
            await soak.sample_until(soak.loop.time() + cfg.settle_s)
            soak.phase = "final"
            final = await soak.sample(force_report=True)
            trips = await server.invariant_trips(cfg.scrape_timeout_s)

            code = await server.stop(cfg.stop_timeout_s)
            stopped = True
            verdict = judge(
                baseline=baseline,
                samples=soak.samples,
                final=final,
                churn=report,
                tolerances=cfg.tolerances,
                tripped_log_lines=server.tripped,
                invariant_trips=trips,
                server_exit=code,
                missed_scrapes=soak.missed,
                elapsed_s=time.monotonic() - started,
            )
            soak.print(format_verdict(verdict))
            if not verdict.passed:
                soak.print("server output (last lines):\n" + "".join(list(server.tail)[-20:]))
            return verdict
        finally:
            if not stopped:
                await server.kill()


# -- the command line --------------------------------------------------------------------------
def _env_float(name: str) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"soak: {name}={raw!r} is not a number") from None


def _parser() -> argparse.ArgumentParser:
    d = SoakConfig()
    p = argparse.ArgumentParser(
        prog="python -m monotape.loadgen.soak",
        description="Churn the real `monotape run` on loopback for hours, then judge it: "
        "invariants 0 at every sample, every index empty, tasks/fds/RSS back to the baseline "
        "(docs/soak.md). Exit 0 on PASS, 1 on FAIL.",
    )
    p.add_argument("--hours", type=float, help="churn duration (env HOURS; default 1)")
    p.add_argument("--rate", type=float, help="churn rate multiple (env RATE; default 1.3)")
    p.add_argument("--report-every", type=float, default=d.report_every_s, metavar="S")
    p.add_argument("--sample-every", type=float, default=d.sample_every_s, metavar="S")
    p.add_argument("--settle", type=float, default=d.settle_s, metavar="S")
    p.add_argument("--warmup", type=float, default=d.warmup_s, metavar="S")
    p.add_argument("--rst-share", type=float, default=d.rst_share)
    p.add_argument("--arrival-rate", type=float, default=d.arrival_rate_per_s, metavar="PER_S")
    p.add_argument("--mean-session", type=float, default=d.mean_session_s, metavar="S")
    p.add_argument("--max-connections", type=int, default=d.max_connections)
    p.add_argument("--server-rate", type=float, default=d.server_rate, metavar="TICKS_S")
    p.add_argument("--invariant-interval", type=float, default=d.invariant_interval_s)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--data-dir", help="the server's data dir (default: a temporary one)")
    return p


def config_from_args(argv: Sequence[str] | None = None) -> SoakConfig:
    args = _parser().parse_args(argv)
    hours = args.hours if args.hours is not None else _env_float("HOURS")
    rate = args.rate if args.rate is not None else _env_float("RATE")
    fields: Mapping[str, object] = {
        "hours": hours if hours is not None else 1.0,
        "rate_multiple": rate if rate is not None else 1.3,
        "report_every_s": args.report_every,
        "sample_every_s": args.sample_every,
        "settle_s": args.settle,
        "warmup_s": args.warmup,
        "rst_share": args.rst_share,
        "arrival_rate_per_s": args.arrival_rate,
        "mean_session_s": args.mean_session,
        "max_connections": args.max_connections,
        "server_rate": args.server_rate,
        "invariant_interval_s": args.invariant_interval,
        "seed": args.seed,
        "data_dir": args.data_dir,
    }
    try:
        return msgspec.convert(fields, SoakConfig)
    except msgspec.ValidationError as exc:
        raise SystemExit(f"soak: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    cfg = config_from_args(argv)
    try:
        verdict = asyncio.run(run_soak(cfg))
    except KeyboardInterrupt:
        print("soak: interrupted", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 1
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
