"""The liveness beat (host/beats.py): the segment's slots, a role's beat and holds, and the
host's judge, fed values (no sleeps: the clock is passed in)."""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from monotape.platform.host.beats import (
    Beat,
    BeatTable,
    Liveness,
    Reading,
    cpu_wait_ns,
    disk_wait,
)

MS = 1_000_000
S = 1_000 * MS


@pytest.fixture
def table() -> Iterator[BeatTable]:
    t = BeatTable.create(f"monotape-{os.getpid()}-beats{uuid.uuid4().hex[:8]}", 4)
    yield t
    t.close()
    t.unlink()


def test_a_beat_lands_in_its_own_slot_and_a_reset_forgets_it(table: BeatTable) -> None:
    now = [5 * S]
    role = BeatTable.attach(table.name)
    beat = Beat(role, 2, lambda: now[0], pid=4242)
    beat.beat()
    assert table.read(2) == Reading(4242, 5 * S, 0)
    assert table.read(1) == Reading(0, 0, 0)
    table.reset(2)
    assert table.read(2) == Reading(0, 0, 0)
    role.close()
    with pytest.raises(ValueError, match="outside"):
        Beat(table, table.slots)


def test_holds_nest_and_their_end_is_a_beat(table: BeatTable) -> None:
    now = [1 * S]
    beat = Beat(table, 0, lambda: now[0], pid=7)
    beat.hold()
    beat.hold()  # a collection inside a slow write
    now[0] = 2 * S
    beat.release()
    assert table.read(0).held_ns == 1 * S  # still held by the outer one
    with beat.holding():
        pass
    beat.release()
    assert table.read(0) == Reading(7, 2 * S, 0)
    beat.release()  # one too many: ignored


def test_a_garbage_collection_holds_the_beat(table: BeatTable) -> None:
    seen: list[int] = []
    beat = Beat(table, 1, pid=9)

    def during(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(table.read(1).held_ns)

    beat.install_gc()
    gc.callbacks.append(during)  # after the beat's: it sees the hold
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(during)
        beat.uninstall_gc()
    assert seen and all(seen)
    assert table.read(1).held_ns == 0 and table.read(1).pid == 9


def judge(late_ns: int = 10**15) -> Liveness:
    """The judge; checks may come far apart in these tests (``late_ns``: no host stall)
    but in the one about the host's own stall."""
    return Liveness(
        {"sequencer": 300 * MS, "writer-0": 1_500 * MS, "venue": 0},
        held_limit_ns=10 * S,
        start_limit_ns=30 * S,
        late_ns=late_ns,
    )


def test_a_silence_past_its_limit_is_hung_and_within_it_is_not() -> None:
    live = judge()
    every = 50 * MS
    running = {"sequencer": (11, 0, Reading(11, 10 * S, 0))}
    assert live.check(10 * S + 300 * MS, every, running) == []
    (hung,) = live.check(10 * S + 350 * MS, every, running)
    assert (hung.name, hung.pid, hung.held, hung.started) == ("sequencer", 11, False, True)
    assert hung.silent_s == pytest.approx(0.35) and hung.limit_s == pytest.approx(0.3)
    assert live.worst_ns["sequencer"] == 350 * MS


def test_a_hold_is_judged_by_the_held_limit_and_a_disk_wait_counts_as_one() -> None:
    live = judge()
    every = 50 * MS
    held = {"sequencer": (11, 0, Reading(11, 10 * S, 10 * S))}
    assert live.check(15 * S, every, held) == []  # a 5 s collection: not hung
    assert [h.held for h in live.check(20 * S + MS, every, held)] == [True]
    assert "sequencer" not in live.worst_ns  # held silences are not the limit's measure
    silent = {"sequencer": (11, 0, Reading(11, 30 * S, 0))}
    asked: list[int] = []

    def in_d(pid: int) -> bool:
        asked.append(pid)
        return True

    assert live.check(30 * S + 20 * MS, every, silent, in_d) == []
    assert asked == []  # only a role past its limit is looked at
    assert live.check(31 * S, every, silent, in_d) == [] and asked == [11]


def test_before_its_first_beat_a_role_has_the_start_limit_and_an_old_beat_is_not_its() -> None:
    live = judge()
    every = 50 * MS
    # the slot still holds the dead process's beat (pid 10): the new one (12) has not beaten
    starting = {"writer-0": (12, 100 * S, Reading(10, 1 * S, 0))}
    assert live.check(129 * S, every, starting) == []
    (hung,) = live.check(131 * S, every, starting)
    assert not hung.started and hung.limit_s == 30


def test_a_wait_for_a_core_is_the_box_s_not_a_hang_but_a_stopped_role_is_hung() -> None:
    live = judge()
    every = 50 * MS
    waited = {11: 1 * S}
    running = {"sequencer": (11, 0, Reading(11, 10 * S, 0))}
    assert live.check(10 * S + 10 * MS, every, running, cpu_wait=waited.get) == []  # its base
    waited[11] += 200 * MS  # runnable, but the box gave it no core for 200 of its 350 ms
    assert live.check(10 * S + 350 * MS, every, running, cpu_wait=waited.get) == []
    assert live.worst_ns["sequencer"] == 150 * MS
    (hung,) = live.check(10 * S + 520 * MS, every, running, cpu_wait=waited.get)
    assert hung.silent_s == pytest.approx(0.32)  # SIGSTOPped: no more run-queue wait
    unknown = {"sequencer": (11, 0, Reading(11, 20 * S, 0))}
    assert live.check(20 * S, every, unknown, cpu_wait=lambda pid: None) == []
    assert len(live.check(20 * S + 400 * MS, every, unknown, cpu_wait=lambda pid: None)) == 1


def test_cpu_wait_reads_the_main_thread_s_schedstat(tmp_path: Path) -> None:
    (tmp_path / "7" / "task" / "7").mkdir(parents=True)
    (tmp_path / "7" / "task" / "7" / "schedstat").write_text("100 250 3\n")
    assert cpu_wait_ns(7, tmp_path) == 250
    assert cpu_wait_ns(8, tmp_path) is None
    own = cpu_wait_ns(os.getpid())
    assert own is None or own >= 0


def test_a_role_with_no_limit_is_never_judged() -> None:
    live = judge()
    assert live.check(100 * S, 50 * MS, {"venue": (5, 0, Reading(5, 0, 0))}) == []
    assert live.check(100 * S, 50 * MS, {"other": (5, 0, Reading(5, 0, 0))}) == []


def test_a_host_that_ran_late_judges_nobody_on_its_own_stall() -> None:
    live = judge(late_ns=150 * MS)
    every = 50 * MS
    running = {"sequencer": (11, 0, Reading(11, 10 * S, 0))}
    assert live.check(10 * S + 100 * MS, every, running) == []
    # the host itself slept 2 s past its time: the role's silence may be the box's
    assert live.check(12 * S + 100 * MS, every, running) == []
    for t in range(150, 401, 50):  # checks on time again
        assert live.check(12 * S + t * MS, every, running) == []
    # judged again once it has been silent for its limit while the host ran
    assert [h.name for h in live.check(12 * S + 450 * MS, every, running)] == ["sequencer"]


def test_disk_wait_reads_the_state_after_the_command_name(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text("7 (python3 (x) y) D 1 7 7 0 -1\n")
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "stat").write_text("8 (python3) S 1 8 8 0 -1\n")
    assert disk_wait(7, tmp_path)
    assert not disk_wait(8, tmp_path)
    assert not disk_wait(9, tmp_path)  # gone
    assert not disk_wait(os.getpid())  # this test is running, not waiting on a disk
