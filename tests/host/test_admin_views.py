"""The host's views, pure parts (host/admin_views.py): which GC pauses a role answers, how the
timeline names each pause's process, which exposition lines the dashboards' sampler keeps."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from monotape.histograms.gc import GcMonitor, GcPause
from monotape.histograms.query import Percentiles
from monotape.platform.host.admin_views import (
    HOST_MIN_SERIES,
    ProcessPauses,
    gc_pauses_state,
    host_max_series,
    keep_sampled,
    pauses_in,
    timeline_by_process,
)

pauses_st = st.lists(
    st.builds(
        GcPause,
        generation=st.integers(0, 2),
        start_ms=st.integers(0, 100_000),
        duration_ns=st.integers(0, 10**9),
    ),
    max_size=60,
)


@given(pauses_st, st.integers(0, 2), st.integers(1, 30))
def test_a_role_answers_at_most_cap_pauses_older_generations_and_longer_ones_first(
    pauses: list[GcPause], min_generation: int, cap: int
) -> None:
    kept, left_out = pauses_in(pauses, min_generation, cap)
    eligible = [p for p in pauses if p.generation >= min_generation]
    assert len(kept) == min(cap, len(eligible)) and left_out == len(eligible) - len(kept)
    assert [p.start_ms for p in kept] == sorted(p.start_ms for p in kept)
    assert all(p.generation >= min_generation for p in kept)
    dropped = list(eligible)
    for p in kept:
        dropped.remove(p)
    # nothing left out outranks what was kept: (generation, duration)
    if kept and dropped:
        worst_kept = min((p.generation, p.duration_ns) for p in kept)
        assert all((p.generation, p.duration_ns) <= worst_kept for p in dropped)


async def test_the_state_answers_the_window_and_refuses_a_bad_number() -> None:
    monitor = GcMonitor()
    for gen in (0, 2, 1):
        monitor.callback("start", {"generation": gen})
        monitor.callback("stop", {"generation": gen, "collected": 0, "uncollectable": 0})
    pauses = monitor.pauses()
    provider = gc_pauses_state(monitor)
    lo, hi = pauses[0].start_ms, pauses[-1].start_ms + 1
    status, body = await provider({"start_ms": str(lo), "end_ms": str(hi)})
    assert status == 200
    got = msgspec.json.decode(body)
    assert len(got["pauses"]) == 3 and got["left_out"] == 0
    status, body = await provider({"start_ms": str(lo), "min_generation": "1"})
    assert [p["generation"] for p in msgspec.json.decode(body)["pauses"]] == [2, 1]
    status, body = await provider({"start_ms": "soon"})
    assert status == 400 and b"start_ms" in body


def _pause(gen: int, start_ms: int) -> GcPause:
    return GcPause(gen, start_ms, 1_000_000)


def test_the_timeline_names_the_process_of_each_pause_in_its_slot() -> None:
    zeros = dict.fromkeys(("min_us", "p50_us", "p90_us", "p99_us", "p999_us", "p9999_us"), 0)
    row = Percentiles("write", 10_000, 20_000, 1, 1, **zeros, max_us=0)
    got = ProcessPauses(
        by_process={
            "writer-0": [_pause(2, 12_000), _pause(0, 31_000)],
            "sequencer": [_pause(2, 12_000), _pause(1, 19_999)],
        }
    )
    slots = timeline_by_process({"write": [row]}, got)
    assert [s["start_ms"] for s in slots] == [10_000, 30_000]
    first = [(p["process"], p["generation"], p["start_ms"]) for p in slots[0]["gc_pauses"]]
    assert first == [("sequencer", 2, 12_000), ("writer-0", 2, 12_000), ("sequencer", 1, 19_999)]
    assert "write" in slots[0]["stages"]
    assert [p["process"] for p in slots[1]["gc_pauses"]] == ["writer-0"]  # a pause alone: a slot


def test_the_sampler_keeps_only_the_lines_the_panels_read() -> None:
    text = (
        "# HELP monotape_connections Terminals\n"
        "# TYPE monotape_connections gauge\n"
        "monotape_connections 3.0\n"
        "# HELP other_total Not drawn\n"
        "# TYPE other_total counter\n"
        'other_total{a="b"} 9.0\n'
        "# TYPE monotape_stage_duration_seconds histogram\n"
        'monotape_stage_duration_seconds_bucket{stage="write",le="0.01"} 4.0\n'
        'monotape_stage_duration_seconds_count{stage="write"} 4.0\n'
    )
    kept = keep_sampled(text, {"monotape_connections", "monotape_stage_duration_seconds_bucket"})
    samples = [s.name for f in text_string_to_metric_families(kept) for s in f.samples]
    assert samples == ["monotape_connections", "monotape_stage_duration_seconds_bucket"]


def test_the_dashboard_ring_has_room_for_every_writer_auto_can_start() -> None:
    """~130 series a writer over ~500 for the rest (2 writers filled 763): 16 writers, the most
    ``--writers auto`` starts, must fit without the cap dropping any."""
    assert host_max_series(1) == host_max_series(2) == HOST_MIN_SERIES
    for writers in range(1, 17):
        assert host_max_series(writers) >= 500 + 130 * writers + 100  # headroom
    assert host_max_series(16) > host_max_series(8)
