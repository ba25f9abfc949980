"""The tick ages a FRAME entry carries (docs/ring.md, "Tick ages"): when each tick the frame
carries was decoded, and its instrument, so that a writer process, which never sees a tick,
records the ``tick_to_write`` stage. Bytes only, no I/O; ``layout`` puts them in an entry."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TickAges"]


@dataclass(frozen=True, slots=True)
class TickAges:
    """When a frame's admitted ticks were decoded, so that a writer process, which never sees a
    tick, records each one's ``tick_to_write`` (core/stamps.py, ``FrameTicks``): run ``i`` is
    ``ticks[i]`` consecutive ticks decoded at ``decoded[i]`` (monotonic ns), and ``iids`` names
    every tick's instrument, in the same order. Raw arrays in native byte order: i64, u32, u16
    (``numpy.frombuffer`` reads each without a copy). A producer gives ``bytes``; a reader gets
    views of its copy of the slot."""

    decoded: bytes | memoryview
    ticks: bytes | memoryview
    iids: bytes | memoryview

    @property
    def runs(self) -> int:
        return len(self.decoded) // 8

    @property
    def count(self) -> int:
        """How many ticks (the sum of ``ticks``)."""
        return len(self.iids) // 2

    @property
    def nbytes(self) -> int:
        return len(self.decoded) + len(self.ticks) + len(self.iids)
