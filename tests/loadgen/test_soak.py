"""The soak: its verdict logic on synthetic samples, and a compressed soak (~1 minute of churn
with 6% RSTs) against the real `monotape run` subprocess on loopback."""

from __future__ import annotations

import io
from pathlib import Path

import msgspec
import pytest

from monotape.loadgen.churn import ChurnProgress, ChurnReport
from monotape.loadgen.soak import (
    Sample,
    SoakConfig,
    SoakVerdict,
    Tolerances,
    config_from_args,
    format_report_line,
    format_verdict,
    judge,
    parse_metrics,
    run_soak,
)

MB = 1024 * 1024
INDEXES = (
    "connections",
    "conn_subscriptions",
    "conn_signature",
    "signature_conns",
    "signature_members",
    "symbol_signatures",
    "conn_priority",
    "symbol_priority_conns",
    "conn_rate",
    "rate_groups",
)
INVARIANTS = ("native_entries", "no_dangling_entries", "subscription_cardinality")


def sample(
    t: float,
    *,
    conns: float = 0,
    tasks: float = 7,
    fds: float = 18,
    rss_mb: float = 80,
    index: dict[str, float] | None = None,
    tripped: tuple[str, ...] = (),
) -> Sample:
    return Sample(
        elapsed_s=t,
        connections=conns,
        index_entries={name: (index or {}).get(name, 0.0) for name in INDEXES},
        invariants={name: 1.0 if name in tripped else 0.0 for name in INVARIANTS},
        tasks=tasks,
        fds=fds,
        rss_bytes=rss_mb * MB,
        p99_write_s=0.002,
        disconnects={"closed": 900.0, "connection_lost": 60.0},
    )


def churn_report(
    *, errors: int = 0, cancelled: int = 0, rejected: int = 0, timeouts: int | None = None
) -> ChurnReport:
    timeouts = rejected if timeouts is None else timeouts
    gave_up = min(rejected, 1)
    return ChurnReport(
        url="ws://127.0.0.1:1/",
        elapsed_s=60.0,
        target_arrivals_per_s=130.0,
        started=1000 + errors,
        opened=1000,
        closed=940,
        rst=60,
        errors=errors,
        # every attempt ends opened, refused (503), timed out, or failed; a give-up ends a retry
        attempts=1000 + rejected + timeouts + errors,
        rejected=rejected,
        gave_up=gave_up,
        timeouts=timeouts,
        server_closed=errors,
        skipped=0,
        cancelled=cancelled,
        peak_open=200,
        subscribes=3000,
        changes=2000,
        messages=100_000,
        error_samples=["server closed the session: close handshake"] * min(errors, 1),
    )


def verdict(
    *,
    during: list[Sample] | None = None,
    final: Sample | None = None,
    churn: ChurnReport | None = None,
    trips_logged: tuple[str, ...] = (),
    invariant_trips: dict[str, int] | None = None,
    server_exit: int | None = 0,
    missed: int = 0,
) -> SoakVerdict:
    base = sample(5)
    end = final if final is not None else sample(200, rss_mb=92)
    samples = [base, *(during or [sample(50, conns=200, tasks=300, fds=220, rss_mb=95)]), end]
    return judge(
        baseline=base,
        samples=samples,
        final=end,
        churn=churn or churn_report(),
        tolerances=Tolerances(),
        tripped_log_lines=trips_logged,
        invariant_trips=invariant_trips,
        server_exit=server_exit,
        missed_scrapes=missed,
    )


def failed(v: SoakVerdict) -> list[str]:
    return [c.name for c in v.failed]


# -- the verdict logic, on synthetic samples ----------------------------------------------------
def test_a_clean_run_passes() -> None:
    v = verdict(invariant_trips={"no_dangling_entries": 0})
    assert v.passed, v.checks
    assert failed(v) == []
    names = {c.name for c in v.checks}
    assert {"invariants", "connections", "index_empty", "tasks", "fds", "rss", "churn"} <= names


def test_an_invariant_tripped_at_one_sample_fails_even_if_it_recovered() -> None:
    v = verdict(
        during=[
            sample(50, conns=200, tasks=300, fds=220),
            sample(55, conns=180, tripped=("no_dangling_entries",)),
            sample(60, conns=150),
        ]
    )
    assert not v.passed
    assert failed(v) == ["invariants"]
    detail = v.check("invariants").detail
    assert "no_dangling_entries=1 in 1 of 5 samples" in detail
    assert "0:00:55" in detail


def test_a_trip_seen_only_by_the_server_fails() -> None:
    assert failed(verdict(invariant_trips={"subscription_cardinality": 2})) == ["invariants"]
    logged = verdict(trips_logged=('{"event": "invariant_tripped", "invariant": "x"}',))
    assert failed(logged) == ["invariants"]
    assert "invariant_tripped" in logged.check("invariants").detail


def test_a_leaked_index_entry_fails_naming_the_index() -> None:
    v = verdict(final=sample(200, index={"signature_members": 3, "symbol_signatures": 1}))
    assert failed(v) == ["index_empty"]
    assert v.check("index_empty").detail == "signature_members=3, symbol_signatures=1 (want 0)"


def test_a_connection_left_open_fails() -> None:
    v = verdict(final=sample(200, conns=2, index={"connections": 2}))
    assert failed(v) == ["connections", "index_empty"]
    assert "2 open" in v.check("connections").detail


def test_an_fd_leak_fails_with_the_numbers() -> None:
    v = verdict(final=sample(200, fds=18 + 3))
    assert failed(v) == ["fds"]
    assert v.check("fds").detail == "21 vs baseline 18 (limit 20)"
    assert verdict(final=sample(200, fds=18 + 2)).passed  # the documented slack


def test_a_task_leak_fails_with_the_numbers() -> None:
    v = verdict(final=sample(200, tasks=7 + 3))
    assert failed(v) == ["tasks"]
    assert v.check("tasks").detail == "10 vs baseline 7 (limit 9)"
    assert verdict(final=sample(200, tasks=7 + 2)).passed


def test_rss_over_the_tolerance_fails() -> None:
    limit_mb = 80 * 1.25 + 32  # 132 MB
    assert verdict(final=sample(200, rss_mb=limit_mb - 0.5)).passed
    v = verdict(final=sample(200, rss_mb=limit_mb + 1))
    assert failed(v) == ["rss"]
    assert v.check("rss").detail == "133.0 MB vs baseline 80.0 MB (limit 132.0 MB)"


def test_churn_errors_and_stragglers_fail() -> None:
    v = verdict(churn=churn_report(errors=4, cancelled=1))
    assert failed(v) == ["churn"]
    assert "4 errors" in v.check("churn").detail
    assert "1 sessions cancelled" in v.check("churn").detail


def test_designed_503_refusals_are_reported_apart_and_never_fail() -> None:
    # A busy machine makes the node shed upgrades (503 + Retry-After) and answer some handshakes
    # late: the churn retries both, and the verdict names them without failing on them.
    v = verdict(churn=churn_report(rejected=3))
    assert v.passed, format_verdict(v)
    assert "503 refusals 3, handshake timeouts 3" in v.check("churn").detail


def test_a_node_that_stops_answering_upgrades_fails_past_five_percent_of_attempts() -> None:
    # Timeouts are retried, so a node whose upgrades hang would otherwise pass: 5% of the
    # attempts (Tolerances.max_unanswered_share) may time out or give up, no more.
    ok = churn_report(rejected=2, timeouts=50)  # 50 + 1 gave up of 1052 attempts: 4.8%
    assert ok.timeouts + ok.gave_up <= 0.05 * ok.attempts
    assert verdict(churn=ok).passed
    bad = churn_report(rejected=2, timeouts=60)  # 60 + 1 of 1062: 5.7%
    v = verdict(churn=bad)
    assert failed(v) == ["churn"]
    assert "60 handshake timeouts + 1 gave up = 5.7% of 1062 upgrade attempts (limit 5%)" in (
        v.check("churn").detail
    )
    # Nothing answered at all: every attempt timed out, no session opened.
    dead = msgspec.structs.replace(
        churn_report(), opened=0, closed=0, rst=0, attempts=900, timeouts=900, gave_up=300
    )
    detail = verdict(churn=dead).check("churn").detail
    assert "no session opened" in detail and "900 handshake timeouts" in detail


def test_server_exit_and_missing_samples_fail() -> None:
    assert failed(verdict(server_exit=1)) == ["server_exit"]
    assert failed(verdict(server_exit=None)) == ["server_exit"]
    assert failed(verdict(missed=3)) == ["scrapes"]  # 3 of 6 scrapes missed
    v = judge(
        baseline=None, samples=[], final=None, churn=None, tolerances=Tolerances(), server_exit=0
    )
    assert not v.passed
    assert {"invariants", "scrapes", "connections", "index_empty", "tasks", "fds", "rss"} <= set(
        failed(v)
    )


def test_several_failures_are_all_listed() -> None:
    v = verdict(
        during=[sample(50, tripped=("no_dangling_entries",))],
        final=sample(200, fds=40, index={"conn_subscriptions": 5}),
    )
    assert failed(v) == ["invariants", "index_empty", "fds"]


# -- parsing and the report line -----------------------------------------------------------------
METRICS = """\
# TYPE monotape_connections gauge
monotape_connections 3.0
# TYPE monotape_index_entries gauge
monotape_index_entries{index="connections"} 3.0
monotape_index_entries{index="signature_members"} 41.0
# TYPE monotape_invariant_violation gauge
monotape_invariant_violation{invariant="no_dangling_entries"} 1.0
monotape_invariant_violation{invariant="subscription_cardinality"} 0.0
# TYPE monotape_asyncio_tasks gauge
monotape_asyncio_tasks 12.0
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 8.388608e+07
# TYPE process_open_fds gauge
process_open_fds 25.0
# TYPE monotape_stage_latency_seconds gauge
monotape_stage_latency_seconds{quantile="0.99",stage="encode"} 0.5
monotape_stage_latency_seconds{quantile="0.99",stage="write"} 0.0025
monotape_stage_latency_seconds{quantile="0.5",stage="write"} 0.001
# TYPE monotape_disconnects counter
monotape_disconnects_total{reason="closed"} 90.0
monotape_disconnects_total{reason="connection_lost"} 6.0
"""


def test_parse_metrics_and_the_report_line() -> None:
    s = parse_metrics(METRICS, 3725.0)
    assert s.connections == 3
    assert s.index_entries == {"connections": 3, "signature_members": 41}
    assert s.tripped == ["no_dangling_entries"]
    assert (s.tasks, s.fds, s.rss_bytes) == (12, 25, 80 * MB)
    assert s.p99_write_s == 0.0025
    assert s.disconnects == {"closed": 90, "connection_lost": 6}
    progress = ChurnProgress(
        elapsed_s=3700, open=3, opened=500, closed=450, rst=30, errors=0, skipped=0
    )
    line = format_report_line(s, progress, "churn")
    for part in (
        "1:02:05",
        "open     3",
        "opened     500",
        "rst     30",
        "errors   0",
        "inv TRIPPED:no_dangling_entries",
        "rss 80.0MB",
        "fds 25",
        "tasks 12",
        "p99w 2.50ms",
    ):
        assert part in line, (part, line)


def test_hours_and_rate_from_the_environment_when_flags_are_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOURS", "0.5")
    monkeypatch.setenv("RATE", "2")
    cfg = config_from_args([])
    assert (cfg.hours, cfg.rate_multiple) == (0.5, 2.0)
    cfg = config_from_args(["--hours", "0.05", "--rate", "1.3"])
    assert (cfg.hours, cfg.rate_multiple) == (0.05, 1.3)
    monkeypatch.setenv("HOURS", "")  # `make soak` passes an empty HOURS when none is given
    monkeypatch.setenv("RATE", "")
    cfg = config_from_args([])
    assert (cfg.hours, cfg.rate_multiple) == (1.0, 1.3)
    assert cfg.churn_config().max_total >= 2 * 130 * 3600  # never the binding cap


# -- the compressed soak against the real server --------------------------------------------------
@pytest.mark.e2e
@pytest.mark.slow
async def test_compressed_soak_leaves_the_server_exactly_as_it_found_it(tmp_path: Path) -> None:
    cfg = SoakConfig(
        # 54 s of churn, ~7,000 sessions: the exact checks (indexes empty, tasks and fds back
        # to the baseline + 2) catch a leak of one per session at any length; only the RSS
        # bound (x1.25 + 32 MB, ~55 MB here) needs volume: ~8 KB a session still trips it.
        hours=0.015,
        rate_multiple=1.3,
        rst_share=0.06,
        arrival_rate_per_s=100.0,
        mean_session_s=1.5,  # ~200 open at 130 arrivals/s: modest, on 2 cores beside the server
        mean_change_interval_s=0.5,  # several subscription changes per session
        max_connections=300,
        report_every_s=15.0,
        sample_every_s=2.0,
        invariant_interval_s=2.0,
        warmup_s=5.0,
        settle_s=12.0,
        data_dir=str(tmp_path / "data"),
        writers=0,  # the one-process node: tests/loadgen/test_soak_host.py soaks the host
    )
    out = io.StringIO()
    v = await run_soak(cfg, out)
    text = out.getvalue()
    print(text)  # the report lines and the verdict, shown by `pytest -rA` or on failure
    assert v.passed, text

    # Invariants: present and 0 at every sample, and never tripped in between.
    assert len(v.samples) >= 25, text  # every 2 s over ~70 s; a busy machine scrapes late
    for s in v.samples:
        assert set(s.invariants) == set(INVARIANTS), s
        assert s.tripped == [], (s, text)
    assert v.invariant_trips is not None
    assert not any(v.invariant_trips.values()), v.invariant_trips
    assert v.tripped_log_lines == []

    # Every index exactly empty, no connection left.
    assert v.baseline is not None and v.final is not None
    assert v.final.connections == 0
    assert set(v.final.index_entries) == set(INDEXES)
    assert all(n == 0 for n in v.final.index_entries.values()), v.final.index_entries

    # Tasks and fds back to the baseline, RSS within the tolerance.
    b, f, tol = v.baseline, v.final, cfg.tolerances
    assert b.tasks is not None and f.tasks is not None and f.tasks <= b.tasks + tol.task_slack
    assert b.fds is not None and f.fds is not None and f.fds <= b.fds + tol.fd_slack
    assert b.rss_bytes is not None and f.rss_bytes is not None
    assert f.rss_bytes <= b.rss_bytes * tol.rss_ratio + tol.rss_slack_mb * MB

    # The churn really ran and exercised both ways of leaving, as the server saw them.
    assert v.churn is not None
    assert v.churn.errors == 0 and v.churn.cancelled == 0, v.churn.error_samples
    # Every session that started either opened or, refused with 503 + Retry-After until its
    # planned end, gave up (the node shedding on a busy machine: by design, not an error).
    assert v.churn.opened + v.churn.gave_up == v.churn.started, v.churn
    assert v.churn.opened > 1_000 and v.churn.closed > 0 and v.churn.rst > 0
    assert max(s.connections or 0 for s in v.samples) > 50  # real concurrency, not a trickle
    assert f.disconnects.get("closed", 0) > 0, f.disconnects
    assert f.disconnects.get("connection_lost", 0) > 0, f.disconnects
    assert v.server_exit == 0
    assert "soak verdict: PASS" in text
