"""The soak against the multi-process host (``monotape run --writers 2``): the verdict read from
a host's /metrics (every process under a ``process`` label), on synthetic samples, and a short
soak against the real host, judged by the same verdict with the same bounds."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from monotape import metric_names as m
from monotape.config import auto_placement
from monotape.loadgen.churn import ChurnReport
from monotape.loadgen.soak import SoakConfig, _fail_missing, _invariant_trips, run_soak
from monotape.loadgen.soak_plan import Sample, Tolerances, Usage, parse_metrics
from monotape.loadgen.soak_verdict import NO_TRIPS_ANSWER, SoakVerdict, judge

MB = 1024 * 1024
WRITERS = ("writer-0", "writer-1")
OTHERS = ("sequencer", "handler-A", "handler-B", "venue")
INDEXES = ("connections", "conn_subscriptions", "signature_members")
INVARIANTS = ("native_entries", "no_dangling_entries", "subscription_cardinality")


# -- reading a host's /metrics -------------------------------------------------------------------
HOST_METRICS = f"""
# TYPE {m.CONNECTIONS} gauge
{m.CONNECTIONS}{{process="writer-0"}} 3
{m.CONNECTIONS}{{process="writer-1"}} 4
# TYPE {m.INDEX_ENTRIES} gauge
{m.INDEX_ENTRIES}{{index="connections",process="writer-0"}} 3
{m.INDEX_ENTRIES}{{index="connections",process="writer-1"}} 4
{m.INDEX_ENTRIES}{{index="signature_members",process="writer-1"}} 0
# TYPE {m.INVARIANT_VIOLATION} gauge
{m.INVARIANT_VIOLATION}{{invariant="no_dangling_entries",process="writer-0"}} 0
{m.INVARIANT_VIOLATION}{{invariant="no_dangling_entries",process="writer-1"}} 1
# TYPE {m.ASYNCIO_TASKS} gauge
{m.ASYNCIO_TASKS}{{process="writer-0"}} 9
{m.ASYNCIO_TASKS}{{process="writer-1"}} 11
# TYPE process_open_fds gauge
process_open_fds{{process="writer-0"}} 17
process_open_fds{{process="sequencer"}} 29
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes{{process="writer-0"}} 7.0e+07
process_resident_memory_bytes{{process="sequencer"}} 6.0e+07
# TYPE {m.DISCONNECTS} counter
{m.DISCONNECTS}{{reason="closed",process="writer-0"}} 10
{m.DISCONNECTS}{{reason="closed",process="writer-1"}} 20
{m.DISCONNECTS}{{reason="connection_lost",process="writer-1"}} 2
# TYPE {m.PROCESS_UP} gauge
{m.PROCESS_UP}{{process="writer-0",role="writer"}} 1
{m.PROCESS_UP}{{process="writer-1",role="writer"}} 0
{m.PROCESS_UP}{{process="sequencer",role="sequencer"}} 1
# TYPE {m.PROCESS_RESTARTS} counter
{m.PROCESS_RESTARTS}{{process="writer-1",role="writer",reason="SIGKILL"}} 1
"""


def test_a_hosts_metrics_become_totals_and_per_process_figures() -> None:
    s = parse_metrics(HOST_METRICS, 12.0)
    assert s.connections == 7  # summed over writers, not the last one read
    assert s.index_entries == {"connections": 7, "signature_members": 0}
    assert s.invariants == {"no_dangling_entries": 1}  # violated in one writer: violated
    assert s.tripped == ["no_dangling_entries"]
    assert (s.tasks, s.fds, s.rss_bytes) == (20, 46, 1.3e8)
    assert s.processes == {
        "sequencer": Usage(fds=29, rss_bytes=6.0e7),
        "writer-0": Usage(tasks=9, fds=17, rss_bytes=7.0e7),
        "writer-1": Usage(tasks=11),
    }
    assert s.disconnects == {"closed": 30, "connection_lost": 2}
    assert s.served == {"writer-0": 10, "writer-1": 22}
    assert s.up == {"writer-0": 1, "writer-1": 0, "sequencer": 1}
    assert s.restarts == {"writer-1 SIGKILL": 1}


def test_one_process_metrics_have_no_per_process_figures() -> None:
    s = parse_metrics(
        f'{m.CONNECTIONS} 2\nprocess_open_fds 18\n{m.DISCONNECTS}{{reason="closed"}} 5\n', 1.0
    )
    assert (s.connections, s.fds, s.disconnects) == (2, 18, {"closed": 5})
    assert (s.processes, s.up, s.restarts, s.served) == ({}, {}, {}, {})


# -- the verdict on a host, on synthetic samples -------------------------------------------------
def host_sample(
    t: float,
    *,
    conns: float = 0,
    usage: dict[str, Usage] | None = None,
    served: float = 0,
    restarts: dict[str, float] | None = None,
    down: tuple[str, ...] = (),
    silent: tuple[str, ...] = (),
) -> Sample:
    processes = {
        **{w: Usage(tasks=9, fds=17, rss_bytes=70 * MB) for w in WRITERS},
        **{p: Usage(fds=15, rss_bytes=50 * MB) for p in OTHERS},
        **(usage or {}),
    }
    for p in silent:
        del processes[p]
    return Sample(
        elapsed_s=t,
        connections=conns,
        index_entries={name: 0.0 for name in INDEXES},
        invariants={name: 0.0 for name in INVARIANTS},
        tasks=sum(u.tasks or 0 for u in processes.values()),
        fds=sum(u.fds or 0 for u in processes.values()),
        rss_bytes=sum(u.rss_bytes or 0 for u in processes.values()),
        disconnects={"closed": 2 * served},
        processes=processes,
        up={p: 0.0 if p in down else 1.0 for p in (*WRITERS, *OTHERS)},
        restarts=restarts or {},
        served={w: served for w in WRITERS},
    )


def churned() -> ChurnReport:
    return ChurnReport(
        url="ws://127.0.0.1:1/",
        elapsed_s=60.0,
        target_arrivals_per_s=130.0,
        started=1000,
        opened=1000,
        closed=940,
        rst=60,
        errors=0,
        attempts=1000,
        rejected=0,
        gave_up=0,
        timeouts=0,
        server_closed=0,
        skipped=0,
        cancelled=0,
        peak_open=200,
        subscribes=3000,
        changes=2000,
        messages=100_000,
        error_samples=[],
    )


def host_verdict(
    final: Sample | None = None, writers: int = 2, invariant_trips: dict[str, int] | None = None
) -> SoakVerdict:
    base = host_sample(5)
    end = final if final is not None else host_sample(200, served=500)
    return judge(
        baseline=base,
        samples=[base, host_sample(50, conns=200, served=100), end],
        final=end,
        churn=churned(),
        tolerances=Tolerances(),
        invariant_trips=invariant_trips,  # None: /admin/invariants lacked a writer
        writers=writers,
    )


def failed(v: SoakVerdict) -> list[str]:
    return [c.name for c in v.failed]


def test_a_clean_host_run_passes_with_the_one_process_verdicts_checks() -> None:
    v = host_verdict()
    assert v.passed, v.checks
    one = judge(
        baseline=host_sample(5),
        samples=[host_sample(5)],
        final=host_sample(9),
        churn=churned(),
        tolerances=Tolerances(),
    )
    # The same verdict shape: the same checks, in the same order, for both kinds of node.
    assert [c.name for c in v.checks] == [c.name for c in one.checks]
    assert one.check("processes").detail == "one process (no host)"
    assert "terminals served: writer-0 500, writer-1 500" in v.check("processes").detail
    assert NO_TRIPS_ANSWER in v.check("invariants").detail
    judged = host_verdict(invariant_trips={"no_dangling_entries": 0})
    assert (
        "(each the worst writer's), no trip in /admin/invariants"
        in judged.check("invariants").detail
    )
    assert v.check("fds").detail.startswith("6 processes within")


def test_one_process_of_a_host_over_its_own_bound_fails_and_is_named() -> None:
    # The sequencer's fds and one writer's RSS, each judged against its own baseline: their
    # sum over 6 processes would hide both under the other processes' slack.
    end = host_sample(
        200,
        served=500,
        usage={
            "sequencer": Usage(fds=18, rss_bytes=50 * MB),
            "writer-1": Usage(tasks=9, fds=17, rss_bytes=130 * MB),
        },
    )
    v = host_verdict(end)
    assert failed(v) == ["fds", "rss"]
    assert v.check("fds").detail == "sequencer 18 vs baseline 15 (limit 17)"
    assert v.check("rss").detail == "writer-1 130.0 MB vs baseline 70.0 MB (limit 119.5 MB)"


def test_a_task_leak_in_one_writer_fails() -> None:
    end = host_sample(
        200, served=500, usage={"writer-0": Usage(tasks=40, fds=17, rss_bytes=70 * MB)}
    )
    v = host_verdict(end)
    assert failed(v) == ["tasks"]
    assert v.check("tasks").detail == "writer-0 40 vs baseline 9 (limit 11)"


def test_a_restarted_or_down_process_fails_the_processes_check() -> None:
    v = host_verdict(host_sample(200, served=500, restarts={"writer-1 SIGKILL": 1}))
    assert failed(v) == ["processes"]
    assert "restarted: writer-1 SIGKILL x1" in v.check("processes").detail
    v = host_verdict(host_sample(200, served=500, down=("handler-B",)))
    assert failed(v) == ["processes"]
    assert "down at the end: handler-B" in v.check("processes").detail


def test_a_writer_that_served_no_terminal_was_not_soaked() -> None:
    third = {"writer-2": Usage(tasks=9, fds=17, rss_bytes=70 * MB)}  # up, never got a terminal
    base, end = host_sample(5, usage=third), host_sample(200, served=500, usage=third)
    v = judge(
        baseline=base,
        samples=[base, end],
        final=end,
        churn=churned(),
        tolerances=Tolerances(),
        writers=3,
    )
    assert failed(v) == ["processes"]
    assert "served no terminal: writer-2" in v.check("processes").detail


def test_a_writer_missing_from_the_final_scrape_is_never_judged_empty() -> None:
    v = host_verdict(host_sample(200, served=500, silent=("writer-1",)))
    assert {"connections", "index_empty", "tasks", "fds", "rss"} <= set(failed(v))
    assert v.check("connections").detail == "no final sample from writer-1"
    assert "no baseline or no final value from writer-1" in v.check("fds").detail


# -- a short soak against the real host ----------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.slow
async def test_compressed_soak_against_two_writers_passes_the_same_verdict(
    tmp_path: Path,
) -> None:
    # Shorter than the one-process soak (25 s of churn, ~3,000 sessions): the host starts 6
    # processes on a shared 2-core machine, and make test must stay short. The same churn
    # shape and bounds; a leak of a task, an fd or an index entry per session fails at any
    # length (each process is judged against its own baseline).
    cfg = SoakConfig(
        writers=2,
        hours=0.007,
        rate_multiple=1.3,
        rst_share=0.06,
        arrival_rate_per_s=100.0,
        mean_session_s=1.5,
        mean_change_interval_s=0.5,
        max_connections=300,
        report_every_s=10.0,
        sample_every_s=2.0,
        invariant_interval_s=2.0,
        warmup_s=5.0,
        settle_s=10.0,
        data_dir=str(tmp_path / "data"),
    )
    out = io.StringIO()
    v = await run_soak(cfg, out)
    text = out.getvalue()
    print(text)
    assert v.passed, text
    assert "monotape run --writers 2" in text

    # Invariants from both writers at every sample, never tripped. A host's scrape takes a
    # second or two on a busy machine: count samples taken while terminals were open, not a rate.
    assert len(v.samples) >= 6, text
    assert sum(1 for s in v.samples if (s.connections or 0) > 50) >= 2, text
    for s in v.samples:
        assert set(s.invariants) == set(INVARIANTS) and s.tripped == [], s
    assert v.tripped_log_lines == []
    # The host's /admin/invariants: every writer's trips, summed, none.
    assert v.invariant_trips is not None and not any(v.invariant_trips.values()), text
    assert "no trip in /admin/invariants" in v.check("invariants").detail

    # Every process judged against its own baseline; both writers present at both ends.
    assert v.baseline is not None and v.final is not None
    assert set(WRITERS) | {"sequencer", "venue"} <= set(v.final.processes)
    assert set(v.baseline.processes) == set(v.final.processes) == set(v.final.up)
    assert v.final.connections == 0
    assert all(n == 0 for n in v.final.index_entries.values()), v.final.index_entries

    # The churn ran, terminals landed on both writers, nothing restarted.
    assert v.churn is not None and v.churn.errors == 0 and v.churn.opened > 500, v.churn
    assert all(v.final.served[w] > 0 for w in WRITERS), v.final.served
    assert not any(v.final.restarts.values()), v.final.restarts
    assert v.final.disconnects.get("connection_lost", 0) > 0, v.final.disconnects
    assert v.server_exit == 0


def test_monotape_load_soak_writers_2_reads_into_the_soaks_config() -> None:
    from monotape.cli import build_parser
    from monotape.loadgen.soak_plan import config_from_namespace

    args = build_parser().parse_args(["load", "soak", "--writers", "2", "--hours", "0.5"])
    assert args.func.__name__ == "cmd_load_soak"
    cfg = config_from_namespace(args)
    assert (cfg.writers, cfg.hours, cfg.on_host) == (2, 0.5, True)
    # No flag: the soak launches `monotape run` as people do: "auto", the placement faster here
    # (the one-process node below 3 cores, else the host with a writer per core)
    default = config_from_namespace(build_parser().parse_args(["load", "soak"]))
    writers = auto_placement(len(os.sched_getaffinity(0)))
    assert (default.writers, default.writer_count, default.on_host) == (None, writers, writers > 0)
    node = config_from_namespace(build_parser().parse_args(["load", "soak", "--writers", "0"]))
    assert (node.writers, node.on_host) == (0, False)
    with pytest.raises(SystemExit, match="writers"):
        config_from_namespace(build_parser().parse_args(["load", "soak", "--writers", "17"]))


class _Answers:
    """A node whose GET /admin/invariants gives these bodies in turn (the last one repeated)."""

    admin_token = "t"

    def __init__(self, *bodies: bytes) -> None:
        self.bodies = list(bodies)
        self.asked = 0

    async def aget(self, path: str, token: str, timeout_s: float) -> bytes:
        assert path == "/admin/invariants"
        self.asked += 1
        return self.bodies[min(self.asked, len(self.bodies)) - 1]


MISSING = b'{"trips": {}, "missing": ["writer-1"]}'
ANSWERED = b'{"trips": {"no_dangling_entries": 0}, "missing": []}'


async def test_a_writer_missing_once_from_admin_invariants_is_asked_again() -> None:
    node = _Answers(MISSING, ANSWERED)
    trips, missing = await _invariant_trips(node, 1.0, tries=4, pause_s=0.0)  # type: ignore[arg-type]
    assert (trips, missing, node.asked) == ({"no_dangling_entries": 0}, [], 2)


async def test_a_writer_missing_every_time_fails_the_invariants_check_by_name() -> None:
    node = _Answers(MISSING)
    trips, missing = await _invariant_trips(node, 1.0, tries=3, pause_s=0.0)  # type: ignore[arg-type]
    assert (trips, missing, node.asked) == (None, ["writer-1"], 3)
    before = host_verdict(invariant_trips=None)
    assert before.passed  # the verdict alone only notes it ...
    after = _fail_missing(before, missing, 3)
    assert not after.passed and failed(after) == ["invariants"]  # ... the soak fails it
    assert "writer-1 missing from GET /admin/invariants" in after.check("invariants").detail
    assert _fail_missing(before, [], 3) is before
