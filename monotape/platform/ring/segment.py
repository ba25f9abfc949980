"""A ring segment in /dev/shm: its name, its header words, create / open, and the sweep of
segments a dead node left behind (docs/ring.md, Lifecycle).

Name ``monotape-<node pid>-<tag>``: the node's pid (the supervisor's, not the sequencer's, so a
restarted sequencer finds its ring again) keeps two nodes on one host apart, and tells the
sweep at a node's start whether the owner is alive. Plain ``os.open`` + ``mmap``, not
``multiprocessing.shared_memory``: on Python 3.11 every ``SharedMemory`` that attaches registers
the name with the resource tracker, which unlinks it when that process exits (bpo-39959;
``track=False`` only arrives in 3.13), so a writer that exits would delete the sequencer's ring
under everyone. Here nothing unlinks but the producer and the sweep.

Header words (u64 each, at 8-byte aligned offsets, through one ``memoryview`` cast to ``"Q"``:
CPython moves a word with one 8-byte load or store, so a word is never seen half-written).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import struct
from pathlib import Path

from monotape.platform.ring.layout import LAYOUT_VERSION, MAGIC, SNAPSHOT_HEAD, Geometry, RingConfig

__all__ = [
    "SHM_DIR",
    "W_GENERATION",
    "W_HEAD",
    "W_PRODUCER",
    "W_READERS",
    "Segment",
    "map_segment",
    "pid_alive",
    "segment_name",
    "sweep_leftovers",
]

SHM_DIR = Path("/dev/shm")
_NAME = re.compile(r"^monotape-(\d+)-([a-z0-9_.-]{1,40})$")

W_MAGIC, W_VERSION, W_TOTAL, W_SLOT, W_SLOTS = 0, 1, 2, 3, 4
W_SNAP_IIDS, W_SNAP_SLOT, W_READERS_MAX, W_PRODUCER, W_GENERATION, W_HEAD = 5, 6, 7, 8, 9, 10
W_READERS = 16  # reader table: word 16 + index holds the reader's pid (0: none)


def segment_name(node_pid: int, tag: str = "ring") -> str:
    name = f"monotape-{node_pid}-{tag}"
    if not _NAME.match(name):
        raise ValueError(f"not a ring segment name: {name!r} (tag: [a-z0-9_.-], 1-40 chars)")
    return name


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def sweep_leftovers(directory: Path = SHM_DIR) -> list[str]:
    """Remove ``monotape-<pid>-*`` segments whose pid is dead (a node killed with kill -9 never
    unlinked its ring); returns the names removed. A reused pid keeps its segment until then."""
    removed = []
    for path in directory.glob("monotape-*"):
        m = _NAME.match(path.name)
        if m and not pid_alive(int(m.group(1))):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path.name)
    return removed


def map_segment(path: Path, size: int | None) -> mmap.mmap:
    """A shared mapping of ``path``: a new file of ``size`` bytes (reserved now, exclusive
    create; removed again if that fails), or (``size`` None) the existing one, whole."""
    create = size is not None
    flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if size is not None:
            # Reserve the pages now: a /dev/shm too small fails here with ENOSPC, not later
            # with a SIGBUS in the middle of a publish.
            os.posix_fallocate(fd, 0, size)
        else:
            size = os.fstat(fd).st_size
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        if create:
            path.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)  # the mapping keeps the segment


def _geometry_of(words: memoryview, size: int, path: Path) -> Geometry:
    if size < 4096 or words[W_MAGIC] != MAGIC or words[W_VERSION] != LAYOUT_VERSION:
        raise ValueError(f"{path} is not a ring segment of layout {LAYOUT_VERSION}")
    g = RingConfig(
        total_bytes=words[W_TOTAL],
        slot_bytes=words[W_SLOT],
        snapshot_iids=words[W_SNAP_IIDS],
        snapshot_chunk_bytes=words[W_SNAP_SLOT] - SNAPSHOT_HEAD,
        max_readers=words[W_READERS_MAX],
    ).geometry()
    if g.slots != words[W_SLOTS] or g.total_bytes != size:
        raise ValueError(f"{path}: header and size disagree")
    return g


class Segment:
    """A mapped segment and its words; closes without leaving exported buffers behind."""

    def __init__(self, path: Path, mm: mmap.mmap, geometry: Geometry) -> None:
        self.path = path
        self.name = path.name
        self.mm = mm
        self.words = memoryview(mm).cast("Q")
        self.geometry = geometry
        self._readers_fmt = struct.Struct(f"={geometry.max_readers}Q")

    @classmethod
    def create(cls, path: Path, g: Geometry) -> Segment:
        """A new segment (FileExistsError if the name is taken), header written magic last."""
        seg = cls(path, map_segment(path, g.total_bytes), g)
        w = seg.words
        for i, v in (
            (W_VERSION, LAYOUT_VERSION),
            (W_TOTAL, g.total_bytes),
            (W_SLOT, g.slot_bytes),
            (W_SLOTS, g.slots),
            (W_SNAP_IIDS, g.snapshot_iids),
            (W_SNAP_SLOT, g.snapshot_slot_bytes),
            (W_READERS_MAX, g.max_readers),
            (W_PRODUCER, os.getpid()),
            (W_GENERATION, 1),
        ):
            w[i] = v
        w[W_MAGIC] = MAGIC  # last: an attacher never sees a half-written header as valid
        return seg

    @classmethod
    def open(cls, path: Path) -> Segment:
        """An existing segment, its header checked against its size."""
        mm = map_segment(path, None)
        words = memoryview(mm).cast("Q")
        try:
            g = _geometry_of(words, len(mm), path)
        except BaseException:
            words.release()
            mm.close()
            raise
        words.release()
        return cls(path, mm, g)

    def reader_pids(self) -> tuple[int, ...]:
        pids: tuple[int, ...] = self._readers_fmt.unpack_from(self.mm, W_READERS * 8)
        return pids

    def close(self) -> None:
        if not self.mm.closed:
            self.words.release()
            self.mm.close()
