"""Every process's /metrics as one (platform/host/aggregate.py, admin.py's Observer): two fake
role registries served the way roles serve theirs (telemetry.serve_metrics, real HTTP on
loopback) come out as one exposition with a ``process`` label per sample, parsed back with
Prometheus' own parser; a role that does not answer is left out and counted, never an error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from monotape import metric_names as m
from monotape.loadgen.launch import parse_samples, sum_samples
from monotape.platform.host.admin import Observer, terminal_count
from monotape.platform.host.aggregate import merge, read_port, scrape_all
from monotape.platform.host.supervisor import ProcessTable
from monotape.platform.host.telemetry import port_file, serve_metrics


def role_registry(terminals: int, frames: int, latency_s: float) -> CollectorRegistry:
    r = CollectorRegistry()
    Gauge(m.CONNECTIONS, "terminals", registry=r).set(terminals)
    Counter(m.counter_base(m.FRAMES_SENT), "frames", registry=r).inc(frames)
    Histogram(m.STAGE_DURATION, "stage", ["stage"], registry=r).labels("write").observe(latency_s)
    return r


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    serve_metrics(role_registry(7, 100, 0.002), d, "writer-0")
    serve_metrics(role_registry(5, 60, 0.030), d, "writer-1")
    return d


@pytest.fixture
async def mute_port() -> AsyncIterator[int]:
    """A port that accepts and never answers: a role stuck in a long pause."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3600)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


def written(run_dir: Path, name: str, port: int) -> None:
    port_file(run_dir, name).write_text(f"{port}\n")


async def test_two_roles_come_out_as_one_exposition_with_a_process_label_each(
    run_dir: Path,
) -> None:
    got = await scrape_all(run_dir, ["writer-0", "writer-1"], timeout_s=5.0)
    assert got.failed == {}
    families, problems = merge(got.texts)
    assert problems == []
    by_name = {f.name: f for f in families}
    # one family per name, samples of both processes in it
    conns = by_name[m.CONNECTIONS]
    assert {s.labels["process"]: s.value for s in conns.samples} == {
        "writer-0": 7.0,
        "writer-1": 5.0,
    }
    hist = by_name[m.STAGE_DURATION]
    assert hist.type == "histogram"
    counts = {s.labels["process"]: s.value for s in hist.samples if s.name.endswith("_count")}
    assert counts == {"writer-0": 1.0, "writer-1": 1.0}


async def test_the_rendered_exposition_parses_back_and_sums_like_one_process(
    run_dir: Path,
) -> None:
    table = ProcessTable([("writer-0", "writer"), ("writer-1", "writer")])
    for name in ("writer-0", "writer-1"):
        table.started(name, 1, 0, 0)
        table.mark_ready(name)
    observer = Observer(table, run_dir, timeout_s=5.0)
    got = await observer.scrape()
    text = observer.exposition(got).decode()
    samples = parse_samples(text)  # Prometheus' own parser: the exposition is valid
    # a total is PromQL's sum over the process label: no summed series beside them
    assert sum_samples(samples, m.CONNECTIONS) == 12.0
    assert sum_samples(samples, m.FRAMES_SENT) == 160.0
    assert sum_samples(samples, m.FRAMES_SENT, process="writer-1") == 60.0
    le = {"stage": "write", "le": "0.005"}
    assert sum_samples(samples, f"{m.STAGE_DURATION}_bucket", **le) == 1.0  # writer-0's only
    assert sum_samples(samples, f"{m.STAGE_DURATION}_count") == 2.0
    # the host's own metrics about its roles keep their own process label
    assert sum_samples(samples, m.PROCESS_UP, process="writer-1", role="writer") == 1.0
    names = {f.name for f in text_string_to_metric_families(text)}
    assert len(names) == len(list(text_string_to_metric_families(text)))  # no name twice
    assert terminal_count(got.texts["writer-0"]) == 7  # what /admin/processes shows


async def test_a_role_that_does_not_answer_is_left_out_and_counted_never_an_error(
    run_dir: Path, mute_port: int
) -> None:
    written(run_dir, "sequencer", mute_port)  # accepts, never answers
    written(run_dir, "venue", 1)  # nothing listens there
    table = ProcessTable(
        [
            ("sequencer", "sequencer"),
            ("writer-0", "writer"),
            ("writer-1", "writer"),
            ("venue", "venue"),
        ]
    )
    for name in table.slots:
        table.started(name, 1, 0, 0)
        table.mark_ready(name)
    # 5 s: the writers' real threaded HTTP servers must answer in time on a busy machine (the
    # mute one costs the whole timeout, twice)
    observer = Observer(table, run_dir, timeout_s=5.0)
    got = await observer.scrape()
    assert set(got.failed) == {"sequencer", "venue"}
    assert set(got.texts) == {"writer-0", "writer-1"}
    samples = parse_samples(observer.exposition(got).decode())
    assert sum_samples(samples, m.CONNECTIONS) == 12.0  # the others are all there
    failed = m.PROCESS_SCRAPE_FAILURES
    assert sum_samples(samples, failed, process="sequencer") == 1.0
    assert sum_samples(samples, failed, process="venue") == 1.0
    await observer.scrape()
    samples = parse_samples(observer.exposition(got).decode())
    assert sum_samples(samples, failed, process="sequencer") == 2.0


async def test_a_role_without_a_port_file_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    got = await scrape_all(tmp_path, ["writer-0"], timeout_s=0.5)
    assert got.texts == {} and got.failed == {"writer-0": "no port file"}
    port_file(tmp_path, "writer-1").write_text("not a port\n")
    assert read_port(tmp_path, "writer-1") is None


def test_a_clash_of_types_or_a_broken_text_is_reported_and_left_out() -> None:
    a = "# TYPE x gauge\nx 1\n"
    b = "# TYPE x summary\nx_count 2\nx_sum 1\n"
    families, problems = merge({"writer-0": a, "writer-1": b, "venue": "x{ 1\n"})
    assert [(f.name, len(f.samples)) for f in families] == [("x", 1)]
    assert any("writer-1" in p and "summary" in p for p in problems)
    assert any(p.startswith("venue:") for p in problems)


def test_a_role_label_named_process_is_kept_as_exported_process() -> None:
    families, _ = merge({"writer-0": '# TYPE y gauge\ny{process="other"} 1\n'})
    (sample,) = families[0].samples
    assert sample.labels == {"process": "writer-0", "exported_process": "other"}


def test_terminal_count_reads_monotape_connections() -> None:
    assert terminal_count(f"# TYPE {m.CONNECTIONS} gauge\n{m.CONNECTIONS} 42\n") == 42
    assert terminal_count("garbage{") == 0
    assert terminal_count("") == 0
