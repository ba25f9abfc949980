"""The role kit: every instrument comes with its collector under the contract's names, its
drivers are the kit's loops, and one close writes the last interval and lets go of GC."""

from __future__ import annotations

import gc
from pathlib import Path

import msgspec
import numpy as np
from prometheus_client import CollectorRegistry

from monotape import metric_names as m
from monotape.clock import FakeClock
from monotape.config import Config
from monotape.histograms import read_intervals
from monotape.platform.role.kit import RoleKit

MS = 1_000_000


def _cfg(tmp_path: Path, *, gc_freeze: bool = False) -> Config:
    cfg = Config(data_dir=str(tmp_path))
    return msgspec.structs.replace(
        cfg, server=msgspec.structs.replace(cfg.server, gc_freeze=gc_freeze)
    )


def _names(registry: CollectorRegistry) -> set[str]:
    return {metric.name for metric in registry.collect()}


def test_a_bare_kit_exports_the_process_metrics_alone(tmp_path: Path) -> None:
    kit = RoleKit(_cfg(tmp_path), "venue", FakeClock())
    names = _names(kit.registry)
    assert "process_resident_memory_bytes" in names
    assert m.GC_PAUSE not in names and m.EVENT_LOOP_LAG not in names
    assert kit.loops() == []
    kit.close()  # nothing to close: no error


def test_each_instrument_registers_its_collector_once(tmp_path: Path) -> None:
    kit = RoleKit(_cfg(tmp_path), "writer-0", FakeClock())
    assert kit.watch_gc() is kit.watch_gc()
    assert kit.watch_loop() is kit.watch_loop()
    assert kit.record_stages() is kit.record_stages()  # a second collector would raise
    names = _names(kit.registry)
    for name in (
        m.GC_PAUSE,
        m.GC_FROZEN_OBJECTS,
        m.EVENT_LOOP_LAG,
        m.EVENT_LOOP_LAG_MAX,
        m.STAGE_LATENCY,
        m.STAGE_DURATION,
    ):
        assert name in names, name
    histograms = kit.record_stages()
    assert kit.loops() == [kit.watch_loop().run, histograms.rotation.run]
    assert histograms.hdr_dir == tmp_path / "hdr"
    kit.close()


def test_close_writes_the_last_interval_under_the_roles_name(tmp_path: Path) -> None:
    clock = FakeClock()
    kit = RoleKit(_cfg(tmp_path), "sequencer", clock)
    calls: list[str] = []
    histograms = kit.record_stages(before=lambda: calls.append("before"))
    histograms.stamps.recorders["hydrate"].add_ns(np.array([3 * MS, 5 * MS], dtype=np.int64))
    clock.advance(1_000 * MS)
    kit.close()
    assert calls == ["before"]
    logs = list((tmp_path / "hdr").iterdir())
    assert logs and all("_sequencer-" in p.name for p in logs)
    hydrate = [iv for iv in read_intervals(tmp_path / "hdr") if iv.stage == "hydrate"]
    assert sum(iv.histogram.get_total_count() for iv in hydrate) == 2


def test_start_freeze_and_close_leave_gc_as_they_found_it(tmp_path: Path) -> None:
    callbacks = list(gc.callbacks)
    kit = RoleKit(_cfg(tmp_path, gc_freeze=True), "handler-A", FakeClock())
    monitor = kit.watch_gc()
    kit.start()
    assert monitor.installed
    try:
        assert kit.freeze() > 0 and gc.get_freeze_count() > 0
    finally:
        kit.close()
    assert not monitor.installed and gc.callbacks == callbacks
    assert gc.get_freeze_count() == 0


def test_freeze_follows_the_config(tmp_path: Path) -> None:
    kit = RoleKit(_cfg(tmp_path, gc_freeze=False), "node", FakeClock())
    kit.watch_gc()
    assert kit.freeze() == 0
    kit.close()
