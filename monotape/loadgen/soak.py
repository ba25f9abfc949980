"""The soak behind ``make soak``: hours of churn against the real ``monotape run``, then a verdict.

It starts ``monotape run`` as a subprocess on loopback (free ports, a temporary data dir, the
invariants checked every few seconds), samples ``/metrics`` before any terminal connects (the
baseline), runs the churn driver (``churn.run_churn``, in-process, ~6% RSTs) for the duration
while sampling ``/metrics`` every few seconds and printing a report line every
``report_every_s``, lets the server settle once every client has left, samples it one last time,
stops it with SIGTERM (what a service manager sends) and judges (docs/soak.md):

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

The node is the launcher's (``launch.RunningNode``: free ports, its own data dir, tokens,
``/metrics`` parsed by Prometheus' own parser); the knobs and the command line live in
``soak_plan``, the verdict and the report lines in ``soak_verdict``.

By default it soaks what ``monotape run`` starts with no flag, the multi-process host (a writer
per core, docs/processes.md); ``writers`` = N passes ``--writers N``, and 0 soaks the one-process
node. The same churn and the same verdict, on a host read from what it serves:
its /metrics, every process's series under a ``process`` label (the node-wide figures are their
totals; tasks, fds and RSS are judged per process), and the invariants each writer checks and
logs, and the trips its ``/admin/invariants`` sums over every writer (a writer that answer keeps
leaving out, after a few asks, fails the invariants check by name). A host adds one check: no
process restarted and every writer served terminals. Its baseline and final samples are taken
only once every process answered the host's scrape (a few tries), since a process left out of
one would be judged on nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import sys
import time
from collections.abc import Sequence
from typing import Final, TextIO

import msgspec

from monotape.loadgen.churn import ChurnProgress, ChurnReport, run_churn
from monotape.loadgen.launch import RunningNode, alaunch
from monotape.loadgen.soak_plan import (
    Sample,
    SoakConfig,
    Tolerances,
    config_from_args,
    parse_metrics,
    sample_of,
)
from monotape.loadgen.soak_verdict import (
    MAX_TRIP_LINES,
    Check,
    SoakVerdict,
    format_report_line,
    format_verdict,
    hms,
    judge,
)

__all__ = [
    "Check",
    "Sample",
    "SoakConfig",
    "SoakVerdict",
    "Tolerances",
    "config_from_args",
    "format_report_line",
    "format_verdict",
    "judge",
    "main",
    "parse_metrics",
    "run_soak",
]

_TRIPPED: Final = "invariant_tripped"
_WHOLE_TRIES: Final = 4  # scrapes for a baseline or final sample that every process is in
# Asks of GET /admin/invariants, a second apart, while a writer is missing from its answer: a
# writer still missing after these fails the invariants check (its trips are unknown).
_TRIPS_TRIES: Final = 4


# -- the server --------------------------------------------------------------------------------
class _Trips:
    """The node's ``invariant_tripped`` log lines, counted from the launcher's drain thread."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def __call__(self, line: str) -> None:
        if _TRIPPED in line:
            self.count += 1
            if len(self.lines) < MAX_TRIP_LINES:
                self.lines.append(line.strip()[:500])


async def _start(cfg: SoakConfig, trips: _Trips) -> RunningNode:
    """``monotape run`` with the invariants checked every ``invariant_interval_s``, and tokens
    valid for the whole run (with an hour to spare). Without one (other keys configured) the
    churn's upgrades are refused and the verdict says so."""
    ttl_s = cfg.warmup_s + cfg.duration_s + cfg.churn_config().drain_s + cfg.settle_s + 3600
    env = {"MONOTAPE_SERVER__INVARIANT_INTERVAL_S": str(cfg.invariant_interval_s)}
    if cfg.on_host:
        # Each role's scrape gets half of ours, so the host answers before we give up on it.
        env["MONOTAPE_HOST__SCRAPE_TIMEOUT_S"] = f"{cfg.scrape_timeout_s / 2:g}"
    return await alaunch(
        cfg.data_dir,
        "--rate", f"{cfg.server_rate:g}", *cfg.server_args,
        writers=cfg.writers,  # None: no flag, what `monotape run` starts; 0: the node
        env=env,
        timeout_s=cfg.startup_timeout_s,
        keep_lines=0,  # hours of output: the launcher's tail is enough
        on_line=trips,
        token_ttl_s=ttl_s,
        sub="monotape-soak",
    )  # fmt: skip


def _complete(s: Sample) -> bool:
    """Every process the host runs answered its scrape (always true of one process)."""
    return s.up.keys() <= s.processes.keys()


async def _invariant_trips(
    node: RunningNode, timeout_s: float, tries: int = _TRIPS_TRIES, pause_s: float = 1.0
) -> tuple[dict[str, int] | None, list[str]]:
    """``trips`` of ``GET /admin/invariants`` (every trip since start, even one that recovered
    between two samples), and the writers a host's answer left out (``missing``). Asked again,
    ``pause_s`` apart, up to ``tries`` times while some writer is missing (one slow scrape);
    still missing at the end: (None, the writers), and the caller fails the check, since a
    missing writer's trips would read as none. (None, []): the admin API did not answer."""
    missing: list[str] = []
    for attempt in range(tries):
        if attempt:
            await asyncio.sleep(pause_s)
        try:
            body = await node.aget("/admin/invariants", node.admin_token, timeout_s)
            decoded = msgspec.json.decode(body)
            missing = [str(name) for name in decoded.get("missing") or ()]
            if not missing:
                trips = decoded.get("trips", {})
                return {str(k): int(v) for k, v in trips.items()}, []
        except (OSError, TimeoutError, ValueError, AttributeError, msgspec.DecodeError):
            if not missing:
                return None, []
    return None, missing


def _fail_missing(verdict: SoakVerdict, missing: Sequence[str], tries: int) -> SoakVerdict:
    """The verdict with its invariants check failed, naming the writers /admin/invariants left
    out every time: their trips are unknown, and unknown is not none."""
    if not missing:
        return verdict
    failed = Check(
        "invariants",
        False,
        f"{', '.join(missing)} missing from GET /admin/invariants in {tries} asks a second "
        "apart: its trips are unknown",
    )
    checks = [failed if c.name == "invariants" else c for c in verdict.checks]
    return msgspec.structs.replace(verdict, checks=checks, passed=False)


# -- the run -----------------------------------------------------------------------------------
class _Soak:
    def __init__(self, cfg: SoakConfig, out: TextIO, server: RunningNode) -> None:
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
            elapsed = self.elapsed()
            s = sample_of(await self.server.ametrics(self.cfg.scrape_timeout_s), elapsed)
        except (OSError, TimeoutError, ValueError) as exc:
            self.missed += 1
            self.print(f"soak {hms(self.elapsed())} {self.phase:<7} /metrics failed: {exc!r}")
            return None
        self.samples.append(s)
        if s.tripped:
            self.print(f"soak {hms(s.elapsed_s)} INVARIANT TRIPPED: {', '.join(s.tripped)}")
        now = self.loop.time()
        if force_report or now - self.last_report >= self.cfg.report_every_s - 1e-6:
            self.last_report = now
            self.print(format_report_line(s, self.progress, self.phase))
        return s

    async def whole_sample(self) -> Sample | None:
        """A sample every process is in: the baseline and the final are judged per process.
        A few tries, a second apart; else the last one (the verdict names who is missing)."""
        s = await self.sample(force_report=True)
        for _ in range(_WHOLE_TRIES - 1):
            if s is not None and _complete(s):
                break
            await asyncio.sleep(1.0)
            s = await self.sample(force_report=True)
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
    started = time.monotonic()
    trips = _Trips()
    server = await _start(cfg, trips)
    stopped = False
    try:
        soak = _Soak(cfg, out, server)
        churn_cfg = cfg.churn_config()
        what = "monotape run" + ("" if cfg.writers is None else f" --writers {cfg.writers}")
        if cfg.writers is None:
            n = cfg.writer_count
            what += f" (the default: {n} writer{'s' if n != 1 else ''}, one per core)"
        soak.print(
            f"soak: {what} on {server.bare_url} (metrics :{server.admin_port}), "
            f"churn {hms(churn_cfg.duration_s)} at {churn_cfg.arrival_rate_per_s:g}/s "
            f"x {churn_cfg.rate_multiple:g}, {churn_cfg.rst_share:.0%} RST, mean session "
            f"{churn_cfg.mean_session_s:g} s, max {churn_cfg.max_connections} open; "
            f"invariants every {cfg.invariant_interval_s:g} s"
        )
        # Baseline: the server up and settled, no terminal yet.
        await asyncio.sleep(cfg.warmup_s)
        baseline = await soak.whole_sample()  # what everything is judged against

        soak.phase = "churn"
        soak.last_report = soak.loop.time()
        churn_task = asyncio.create_task(
            run_churn(server.bare_url, churn_cfg, soak.on_progress, token=server.token or None)
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
        final = await soak.whole_sample()
        invariant_trips, missing = await _invariant_trips(server, cfg.scrape_timeout_s)

        # SIGTERM, what a service manager sends (docs/deploy.md): the verdict judges that path.
        code = await server.astop(cfg.stop_timeout_s, signal.SIGTERM)
        stopped = True
        verdict = judge(
            baseline=baseline,
            samples=soak.samples,
            final=final,
            churn=report,
            tolerances=cfg.tolerances,
            tripped_log_lines=trips.lines,
            invariant_trips=invariant_trips,
            server_exit=code,
            missed_scrapes=soak.missed,
            elapsed_s=time.monotonic() - started,
            writers=cfg.writer_count,
        )
        verdict = _fail_missing(verdict, missing, _TRIPS_TRIES)
        soak.print(format_verdict(verdict))
        if not verdict.passed:
            soak.print("server output (last lines):\n" + "".join(list(server.tail)[-20:]))
        return verdict
    finally:
        if not stopped:
            await server.astop(0.0, signal.SIGKILL)


# -- the command line --------------------------------------------------------------------------
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
