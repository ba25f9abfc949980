"""Epoch store: numbering, fences, persistence, atomic writes, watchers (both implementations)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from monotape.platform.feeds.epochs import (
    RETAINED_RECORDS,
    EpochRecord,
    EpochStore,
    EpochStoreError,
    FileEpochStore,
    MemoryEpochStore,
    epoch_for,
)

StoreFactory = Callable[[], EpochStore]


@pytest.fixture(params=["memory", "file"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    if request.param == "memory":
        return MemoryEpochStore
    return lambda: FileEpochStore(tmp_path / "epochs")


def test_bump_numbers_from_one_and_fences_never_go_back(make_store: StoreFactory) -> None:
    store = make_store()
    assert store.records("XNAS") == []
    assert store.bump("XNAS", 1_000) == EpochRecord(1, 1_000)
    assert store.bump("XNAS", 5_000) == EpochRecord(2, 5_000)
    # A bump whose fence is earlier than the last one is clamped: fences are non-decreasing.
    assert store.bump("XNAS", 3_000) == EpochRecord(3, 5_000)
    assert store.records("XNAS") == [
        EpochRecord(1, 1_000),
        EpochRecord(2, 5_000),
        EpochRecord(3, 5_000),
    ]
    assert store.records("XNYS") == []  # groups are independent
    assert store.bump("XNYS", 7) == EpochRecord(1, 7)


def test_keeps_the_last_records(make_store: StoreFactory) -> None:
    store = make_store()
    for i in range(RETAINED_RECORDS + 5):
        store.bump("ARCX", i)
    records = store.records("ARCX")
    assert len(records) == RETAINED_RECORDS
    assert records[-1].epoch == RETAINED_RECORDS + 5
    assert [r.epoch for r in records] == list(range(6, RETAINED_RECORDS + 6))


def test_watchers_fire_after_each_bump_of_their_group(make_store: StoreFactory) -> None:
    store = make_store()
    seen: list[EpochRecord] = []
    store.watch("XNAS", seen.append)
    store.bump("XNAS", 10)
    store.bump("XNYS", 10)
    store.bump("XNAS", 20)
    assert seen == [EpochRecord(1, 10), EpochRecord(2, 20)]


def test_watcher_sees_the_record_already_durable(make_store: StoreFactory) -> None:
    store = make_store()
    inside: list[list[EpochRecord]] = []
    store.watch("XNAS", lambda _r: inside.append(store.records("XNAS")))
    store.bump("XNAS", 10)
    assert inside == [[EpochRecord(1, 10)]]


def test_invalid_group_names_are_refused(make_store: StoreFactory) -> None:
    store = make_store()
    for bad in ("", "../etc", ".hidden", "a/b"):
        with pytest.raises(ValueError, match="group"):
            store.bump(bad, 1)


def test_file_store_survives_restart_and_continues_numbering(tmp_path: Path) -> None:
    FileEpochStore(tmp_path).bump("XNAS", 100)
    FileEpochStore(tmp_path).bump("XNAS", 200)
    again = FileEpochStore(tmp_path)
    assert again.records("XNAS") == [EpochRecord(1, 100), EpochRecord(2, 200)]
    assert again.bump("XNAS", 50) == EpochRecord(3, 200)
    assert (tmp_path / "XNAS.json").is_file()


def test_file_store_writes_temp_file_then_replaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileEpochStore(tmp_path)
    store.bump("XNAS", 1)
    calls: list[tuple[str, str]] = []
    synced: list[int] = []
    real_replace, real_fsync = os.replace, os.fsync

    def spy_replace(src: str, dst: str | Path) -> None:
        calls.append((str(src), str(dst)))
        # At the moment of the rename, the old file is still whole.
        assert FileEpochStore(tmp_path).records("XNAS") == [EpochRecord(1, 1)]
        real_replace(src, dst)

    def spy_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "replace", spy_replace)
    monkeypatch.setattr(os, "fsync", spy_fsync)
    store.bump("XNAS", 2)
    assert len(calls) == 1
    src, dst = calls[0]
    assert Path(src).parent == tmp_path and src.endswith(".tmp")
    assert dst == str(tmp_path / "XNAS.json")
    assert len(synced) == 2  # the temp file, then the directory
    assert not list(tmp_path.glob("*.tmp"))


def test_failed_write_leaves_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileEpochStore(tmp_path)
    store.bump("XNAS", 1)

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        store.bump("XNAS", 2)
    monkeypatch.undo()
    assert store.records("XNAS") == [EpochRecord(1, 1)]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"group": "XNAS", "records": [{"epoch": "x", "fence_ts_ns": 1}]}',
        b'{"group": "XNYS", "records": []}',
        b'{"group": "XNAS", "records": [{"epoch": 2, "fence_ts_ns": 1}, '
        b'{"epoch": 1, "fence_ts_ns": 1}]}',
    ],
)
def test_corrupt_file_raises_naming_the_file(tmp_path: Path, content: bytes) -> None:
    store = FileEpochStore(tmp_path)
    path = tmp_path / "XNAS.json"
    path.write_bytes(content)
    with pytest.raises(EpochStoreError, match=r"corrupt epoch file .*XNAS\.json"):
        store.records("XNAS")
    with pytest.raises(EpochStoreError):
        store.bump("XNAS", 1)
    assert path.read_bytes() == content  # a corrupt file is never overwritten silently


def test_epoch_for_picks_newest_record_whose_fence_has_passed() -> None:
    records = [EpochRecord(1, 100), EpochRecord(2, 200), EpochRecord(3, 200), EpochRecord(4, 300)]
    assert epoch_for([], 10**18) == 0
    assert epoch_for(records, 99) == 0
    assert epoch_for(records, 100) == 1
    assert epoch_for(records, 199) == 1
    assert epoch_for(records, 200) == 3  # equal fences: the newer epoch wins
    assert epoch_for(records, 299) == 3
    assert epoch_for(records, 300) == 4
    assert epoch_for(records, 10**18) == 4


def test_concurrent_bumps_from_two_instances_get_distinct_epochs(tmp_path: Path) -> None:
    # Two handler processes sharing a data directory: the flock makes read-modify-write atomic.
    stores = [FileEpochStore(tmp_path), FileEpochStore(tmp_path)]
    got: list[int] = []

    def bump_many(store: FileEpochStore) -> None:
        for _ in range(20):
            got.append(store.bump("XNAS", 1).epoch)

    threads = [threading.Thread(target=bump_many, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 41))
    assert stores[0].records("XNAS")[-1].epoch == 40
