"""What the spawned processes of the ring's tests run (importable: spawn pickles the target)."""

from __future__ import annotations

import asyncio
import select
import signal
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

from monotape.platform.ring import (
    Gap,
    Lapped,
    RingConfig,
    RingFollower,
    RingFrame,
    RingRead,
    ShmReader,
    ShmRing,
)
from tests.ring.frames import expected_frame

__all__ = ["attach_and_exit", "create_and_wait", "follow", "hammer", "wait_for_one"]


def create_and_wait(tag: str, q: Queue[Any]) -> None:
    ring = ShmRing.create(
        RingConfig(total_bytes=1 << 20, slot_bytes=8192, snapshot_iids=64), tag=tag
    )
    q.put(ring.name)
    signal.pause()  # until SIGKILL: nothing gets to unlink


def attach_and_exit(name: str) -> None:
    reader = ShmReader.attach(name, 0)
    reader.close()


def wait_for_one(name: str, ready: Queue[Any], out: Queue[Any]) -> None:
    """Block in select() with no timeout on the doorbell: only a ring wakes this process."""
    reader = ShmReader.attach(name, 0)
    ready.put(True)
    readable, _, _ = select.select([reader.fileno()], [], [])
    reader.drain_bell()
    got = reader.poll()
    out.put((bool(readable), got.frame_no if isinstance(got, RingFrame) else repr(got)))
    reader.close()


def follow(
    name: str,
    index: int,
    last_frame: int,
    records: int,
    ready: Queue[Any],
    out: Queue[Any],
    seen: Synchronized[int],
) -> None:
    """Follow the ring with the asyncio driver until ``last_frame``; check every byte; report
    the entry numbers read, the laps, the mismatches and the counters."""
    reader = ShmReader.attach(name, index)
    frames: list[int] = []
    laps: list[tuple[int, int]] = []
    gaps: list[str] = []
    bad: list[int] = []

    async def main() -> int:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def on_read(read: RingRead) -> None:
            if isinstance(read, Lapped):
                laps.append((read.first, read.resume))
            elif isinstance(read, Gap):
                gaps.append(read.cause.value)
            else:
                sent = expected_frame(read.frame_no, records)
                if (read.records.as_dict(), read.priority.as_dict(), read.boundary_ns) != (
                    sent.records,
                    sent.priority,
                    sent.boundary_ns,
                ):
                    bad.append(read.no)
                frames.append(read.no)
                seen.value = read.frame_no
                if read.frame_no == last_frame and not done.done():
                    done.set_result(None)

        follower = RingFollower(reader, on_read, loop)
        follower.start()
        ready.put(index)
        await done
        follower.stop()
        return follower.wakes

    wakes = asyncio.run(main())
    c = reader.counters
    out.put(
        {
            "index": index,
            "frames": frames,
            "laps": laps,
            "gaps": gaps,
            "bad": bad,
            "wakes": wakes,
            "counted_laps": c.laps,
            "missed": c.missed,
        }
    )
    reader.close()


def hammer(tag: str, frames: int, records: int, q: Queue[Any], go: Event, done: Event) -> None:
    """Create a ring of 3 slots and publish ``frames`` frames as fast as possible once ``go``:
    a reader in another process is lapped and races the copies over and over."""
    ring = ShmRing.create(
        RingConfig(total_bytes=3 * 65536 + 3 * 4096, slot_bytes=65536, snapshot_iids=64), tag=tag
    )
    sent = [expected_frame(k, records) for k in range(1, frames + 1)]
    q.put(ring.name)
    go.wait(60)
    for entry in sent:
        ring.publish(entry)
    done.wait(120)  # the reader has read the last frame: now unlink
    ring.close()
