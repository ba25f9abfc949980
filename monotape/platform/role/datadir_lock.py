"""One ``monotape run`` per data dir: an exclusive ``flock`` on ``<data-dir>/run.lock``.

Two nodes (or hosts) on one data dir would issue epochs from the same store, share the dev key
pair and write the same HDR interval logs. The node and the host take this lock first thing in
``start`` and hold it until ``stop``; the kernel releases it when the process dies, kill -9
included, so a crashed node never leaves a stale lock behind. The file keeps the holder's pid so
the refusal can name it. Only ``monotape run`` takes it: the host's role processes (children of
the holder) and the client commands beside a running node (``token``, ``tape``, ``hdr``,
``load``) never do.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Final

__all__ = ["LOCK_FILE", "DataDirInUse", "DataDirLock", "lock_data_dir"]

LOCK_FILE: Final = "run.lock"


class DataDirInUse(RuntimeError):
    """Another process holds the data dir; ``str()`` is one line naming the dir and its pid."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        holder = f"monotape pid {pid}" if pid else "another monotape process"
        super().__init__(
            f"data dir {data_dir} is in use by {holder}: stop it, or pass another --data-dir"
        )
        self.data_dir = data_dir
        self.pid = pid


class DataDirLock:
    """The held lock (an open fd); ``release`` is idempotent."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        # The file stays: unlinking it would let a third process lock a fresh inode while a
        # second still waits on the old one. Closing the fd drops the flock.
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _holder(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        pid = int(os.pread(fd, 32, 0).decode("ascii", "replace").strip())
        return pid if pid > 0 else None
    return None  # caught between the holder's lock and its pid write, or a foreign file


def lock_data_dir(data_dir: str | Path) -> DataDirLock:
    """Take the data dir's run lock without waiting, or raise ``DataDirInUse``."""
    where = Path(data_dir).resolve()
    where.mkdir(parents=True, exist_ok=True)
    path = where / LOCK_FILE
    # O_CLOEXEC: the host's role processes must not inherit (and so outlive it holding) the lock.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _holder(fd)
        os.close(fd)
        raise DataDirInUse(where, pid) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return DataDirLock(path, fd)
