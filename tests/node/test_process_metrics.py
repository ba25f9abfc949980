"""role/process_metrics.py: the CPU wait read from schedstat, and the process metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monotape import metric_names as m
from monotape.platform.role.process_metrics import (
    CpuWaitCollector,
    main_thread_schedstat,
    parse_schedstat,
    register_process_metrics,
)


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    text = generate_latest(registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


@given(st.tuples(*[st.integers(0, 2**63)] * 3))
def test_parse_reads_the_three_counts(fields: tuple[int, int, int]) -> None:
    assert parse_schedstat(" ".join(map(str, fields)) + "\n") == fields


@pytest.mark.parametrize("text", ["", "1 2", "1 2 3 4", "1 -2 3", "a b c", "1.5 2 3"])
def test_parse_refuses_what_is_not_three_counts(text: str) -> None:
    with pytest.raises(ValueError, match="three counts"):
        parse_schedstat(text)


def test_the_wait_is_the_second_field_in_seconds(tmp_path: Path) -> None:
    f = tmp_path / "schedstat"
    f.write_text("5000000000 2500000000 812\n")
    reg = CollectorRegistry()
    reg.register(CpuWaitCollector(f))
    assert _samples(reg) == {m.CPU_WAIT: 2.5}
    f.write_text("5000000000 3750000000 900\n")  # read at every scrape
    assert _samples(reg) == {m.CPU_WAIT: 3.75}


@pytest.mark.parametrize("content", [None, "not a schedstat\n"])
def test_absent_without_a_readable_schedstat(tmp_path: Path, content: str | None) -> None:
    f = tmp_path / "schedstat"
    if content is not None:
        f.write_text(content)
    reg = CollectorRegistry()
    reg.register(CpuWaitCollector(f))
    assert _samples(reg) == {}


def test_every_process_exports_cpu_memory_fds_and_its_wait() -> None:
    if not main_thread_schedstat().exists():
        pytest.skip("no /proc/<pid>/task/<tid>/schedstat here (not Linux, or no schedstats)")
    reg = CollectorRegistry()
    register_process_metrics(reg)
    got = _samples(reg)
    assert {"process_cpu_seconds_total", m.PROCESS_RSS, m.CPU_WAIT} <= set(got)
    assert got[m.CPU_WAIT] >= 0
