"""One ``monotape run`` per data dir: the lock, its refusal, the kernel freeing it on kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monotape.platform.role.datadir_lock import LOCK_FILE, DataDirInUse, lock_data_dir

DEADLINE_S = 60.0  # a busy shared box: wait for conditions, never for a fixed time

HOLDER = """
import sys, time
from monotape.platform.role.datadir_lock import lock_data_dir
lock = lock_data_dir(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_lock_is_refused_naming_the_dir_and_the_holder(tmp_path: Path) -> None:
    held = lock_data_dir(tmp_path / "state")
    with pytest.raises(DataDirInUse) as refused:
        lock_data_dir(tmp_path / "state")
    text = str(refused.value)
    assert str((tmp_path / "state").resolve()) in text and f"pid {os.getpid()}" in text
    assert "\n" not in text and "--data-dir" in text
    assert refused.value.pid == os.getpid()
    held.release()
    held.release()  # idempotent
    again = lock_data_dir(tmp_path / "state")  # free once released; the file stays
    assert (tmp_path / "state" / LOCK_FILE).exists()
    again.release()


def test_other_data_dirs_do_not_conflict(tmp_path: Path) -> None:
    a, b = lock_data_dir(tmp_path / "a"), lock_data_dir(tmp_path / "b")
    assert a.held and b.held
    a.release()
    b.release()
    assert not a.held


def test_a_holder_killed_with_sigkill_frees_the_data_dir(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(DataDirInUse) as refused:
            lock_data_dir(tmp_path)
        assert refused.value.pid == child.pid
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while True:  # the kernel drops the flock with the process's last fd
            try:
                lock = lock_data_dir(tmp_path)
                break
            except DataDirInUse:
                assert time.monotonic() < deadline, "the lock outlived its holder"
                time.sleep(0.05)
        lock.release()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=64))
def test_whatever_the_lock_file_holds_the_refusal_is_one_line(
    tmp_path: Path, content: bytes
) -> None:
    # A file from an older run, a foreign writer, or a holder caught between lock and pid write.
    where = tmp_path / "any"
    held = lock_data_dir(where)
    try:
        (where / LOCK_FILE).write_bytes(content)
        with pytest.raises(DataDirInUse) as refused:
            lock_data_dir(where)
        text = str(refused.value)
        assert "\n" not in text and str(where.resolve()) in text
        assert refused.value.pid is None or isinstance(refused.value.pid, int)
    finally:
        held.release()
