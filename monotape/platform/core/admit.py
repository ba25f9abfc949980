"""The ordering guard: one rule, shared by the sequencer and every terminal SDK.

design (Ordering): a tick whose version is at or below the symbol's current version is never
applied. An exact repeat of the current version is a *duplicate* (the redundant twin's copy);
anything older is a *regression* (a late twin, a stale epoch). Wall clocks never arbitrate.
"""

from __future__ import annotations

from enum import IntEnum

from monotape.platform.model import Version

__all__ = ["Verdict", "VersionGuard", "admit"]


class Verdict(IntEnum):
    APPLIED = 0
    DUPLICATE = 1
    REGRESSION = 2


APPLIED = Verdict.APPLIED
DUPLICATE = Verdict.DUPLICATE
REGRESSION = Verdict.REGRESSION


def admit(held: Version | None, incoming: Version) -> Verdict:
    """Decide whether ``incoming`` may replace ``held`` (``None``: nothing held yet)."""
    if held is None or incoming > held:
        return APPLIED
    if incoming == held:
        return DUPLICATE
    return REGRESSION


class VersionGuard:
    """Per-key current versions; ``check`` applies the rule and remembers what it applied."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[int, Version] = {}

    def check(self, key: int, incoming: Version) -> Verdict:
        held = self._held.get(key)
        if held is None or incoming > held:
            self._held[key] = incoming
            return APPLIED
        return DUPLICATE if incoming == held else REGRESSION

    def held(self, key: int) -> Version | None:
        return self._held.get(key)

    def __len__(self) -> int:
        return len(self._held)
