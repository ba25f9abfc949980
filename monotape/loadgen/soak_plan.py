"""The soak's plan: its knobs (``SoakConfig``, ``Tolerances``), the command line that fills them
(``make soak``, ``monotape load soak``, docs/soak.md), and ``Sample``, the soak's view of one
scrape of ``/metrics``: of the one-process node, or of a host (``monotape run --writers N``),
whose /metrics carries every process's series under a ``process`` label."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from typing import Annotated, Final

import msgspec
from msgspec import Meta

from monotape import metric_names as m
from monotape.config import HostConfig, invalid_field
from monotape.loadgen.churn import ChurnConfig
from monotape.loadgen.launch import Samples, parse_samples

__all__ = [
    "Sample",
    "SoakConfig",
    "Tolerances",
    "Usage",
    "add_soak_flags",
    "config_from_args",
    "config_from_namespace",
    "parse_metrics",
    "sample_of",
]

Positive = Annotated[float, Meta(gt=0)]
NonNegative = Annotated[float, Meta(ge=0)]
Share = Annotated[float, Meta(ge=0, le=1)]

_PROCESS_RSS: Final = "process_resident_memory_bytes"
_PROCESS_FDS: Final = "process_open_fds"
# The series judged per process on a host, and the Usage field each one fills.
_USAGE: Final = {m.ASYNCIO_TASKS: "tasks", _PROCESS_FDS: "fds", _PROCESS_RSS: "rss_bytes"}


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
    # `monotape run --writers N`: 0 is the one-process node; N > 0 the multi-process host;
    # None (the default) launches `monotape run` with no flag: what the product starts (a host
    # with a writer per core), so `make soak` soaks what people run
    writers: Annotated[int, Meta(ge=0, le=16)] | None = None
    # The churn's knobs as given (`monotape load churn --writers N`): used as they are instead
    # of the ones derived from hours, rate and the rest above.
    churn: ChurnConfig | None = None
    data_dir: str | None = None  # the server's --data-dir; a temporary one by default
    startup_timeout_s: Positive = 60.0
    scrape_timeout_s: Positive = 10.0
    stop_timeout_s: Positive = 30.0
    tolerances: Tolerances = msgspec.field(default_factory=Tolerances)

    @property
    def duration_s(self) -> float:
        return self.churn.duration_s if self.churn is not None else self.hours * 3600.0

    @property
    def writer_count(self) -> int:
        """The writers the soaked ``monotape run`` starts: ``writers``, or for None the
        product default's (``host.writers = "auto"``: the placement faster on this machine)."""
        return HostConfig().writer_count if self.writers is None else self.writers

    @property
    def on_host(self) -> bool:
        return self.writer_count > 0

    def churn_config(self) -> ChurnConfig:
        if self.churn is not None:
            return self.churn
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


class Usage(msgspec.Struct, kw_only=True, frozen=True):
    """One process's tasks, fds and RSS in one scrape of a host (None: it did not say)."""

    tasks: float | None = None
    fds: float | None = None
    rss_bytes: float | None = None


class Sample(msgspec.Struct, kw_only=True, frozen=True):
    """One scrape of /metrics: what the report prints and the verdict judges.

    On a host the node-wide fields are the processes' totals (connections, index entries and
    disconnects summed over writers; an invariant is violated if it is in any writer; the
    write p99 is the worst writer's), and the per-process fields say who: ``processes`` (each
    one's own tasks, fds, RSS: judged against its own baseline), ``up``, ``restarts`` and
    ``served`` (terminals each writer saw leave: the split over writers). Empty on one process.
    """

    elapsed_s: float
    connections: float | None = None
    index_entries: dict[str, float] = msgspec.field(default_factory=dict)
    invariants: dict[str, float] = msgspec.field(default_factory=dict)  # 1 = violated
    tasks: float | None = None
    fds: float | None = None
    rss_bytes: float | None = None
    p99_write_s: float | None = None
    disconnects: dict[str, float] = msgspec.field(default_factory=dict)  # {reason}
    processes: dict[str, Usage] = msgspec.field(default_factory=dict)  # {process}
    up: dict[str, float] = msgspec.field(default_factory=dict)  # monotape_process_up {process}
    restarts: dict[str, float] = msgspec.field(default_factory=dict)  # {"process reason"}
    served: dict[str, float] = msgspec.field(default_factory=dict)  # disconnects by {process}

    @property
    def tripped(self) -> list[str]:
        return sorted(name for name, v in self.invariants.items() if v != 0)


# -- /metrics ----------------------------------------------------------------------------------
def _add(into: dict[str, float], key: str, value: float) -> None:
    into[key] = into.get(key, 0.0) + value


def _total(v: float | None, add: float) -> float:
    return add if v is None else v + add


def sample_of(samples: Samples, elapsed_s: float) -> Sample:
    """The soak's view of one scrape (``launch.parse_samples``: Prometheus' own parser): of one
    process, or of every process of a host (series told apart by their ``process`` label)."""
    conns = tasks = fds = rss = p99 = None
    index: dict[str, float] = {}
    invariants: dict[str, float] = {}
    disconnects: dict[str, float] = {}
    usage: dict[str, dict[str, float]] = {}
    up: dict[str, float] = {}
    restarts: dict[str, float] = {}
    served: dict[str, float] = {}
    for (name, pairs), value in samples.items():
        labels = dict(pairs)
        proc = labels.get("process")
        if name == m.CONNECTIONS:
            conns = _total(conns, value)
        elif name == m.INDEX_ENTRIES:
            _add(index, labels.get("index", ""), value)
        elif name == m.INVARIANT_VIOLATION:
            key = labels.get("invariant", "")
            invariants[key] = max(invariants.get(key, 0.0), value)
        elif name in _USAGE:
            tasks, fds, rss = (
                _total(tasks, value) if name == m.ASYNCIO_TASKS else tasks,
                _total(fds, value) if name == _PROCESS_FDS else fds,
                _total(rss, value) if name == _PROCESS_RSS else rss,
            )
            if proc is not None:
                usage.setdefault(proc, {})[_USAGE[name]] = value
        elif (
            name == m.STAGE_LATENCY
            and labels.get("stage") == "write"
            and labels.get("quantile") == "0.99"
        ):
            p99 = value if p99 is None else max(p99, value)
        elif name == m.DISCONNECTS:
            _add(disconnects, labels.get("reason", ""), value)
            if proc is not None:
                _add(served, proc, value)
        elif name == m.PROCESS_UP and proc is not None:
            up[proc] = value
        elif name == m.PROCESS_RESTARTS and proc is not None:
            _add(restarts, f"{proc} {labels.get('reason', '')}", value)
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
        processes={p: msgspec.convert(u, Usage) for p, u in sorted(usage.items())},
        up=up,
        restarts=restarts,
        served=served,
    )


def parse_metrics(text: str, elapsed_s: float) -> Sample:
    """``sample_of`` one /metrics body."""
    return sample_of(parse_samples(text), elapsed_s)


# -- the command line --------------------------------------------------------------------------
def _env_float(name: str) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"soak: {name}={raw!r} is not a number") from None


def add_soak_flags(p: argparse.ArgumentParser) -> None:
    """The soak's flags, for ``python -m monotape.loadgen.soak`` and ``monotape load soak``."""
    d = SoakConfig()
    p.add_argument("--hours", type=float, help="churn duration (env HOURS; default 1)")
    p.add_argument("--rate", type=float, help="churn rate multiple (env RATE; default 1.3)")
    p.add_argument(
        "--writers",
        type=int,
        default=d.writers,
        metavar="N",
        help="soak `monotape run --writers N` (docs/processes.md); default: `monotape run` "
        "as it starts with no flag, a writer per core; 0: the one-process node",
    )
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m monotape.loadgen.soak",
        description="Churn the real `monotape run` on loopback for hours, then judge it: "
        "invariants 0 at every sample, every index empty, tasks/fds/RSS back to the baseline "
        "(docs/soak.md). Exit 0 on PASS, 1 on FAIL.",
    )
    add_soak_flags(p)
    return p


def config_from_args(argv: Sequence[str] | None = None) -> SoakConfig:
    return config_from_namespace(_parser().parse_args(argv))


# Each SoakConfig field and the flag that sets it (its argparse name: ``report_every`` is
# --report-every), so that a value msgspec refuses names the flag, not "$.report_every_s".
_FLAG_OF: Final = {
    "hours": "hours",
    "rate_multiple": "rate",
    "writers": "writers",
    "report_every_s": "report_every",
    "sample_every_s": "sample_every",
    "settle_s": "settle",
    "warmup_s": "warmup",
    "rst_share": "rst_share",
    "arrival_rate_per_s": "arrival_rate",
    "mean_session_s": "mean_session",
    "max_connections": "max_connections",
    "server_rate": "server_rate",
    "invariant_interval_s": "invariant_interval",
    "seed": "seed",
    "data_dir": "data_dir",
}
# The fields a variable sets when their flag is absent (make soak HOURS=8 RATE=1.3), and the
# value when neither does.
_ENV_OF: Final = {"hours": ("HOURS", 1.0), "rate_multiple": ("RATE", 1.3)}


def config_from_namespace(args: argparse.Namespace) -> SoakConfig:
    """The config from the flags of ``add_soak_flags`` (HOURS and RATE from the environment
    when the flags are absent); SystemExit naming the flag or variable when a value is out of
    range."""
    fields = {field: getattr(args, flag) for field, flag in _FLAG_OF.items()}
    from_env = set()
    for field, (name, default) in _ENV_OF.items():
        if fields[field] is None:
            from_env.add(field)
            value = _env_float(name)
            fields[field] = value if value is not None else default
    try:
        return msgspec.convert(fields, SoakConfig)
    except msgspec.ValidationError as exc:
        field, why = invalid_field(exc)
        if field not in fields:
            raise SystemExit(f"soak: {exc}") from None
        source = (
            f"environment variable {_ENV_OF[field][0]}"
            if field in from_env
            else "argument --" + _FLAG_OF[field].replace("_", "-")
        )
        raise SystemExit(f"soak: {source}: {why}, got {fields[field]}") from None
