"""Which venues' feeds have gone silent, judged from the batches that arrive (issue 40).

A host's (or a NATS node's) sequencer knows its feed handlers only through the bus. Every live
handler publishes at least a batch every ``BEAT_NS`` (100 ms): its ticks, or an empty batch (a
header only, 64 bytes) when its venue had nothing for it, so a quiet venue is never taken for a
dead one. ``FeedLiveness.seen`` is told of every batch (empty ones included); ``down`` names the
venues none of whose handlers was heard for ``limit_ns`` (default 500 ms: five missed beats,
well past a GC pause or a busy core's scheduling delay, and inside the 1 s a trader is told).
A venue never heard is not judged (a replay's venue, a venue not yet started); after a restart
nothing is judged for one limit (every handler gets the time to be heard once). No I/O: the
caller passes the monotonic clock's now.
"""

from __future__ import annotations

__all__ = ["BEAT_NS", "DOWN_AFTER_NS", "FeedLiveness"]

BEAT_NS = 100_000_000  # a live handler's batches are never further apart than this
DOWN_AFTER_NS = 500_000_000  # five beats missed: the venue's prices have stopped


class FeedLiveness:
    """Last batch heard per (venue, handler); ``down`` at any now."""

    __slots__ = ("_heard", "_since", "limit_ns")

    def __init__(self, start_ns: int, limit_ns: int = DOWN_AFTER_NS) -> None:
        if limit_ns <= 0:
            raise ValueError(f"limit_ns must be positive, got {limit_ns}")
        self.limit_ns = limit_ns
        self._since = start_ns
        self._heard: dict[str, dict[str, int]] = {}  # venue -> handler -> last heard (ns)

    def seen(self, venue: str, handler: str, now_ns: int) -> None:
        handlers = self._heard.get(venue)
        if handlers is None:
            handlers = self._heard[venue] = {}
        handlers[handler] = now_ns

    def down(self, now_ns: int) -> frozenset[str]:
        """The venues heard before whose every handler has been silent for the limit."""
        if now_ns - self._since < self.limit_ns:
            return frozenset()
        cutoff = now_ns - self.limit_ns
        return frozenset(
            venue for venue, handlers in self._heard.items() if max(handlers.values()) < cutoff
        )
